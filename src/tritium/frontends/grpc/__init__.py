"""gRPC front-end: inference.GRPCInferenceService and grpc.health.v1 on tritium's own HTTP/2
server (``transport/http2``, an asyncio.Protocol on the one event loop)."""
