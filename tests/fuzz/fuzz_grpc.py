"""gRPC fuzz targets: wire bytes → ModelInferRequest → decode_request, and structured
ModelInferRequest messages (random datatypes, shapes, contents and raw sizes) that get past
protobuf parsing and deep into the decoder."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from fuzz_harness import Target, byte_inputs, check_rejection
from fuzz_http import check_tensors
from tritonclient.grpc import service_pb2 as pb

from tritium.errors import ServerError
from tritium.frontends.grpc.codec import decode_request
from tritium.extensions.parameters import parse_parameters


def check_grpc_message(msg: pb.ModelInferRequest) -> None:
    try:
        request = decode_request(msg, 1)
        parse_parameters(request.parameters)  # what the core reads of them next
    except ServerError as exc:
        check_rejection(exc)
        return
    check_tensors(request.inputs)


def check_grpc_bytes(data: bytes) -> None:
    try:
        msg = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return  # what the gRPC layer answers INVALID_ARGUMENT for before tritium sees it
    check_grpc_message(msg)


def _seed(**fields: object) -> bytes:
    return pb.ModelInferRequest(**fields).SerializeToString()


def _tensor(name: str, datatype: str, shape: list[int], **fields: object) -> object:
    return pb.ModelInferRequest.InferInputTensor(
        name=name, datatype=datatype, shape=shape, **fields
    )


def _contents(**fields: object) -> object:
    return pb.InferTensorContents(**fields)


GRPC_SEEDS = [
    _seed(model_name="m"),
    _seed(
        model_name="m",
        id="1",
        inputs=[
            _tensor("A", "INT32", [2], contents=_contents(int_contents=[1, 2])),
            _tensor("B", "BYTES", [1], contents=_contents(bytes_contents=[b"x"])),
            _tensor("C", "INT8", [1], contents=_contents(int_contents=[7])),
            _tensor("D", "UINT64", [1], contents=_contents(uint64_contents=[7])),
        ],
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="Z")],
    ),
    _seed(
        model_name="m",
        inputs=[_tensor("A", "FP32", [2]), _tensor("B", "BYTES", [1, 1])],
        raw_input_contents=[b"\x00" * 8, b"\x01\x00\x00\x00x"],
    ),
    _seed(
        model_name="m",
        parameters={
            "priority": pb.InferParameter(uint64_param=1),
            "timeout": pb.InferParameter(int64_param=10),
            "sequence_id": pb.InferParameter(string_param="s"),
            "custom": pb.InferParameter(bool_param=True),
        },
        inputs=[
            _tensor(
                "S",
                "UINT8",
                [4],
                parameters={
                    "shared_memory_region": pb.InferParameter(string_param="r"),
                    "shared_memory_byte_size": pb.InferParameter(int64_param=4),
                },
            )
        ],
    ),
]

GRPC_BYTES = Target(
    "grpc_bytes",
    check_grpc_bytes,
    byte_inputs(GRPC_SEEDS, [b"INT8", b"BYTES", b"FP16", b"priority"], 512),
    seeds=GRPC_SEEDS,
    tokens=[b"INT8", b"BYTES", b"FP16", b"BF16", b"priority", b"timeout", b"triton_"],
)
