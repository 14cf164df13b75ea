"""The OpenAI front-end's pure parts: a request body read and checked (schema.py), a model's
request format and the tensors it gets (formats.py), a choice's text cut at stop sequences
(choice.py). The real server is driven in tests/integration/test_openai_api.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tritium.cli.main import build_parser, options_from_args
from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.spec import build_spec, normalize
from tritium.frontends.openai.chat import DEFAULT_TEMPLATE, ChatTemplate, Message, template_of
from tritium.frontends.openai.choice import Choice
from tritium.frontends.openai.embeddings import EmbeddingModel, EmbeddingsRequest, parse_embeddings
from tritium.frontends.openai.errors import OpenAIError, as_openai
from tritium.errors import not_found
from tritium.frontends.openai.formats import PLAIN, TRTLLM, VLLM, ModelFormat
from tritium.frontends.openai.schema import Generation, parse_body
from tritium.options import ServerOptions
from tritium.runtime import endpoints
from tritium.types import DataType, InferenceResponse, Tensor


def _body(**doc: object) -> bytes:
    return json.dumps(doc).encode()


def _refusal(body: bytes, chat: bool = False) -> OpenAIError:
    with pytest.raises(OpenAIError) as info:
        parse_body(body, chat)
    assert info.value.status == 400
    return info.value


# -- schema ------------------------------------------------------------------------------------
def test_completion_body_is_read_whole() -> None:
    gen = parse_body(
        _body(
            model="m",
            prompt="hi",
            stream=True,
            stream_options={"include_usage": True},
            n=3,
            stop="x",
            max_tokens=7,
            seed=-1,
            temperature=0.5,
            top_p=1,
            echo=True,
            logprobs=None,
        ),
        chat=False,
    )
    assert gen == Generation(
        False, "m", "hi", True, True, 3, ("x",), 7, -1, 0.5, 1.0, None, None, True
    )


def test_chat_messages_become_the_default_template_prompt() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    gen = parse_body(
        _body(model="m", messages=messages, max_completion_tokens=4, max_tokens=9), True
    )
    assert gen.messages == (Message("system", "be brief"), Message("user", "ab"))
    assert DEFAULT_TEMPLATE.render(gen.messages) == "system: be brief\nuser: ab\nassistant:"
    assert gen.max_tokens == 4  # max_completion_tokens wins over the deprecated max_tokens


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (b"{nope", None, None),
        (b"[1]", None, None),
        (b'{"model": "m", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", None, None),  # depth
        (b'{"model": "m", "prompt": "x", "temperature": 1e400}', None, None),  # infinity
        (b'{"model": "m", "prompt": "\\ud800"}', None, None),  # a lone surrogate
        (
            b'{"model": "m", "prompt": "x", "seed": 123456789012345678901234567890}',
            "seed",
            "invalid_value",
        ),
        (_body(prompt="x"), "model", "invalid_value"),
        (_body(model="m", prompt=""), "prompt", "invalid_value"),
        (_body(model="m", prompt=["a", "b"]), "prompt", "unsupported_parameter"),
        (_body(model="m", prompt=[1, 2]), "prompt", "unsupported_parameter"),
        (_body(model="m", prompt="x", frobnicate=1), "frobnicate", None),
        (_body(model="m", prompt="x", logprobs=2), "logprobs", "unsupported_parameter"),
        (_body(model="m", prompt="x", best_of=2), "best_of", "unsupported_parameter"),
        (_body(model="m", prompt="x", suffix="s"), "suffix", "unsupported_parameter"),
        (_body(model="m", prompt="x", user="u"), "user", "unsupported_parameter"),
        (_body(model="m", prompt="x", n=0), "n", "invalid_value"),
        (_body(model="m", prompt="x", n=17), "n", "invalid_value"),
        (_body(model="m", prompt="x", n=True), "n", "invalid_value"),
        (_body(model="m", prompt="x", max_tokens=0), "max_tokens", "invalid_value"),
        (_body(model="m", prompt="x", max_tokens=1.5), "max_tokens", "invalid_value"),
        (_body(model="m", prompt="x", temperature=2.5), "temperature", "invalid_value"),
        (_body(model="m", prompt="x", top_p="1"), "top_p", "invalid_value"),
        (_body(model="m", prompt="x", stop=["a", "b", "c", "d", "e"]), "stop", "invalid_value"),
        (_body(model="m", prompt="x", stop=[""]), "stop", "invalid_value"),
        (_body(model="m", prompt="x", stream=1), "stream", "invalid_value"),
        (
            _body(model="m", prompt="x", stream_options={"include_usage": True}),
            "stream_options",
            "invalid_value",
        ),
        (_body(model="m", prompt="x", seed=1 << 64), "seed", "invalid_value"),
    ],
)
def test_completion_refusals(body: bytes, param: str | None, code: str | None) -> None:
    error = _refusal(body)
    assert (error.param, error.code) == (param, code)
    assert error.document()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": [1]}]},
            "messages[0].tool_calls",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}, "tools"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "echo": True}, "echo"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_object"},
            },
            "response_format",
        ),
    ],
)
def test_chat_refusals(doc: dict[str, object], param: str) -> None:
    assert _refusal(json.dumps(doc).encode(), chat=True).param == param


def test_values_that_leave_a_feature_off_are_accepted() -> None:
    doc = {
        "model": "m",
        "messages": [{"role": "user", "content": "x", "name": "ann"}],
        "logprobs": False,
        "tools": [],
        "tool_choice": "none",
        "response_format": {"type": "text"},
        "store": False,
        "user": None,
    }
    assert parse_body(json.dumps(doc).encode(), chat=True).messages == (Message("user", "x"),)


def test_server_errors_map_to_openai_statuses() -> None:
    error = as_openai(not_found("gone"))
    assert (error.status, error.kind, error.message) == (404, "invalid_request_error", "gone")


# -- formats -----------------------------------------------------------------------------------
def _spec(
    inputs: str,
    outputs: str = '{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }',
    batch: int = 0,
    extra: str = "",
):
    head = f'name: "m"\nbackend: "python"\nmax_batch_size: {batch}\n'
    text = f"{head}input [ {inputs} ]\noutput [ {outputs} ]\n{extra}\n"
    path = Path("/nowhere/m/config.pbtxt")
    config = parse_config_text(text, path)
    problem = ConfigProblem("m", path, text)
    normalize(config, "m", problem)
    return build_spec(config, problem)


_TEXT = '{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }'
_COUNTS = (
    '{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },'
    '{ name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },'
    '{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }'
)


def _gen(**fields: object) -> Generation:
    base: dict[str, object] = {"chat": False, "model": "m", "prompt": "hello"}
    base.update(fields)
    return Generation(**base)  # type: ignore[arg-type]


def _values(tensors: tuple[Tensor, ...]) -> dict[str, list[object]]:
    return {t.name: t.data.reshape(-1).tolist() for t in tensors}


def test_plain_model_takes_the_prompt_and_refuses_sampling_settings() -> None:
    fmt = ModelFormat(_spec(_TEXT))
    assert fmt.kind == PLAIN and not fmt.takes_stop and not fmt.takes_echo
    tensors = fmt.tensors(_gen(stop=("x",), echo=True))  # stop and echo: applied by the server
    assert _values(tensors) == {"text_input": [b"hello"]}
    assert tensors[0].shape == (1,) and tensors[0].datatype is DataType.BYTES
    for key, value in [("temperature", 0.3), ("top_p", 0.9), ("seed", 1), ("max_tokens", 5)]:
        with pytest.raises(OpenAIError) as info:
            fmt.tensors(_gen(**{key: value}))
        assert (info.value.param, info.value.code) == (key, "unsupported_parameter")
        assert f"declares no input '{key}'" in info.value.message
    with pytest.raises(OpenAIError) as info:
        fmt.tensors(_gen(stream=True, include_usage=True))
    assert info.value.param == "stream_options"


def test_tensorrt_llm_model_gets_each_setting_as_its_own_tensor() -> None:
    inputs = ",".join(
        [
            _TEXT,
            '{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }',
            '{ name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] }',
            '{ name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true }',
            '{ name: "seed" data_type: TYPE_UINT64 dims: [ 1 ] optional: true }',
            '{ name: "stop_words" data_type: TYPE_STRING dims: [ -1 ] optional: true }',
            '{ name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }',
        ]
    )
    fmt = ModelFormat(_spec(inputs, _COUNTS, batch=4))
    assert fmt.kind == TRTLLM and fmt.takes_stop and fmt.counts_tokens
    tensors = fmt.tensors(
        _gen(stream=True, max_tokens=3, temperature=0.5, seed=9, stop=("a", "bb"))
    )
    assert _values(tensors) == {
        "text_input": [b"hello"],
        "stream": [True],
        "return_num_input_tokens": [True],
        "max_tokens": [3],
        "temperature": [0.5],
        "seed": [9],
        "stop_words": [b"a", b"bb"],
    }
    shapes = {t.name: t.shape for t in tensors}
    assert shapes["stop_words"] == (1, 2) and shapes["text_input"] == (1, 1)  # batched: [1, ...]
    with pytest.raises(OpenAIError) as info:
        fmt.tensors(_gen(top_p=0.5))
    assert info.value.param == "top_p"
    with pytest.raises(Exception, match="seed"):  # UINT64 cannot hold a negative seed
        fmt.tensors(_gen(seed=-1))


def test_vllm_model_gets_one_sampling_parameters_string() -> None:
    inputs = ",".join(
        [
            _TEXT,
            '{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] }',
            '{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }',
            '{ name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }',
            '{ name: "return_finish_reason" data_type: TYPE_BOOL dims: [ 1 ] optional: true }',
        ]
    )
    fmt = ModelFormat(_spec(inputs))
    assert fmt.kind == VLLM and fmt.takes_stop and fmt.takes_echo
    values = _values(fmt.tensors(_gen(echo=True, max_tokens=2, top_p=0.25, stop=("z",), seed=4)))
    sampling = json.loads(values.pop("sampling_parameters")[0])
    assert sampling == {"max_tokens": 2, "top_p": 0.25, "seed": 4, "stop": ["z"]}
    assert values == {
        "text_input": [b"hello"],
        "stream": [False],
        "exclude_input_in_output": [False],
        "return_finish_reason": [True],
    }


@pytest.mark.parametrize(
    ("inputs", "outputs", "needle"),
    [
        (
            '{ name: "prompt" data_type: TYPE_STRING dims: [ 1 ] }',
            None,
            "needs an input 'text_input'",
        ),
        ('{ name: "text_input" data_type: TYPE_INT32 dims: [ 1 ] }', None, "TYPE_STRING"),
        (
            _TEXT + ', { name: "secret" data_type: TYPE_FP32 dims: [ 1 ] }',
            None,
            "needs input 'secret'",
        ),
    ],
)
def test_models_that_cannot_serve_completions_say_why(
    inputs: str, outputs: str | None, needle: str
) -> None:
    fmt = ModelFormat(_spec(inputs) if outputs is None else _spec(inputs, outputs))
    with pytest.raises(OpenAIError, match=needle) as info:
        fmt.tensors(_gen())
    assert info.value.status == 400 and info.value.param == "model"


# -- choice ------------------------------------------------------------------------------------
def _response(text: str, **counts: int) -> InferenceResponse:
    outputs = [Tensor("text_output", DataType.BYTES, (1,), np.array([text.encode()], dtype=object))]
    for name, value in counts.items():
        outputs.append(Tensor(name, DataType.INT32, (1,), np.array([value], dtype=np.int32)))
    return InferenceResponse("m", "1", outputs=outputs)


def test_stop_sequence_split_across_responses_is_cut_and_never_sent() -> None:
    choice = Choice(0, ("END",), None)
    sent = [choice.feed(_response(t)) for t in ("one E", "N", "Dtwo")]
    assert sent == ["one ", "", ""] and choice.stopped() and choice.finish_reason() == "stop"


def test_held_text_that_is_no_stop_is_sent_at_the_end() -> None:
    choice = Choice(0, ("xyz",), None, prefix="P:")
    assert choice.feed(_response("abx")) == "P:ab"
    assert choice.feed(_response("y")) == ""
    assert choice.end() == "xy"
    assert choice.done and not choice.stopped() and choice.finish_reason() == "stop"


def test_usage_and_finish_reason_from_counts() -> None:
    choice = Choice(0, (), 2)
    choice.feed(_response("a ", num_input_tokens=5, num_output_tokens=1))
    choice.feed(_response("b ", num_input_tokens=5, num_output_tokens=1))
    assert (choice.prompt_tokens, choice.completion_tokens) == (5, 2)
    assert choice.finish_reason() == "length"
    assert Choice(0, (), 3).finish_reason() == "stop"


# -- chat templates ----------------------------------------------------------------------------
def _params(**values: str) -> dict[str, object]:
    return {key: {"string_value": value} for key, value in values.items()}


def test_model_chat_template_from_its_parameters() -> None:
    found = template_of(
        _params(
            chat_template="<|{role}|>{content}<|end|>\n", chat_generation_prompt="<|assistant|>"
        )
    )
    assert found == ChatTemplate("<|{role}|>{content}<|end|>\n", "<|assistant|>")
    messages = (Message("system", "s {x}"), Message("user", "u"))
    rendered = found.render(messages)  # a message's braces are text, not fields
    assert rendered == "<|system|>s {x}<|end|>\n<|user|>u<|end|>\n<|assistant|>"
    assert template_of({}) is DEFAULT_TEMPLATE
    assert template_of(_params(other="x")) is DEFAULT_TEMPLATE


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (_params(chat_template="{role}{content}"), "without the other"),
        (_params(chat_template="{role} {secret}", chat_generation_prompt=""), "{secret}"),
        (_params(chat_template="{content.__class__}", chat_generation_prompt=""), "only {role}"),
        (_params(chat_template="{role!r}", chat_generation_prompt=""), "only {role}"),
        (_params(chat_template="{role:>9}", chat_generation_prompt=""), "only {role}"),
        (_params(chat_template="{role", chat_generation_prompt=""), "not a valid template"),
    ],
)
def test_bad_chat_templates_are_refused_for_chat(params: dict[str, object], needle: str) -> None:
    problem = template_of(params)
    assert isinstance(problem, str) and needle in problem
    config = (
        "parameters [ "
        + ", ".join(
            f'{{ key: "{k}" value: {{ string_value: {json.dumps(v["string_value"])} }} }}'  # type: ignore[index]
            for k, v in params.items()
        )
        + " ]"
    )
    fmt = ModelFormat(_spec(_TEXT, extra=config))
    with pytest.raises(OpenAIError, match="cannot serve chat completions") as info:
        fmt.tensors(_gen(chat=True, prompt="", messages=(Message("user", "x"),)))
    assert info.value.param == "model"
    assert _values(fmt.tensors(_gen())) == {"text_input": [b"hello"]}  # completions still served


# -- embeddings --------------------------------------------------------------------------------
_VECTOR = '{ name: "embedding" data_type: TYPE_FP32 dims: [ -1 ] }'


def test_embeddings_body_is_read_and_checked() -> None:
    asked = parse_embeddings(_body(model="e", input="a", encoding_format="base64", dimensions=4))
    assert asked == EmbeddingsRequest("e", ("a",), True, 4)
    assert parse_embeddings(_body(model="e", input=["a", "b"])).texts == ("a", "b")
    for doc, param in [
        ({"model": "e", "input": [1, 2]}, "input"),
        ({"model": "e", "input": []}, "input"),
        ({"model": "e", "input": [""]}, "input"),
        ({"model": "e", "input": ["a"] * 65}, "input"),
        ({"model": "e", "input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "e", "input": "a", "dimensions": 0}, "dimensions"),
        ({"model": "e", "input": "a", "stream": True}, "stream"),
    ]:
        with pytest.raises(OpenAIError) as info:
            parse_embeddings(json.dumps(doc).encode())
        assert info.value.param == param and info.value.status == 400


def test_embedding_model_contract() -> None:
    model = EmbeddingModel(_spec(_TEXT, _VECTOR, batch=8))
    assert model.problem == "" and not model.counts_tokens
    (tensor,) = model.tensors(EmbeddingsRequest("m", ("x",)), "hi")
    assert tensor.shape == (1, 1) and tensor.data.reshape(-1).tolist() == [b"hi"]
    with pytest.raises(OpenAIError, match="declares no input 'dimensions'") as info:
        model.tensors(EmbeddingsRequest("m", ("x",), False, 8), "hi")
    assert info.value.code == "unsupported_parameter"
    sized = EmbeddingModel(
        _spec(_TEXT + ', { name: "dimensions" data_type: TYPE_INT64 dims: [ 1 ] }', _VECTOR)
    )
    values = _values(sized.tensors(EmbeddingsRequest("m", ("x",), False, 8), "hi"))
    assert values == {"text_input": [b"hi"], "dimensions": [8]}
    for inputs, outputs, needle in [
        (_TEXT, '{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }', "'embedding'"),
        (_TEXT, '{ name: "embedding" data_type: TYPE_STRING dims: [ 1 ] }', "numeric"),
        (_TEXT + ', { name: "mask" data_type: TYPE_INT32 dims: [ 1 ] }', _VECTOR, "'mask'"),
    ]:
        with pytest.raises(OpenAIError, match=needle):
            EmbeddingModel(_spec(inputs, outputs)).tensors(EmbeddingsRequest("m", ("x",)), "x")


# -- flags -------------------------------------------------------------------------------------
def _flags(*flags: str) -> ServerOptions:
    return options_from_args(
        build_parser().parse_args(["serve", "--model-repository", "r", *flags])
    )


def test_openai_flags() -> None:
    assert (_flags().http.openai, _flags().http.openai_port) == (True, -1)
    assert _flags("--openai=false").http.openai is False
    assert _flags("--openai-port", "9000").http.openai_port == 9000
    assert "openai" in endpoints(_flags("--openai-port", "0"))
    assert "openai" not in endpoints(_flags())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--openai=false", "--openai-port", "9000"), "needs --openai=true"),
        (("--openai-port", "70000"), "TCP port"),
        (("--openai-port", "-1"), "integer >= 0"),
    ],
)
def test_openai_flags_refused(
    flags: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _flags(*flags)
    assert message in str(info.value.code) + capsys.readouterr().err
