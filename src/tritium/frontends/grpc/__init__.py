"""gRPC front-end: inference.GRPCInferenceService and grpc.health.v1 on tritium's own HTTP/2
server (``h2`` + ``hpack``, an asyncio.Protocol on the one event loop)."""
