"""Triton's PyTorch parameters as backends/pytorch.py reads and applies them: each JIT switch
reaches torch's own setting (read back from torch), and torch's per-process thread pools
follow Triton's first-value-wins rule."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from google.protobuf import text_format

torch = pytest.importorskip("torch")

from tritium.backends.pytorch import TorchOptions, _ThreadPools  # noqa: E402
from tritium.config.model_config import ModelConfig  # noqa: E402
from tritium.errors import ServerError  # noqa: E402


def _options(**params: str) -> TorchOptions:
    config = ModelConfig()
    for key, value in params.items():
        text_format.Parse(
            f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}', config
        )
    return TorchOptions.from_config(config)


@pytest.fixture
def jit_state() -> Iterator[None]:
    """Put torch's process-wide JIT switches back as they were."""
    c = torch._C
    saved = (
        c._get_graph_executor_optimize(),
        c._jit_set_profiling_mode(True),
        c._jit_set_profiling_executor(True),
        c._jit_texpr_fuser_enabled(),
    )
    c._jit_set_profiling_mode(saved[1])
    c._jit_set_profiling_executor(saved[2])
    yield
    c._set_graph_executor_optimize(saved[0])
    c._jit_set_profiling_mode(saved[1])
    c._jit_set_profiling_executor(saved[2])
    c._jit_set_texpr_fuser_enabled(saved[3])


def test_defaults_are_tritons() -> None:
    options = _options()
    assert options == TorchOptions()
    assert options.optimized_execution and options.inference_mode
    assert options.jit_executor is None and options.weight_sharing is False


def test_each_jit_switch_reaches_torch(jit_state: None) -> None:
    c = torch._C
    _options(
        DISABLE_OPTIMIZED_EXECUTION="true",
        ENABLE_JIT_PROFILING="false",
        ENABLE_JIT_EXECUTOR="false",
        ENABLE_TENSOR_FUSER="false",
    ).apply_jit()
    assert c._get_graph_executor_optimize() is False
    assert c._jit_set_profiling_mode(True) is False  # returns the previous value
    assert c._jit_set_profiling_executor(True) is False
    assert c._jit_texpr_fuser_enabled() is False
    _options(ENABLE_JIT_PROFILING="on", ENABLE_TENSOR_FUSER="1").apply_jit()
    assert c._get_graph_executor_optimize() is True
    assert c._jit_texpr_fuser_enabled() is True


def test_unset_switches_leave_torch_alone(jit_state: None) -> None:
    torch._C._jit_set_texpr_fuser_enabled(False)
    _options().apply_jit()
    assert torch._C._jit_texpr_fuser_enabled() is False


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("INFERENCE_MODE", "yes please", "failed to convert 'yes please' to boolean value"),
        ("DISABLE_CUDNN", "x", "failed to convert 'x' to boolean value"),
        ("INTRA_OP_THREAD_COUNT", "two", "failed to convert 'two' to integral value"),
    ],
)
def test_bad_values_are_refused(key: str, value: str, message: str) -> None:
    with pytest.raises(ServerError, match=message):
        _options(**{key: value})


def test_thread_counts_of_zero_or_less_leave_torchs_default() -> None:
    assert _options(INTRA_OP_THREAD_COUNT="0").intra_op_threads is None
    assert _options(INTER_OP_THREAD_COUNT="-1").inter_op_threads is None


def _threads_seen(pools: _ThreadPools) -> int:
    """The intra-op size an instance thread runs with (OpenMP keeps it per thread)."""
    seen: list[int] = []

    def run() -> None:
        pools.on_this_thread()
        seen.append(torch.get_num_threads())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen[0]


def test_the_first_explicit_intra_op_count_wins(caplog: pytest.LogCaptureFixture) -> None:
    before = torch.get_num_threads()
    pools = _ThreadPools()
    try:
        torch.set_num_threads(3)
        pools.configure("a", _options())  # no value yet: one thread per instance
        assert _threads_seen(pools) == 1
        pools.configure("b", _options(INTRA_OP_THREAD_COUNT="2"))
        assert _threads_seen(pools) == 2
        pools.configure("c", _options(INTRA_OP_THREAD_COUNT="3"))
        assert _threads_seen(pools) == 2
        assert "INTRA_OP_THREAD_COUNT 3 is not applied" in caplog.text
        pools.configure("d", _options())  # an explicit value stays
        assert _threads_seen(pools) == 2
    finally:
        torch.set_num_threads(before)


def test_the_pytorch_2_thread_names_set_the_thread_counts() -> None:
    """NUM_THREADS / NUM_INTEROP_THREADS (the pytorch_backend README's names) are the intra-
    and inter-op counts, as INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT are."""
    options = _options(NUM_THREADS="3", NUM_INTEROP_THREADS="2")
    assert (options.intra_op_threads, options.inter_op_threads) == (3, 2)
    assert _options(NUM_THREADS="0").intra_op_threads is None


def test_the_libtorch_thread_key_wins_over_its_alias(caplog: pytest.LogCaptureFixture) -> None:
    options = _options(INTRA_OP_THREAD_COUNT="2", NUM_THREADS="4", NUM_INTEROP_THREADS="5")
    assert (options.intra_op_threads, options.inter_op_threads) == (2, 5)
    assert "INTRA_OP_THREAD_COUNT is given: NUM_THREADS 4 is not applied" in caplog.text
    with pytest.raises(ServerError, match="failed to convert 'many' to integral value"):
        _options(NUM_INTEROP_THREADS="many")


def test_torch_compile_parameters_load_with_a_warning() -> None:
    from tritium.config.fields import review

    config = ModelConfig(backend="pytorch")
    config.parameters["TORCH_COMPILE_OPTIONAL_PARAMETERS"].string_value = '{"disable": true}'
    config.parameters["NUM_THREADS"].string_value = "1"
    found = review(config)
    assert found.refused == ()
    assert [path for path, _ in found.no_effect] == ["parameters.TORCH_COMPILE_OPTIONAL_PARAMETERS"]
    assert "not compiled by torch.compile" in found.no_effect[0][1]
