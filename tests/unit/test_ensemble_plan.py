"""An ensemble's load-time checks (``build_plan``) and per-request walks (``EnsemblePlan.route``),
without sockets.

Ensemble configs are real ``ModelConfig`` messages parsed with protobuf ``text_format``; the
composing models are real ``ModelSpec`` objects built through ``normalize`` + ``build_spec``.
Expected messages follow Triton core (``model_config_utils.cc`` ValidateEnsembleSchedulingConfig,
``ensemble_utils.cc`` ValidateEnsembleConfig / ValidateTensorMapping) and, beyond Triton, name
the ensemble, the step (``step 1 (model 'b')``) and the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritium.errors import ErrorKind, ServerError, not_found, unavailable
from tritium.config.model_config import ConfigProblem
from tritium.config.ensemble import EnsemblePlan, build_plan
from tritium.config.spec import ModelSpec, build_spec, normalize

ENS = "ens"
Io = tuple[str, str, list[int]]
INT = ("TYPE_INT32", [-1])

# ------------------------------------------------------------------------ composing models


def _io_text(kind: str, entries: Iterable[Io], optional: Iterable[str] = ()) -> str:
    blocks = []
    for name, data_type, dims in entries:
        extra = " optional: true" if name in optional else ""
        blocks.append(f'{{ name: "{name}" data_type: {data_type} dims: {list(dims)}{extra} }}')
    return f"{kind} [ {', '.join(blocks)} ]\n" if blocks else ""


def composing(
    name: str,
    inputs: Iterable[Io] = (("INPUT0", *INT),),
    outputs: Iterable[Io] = (("OUTPUT0", *INT),),
    max_batch_size: int = 0,
    extra: str = "",
    optional: Iterable[str] = (),
) -> ModelSpec:
    """A composing model's spec, built as the repository builds one (no file behind it)."""
    text = f'backend: "python"\nmax_batch_size: {max_batch_size}\n{extra}\n'
    text += _io_text("input", inputs, optional) + _io_text("output", outputs)
    config = text_format.Parse(text, ModelConfig())
    problem = ConfigProblem(name, None, "")
    normalize(config, name, problem)
    return build_spec(config, problem)


PAIR_IO = [("INPUT0", *INT), ("INPUT1", *INT)]
MODELS: dict[str, ModelSpec] = {
    "a": composing("a"),
    "b": composing("b"),
    "c": composing("c"),
    "pair": composing("pair", PAIR_IO, [("OUTPUT0", *INT), ("OUTPUT1", *INT)]),
    "opt": composing("opt", PAIR_IO, optional=["INPUT1"]),
    "fp": composing("fp", [("INPUT0", "TYPE_FP32", [-1])], [("OUTPUT0", "TYPE_FP32", [-1])]),
    "four": composing("four", [("INPUT0", "TYPE_INT32", [4])], [("OUTPUT0", "TYPE_INT32", [4])]),
    "eight": composing("eight", [("INPUT0", "TYPE_INT32", [8])], [("OUTPUT0", "TYPE_INT32", [8])]),
    "batch4": composing("batch4", max_batch_size=4),
    "dec": composing("dec", extra="model_transaction_policy { decoupled: true }"),
}


class Lookup:
    """The composing models the ensemble may name; versions 1 only. Records every call."""

    def __init__(self, models: Mapping[str, ModelSpec] = MODELS) -> None:
        self.models = models
        self.calls: list[tuple[str, int]] = []

    def __call__(self, name: str, version: int) -> ModelSpec:
        self.calls.append((name, version))
        if name not in self.models:
            raise not_found(f"ensemble '{ENS}' depends on '{name}' which is not loaded")
        if version > 1:
            raise unavailable(
                f"ensemble '{ENS}' depends on '{name}' whose required version {version} is "
                "not loaded."
            )
        return self.models[name]


# ------------------------------------------------------------------------ ensemble configs


def step(
    model: str, inputs: Mapping[str, str], outputs: Mapping[str, str], version: int = -1
) -> str:
    """One ``ensemble_scheduling.step`` in text format: {model input: ensemble tensor} and
    {model output: ensemble tensor}."""
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{ model_name: "{model}" model_version: {version} {" ".join(maps)} }}'


def ident(model: str, src: str, dst: str) -> str:
    """A step through a one-input one-output model: ``src`` -> ``dst``."""
    return step(model, {"INPUT0": src}, {"OUTPUT0": dst})


def ensemble(
    *steps: str,
    inputs: Iterable[Io] = (("X", *INT),),
    outputs: Iterable[Io] = (("Y", *INT),),
    max_batch_size: int = 0,
    extra: str = "",
) -> ModelConfig:
    text = f'name: "{ENS}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n{extra}\n'
    text += _io_text("input", inputs) + _io_text("output", outputs)
    if steps:
        text += f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    return text_format.Parse(text, ModelConfig())


def plan_of(config: ModelConfig, lookup: Lookup | None = None) -> EnsemblePlan:
    return build_plan(config, lookup or Lookup())


def error_of(config: ModelConfig, lookup: Lookup | None = None) -> str:
    with pytest.raises(ServerError) as info:
        plan_of(config, lookup)
    assert info.value.kind is ErrorKind.INVALID_ARG, info.value
    return info.value.message


def assert_names(message: str, *fragments: str) -> None:
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


# ----------------------------------------------------------------------------- good plans


def test_linear_plan() -> None:
    lookup = Lookup()
    plan = plan_of(ensemble(ident("a", "X", "t"), ident("b", "t", "Y")), lookup)
    assert plan.name == ENS
    assert plan.inputs == ("X",)
    assert plan.outputs == ("Y",)
    assert {s.model_name for s in plan.steps} == {"a", "b"}
    assert plan.producer == {"t": 0, "Y": 1}
    assert [(s.index, s.model_name, s.model_version) for s in plan.steps] == [
        (0, "a", -1),
        (1, "b", -1),
    ]
    assert plan.steps[1].inputs == (("INPUT0", "t"),)
    assert plan.steps[1].outputs == (("OUTPUT0", "Y"),)
    assert plan.steps[1].describe() == "step 1 (model 'b')"
    assert not plan.decoupled
    assert lookup.calls == [("a", -1), ("b", -1)]


def test_step_version_is_passed_to_the_lookup() -> None:
    lookup = Lookup()
    plan = plan_of(ensemble(step("a", {"INPUT0": "X"}, {"OUTPUT0": "Y"}, version=1)), lookup)
    assert lookup.calls == [("a", 1)]
    assert plan.steps[0].model_version == 1


def test_optional_composing_input_may_stay_unmapped() -> None:
    plan = plan_of(ensemble(step("opt", {"INPUT0": "X"}, {"OUTPUT0": "Y"})))
    assert plan.steps[0].inputs == (("INPUT0", "X"),)


def test_ensemble_output_may_also_be_read_by_a_step() -> None:
    plan = plan_of(
        ensemble(
            ident("a", "X", "Y"),
            ident("b", "Y", "Z"),
            outputs=[("Y", *INT), ("Z", *INT)],
        )
    )
    assert plan.producer == {"Y": 0, "Z": 1}


@pytest.mark.parametrize(
    ("x_dims", "chain", "y_dims"),
    [
        ([-1], ["four", "a"], [-1]),  # -1 meets 4 both ways
        ([4], ["a", "four"], [4]),
        ([-1], ["four"], [4]),
        ([4], ["four"], [-1]),
    ],
)
def test_wildcard_dims_accept_any_size(
    x_dims: list[int], chain: list[str], y_dims: list[int]
) -> None:
    tensors = ["X", *(f"t{i}" for i in range(len(chain) - 1)), "Y"]
    steps = [ident(m, tensors[i], tensors[i + 1]) for i, m in enumerate(chain)]
    plan_of(
        ensemble(
            *steps, inputs=[("X", "TYPE_INT32", x_dims)], outputs=[("Y", "TYPE_INT32", y_dims)]
        )
    )


def test_batching_ensemble_over_batching_models_compares_full_shapes() -> None:
    # ensemble [batch, -1] == batch4 [batch, -1]; a smaller or equal ensemble batch is fine
    for max_batch_size in (1, 4):
        plan_of(ensemble(ident("batch4", "X", "Y"), max_batch_size=max_batch_size))


def test_non_batching_ensemble_may_spell_out_the_batch_dimension() -> None:
    # Triton: a non-batching [-1, d...] matches a batching [d...] (full dims compared)
    wide = ("TYPE_INT32", [-1, -1])
    plan_of(ensemble(ident("batch4", "X", "Y"), inputs=[("X", *wide)], outputs=[("Y", *wide)]))


@pytest.mark.parametrize(
    ("model", "max_batch_size"),
    [("batch4", 0), ("a", 4)],
    ids=["non-batching-ensemble-batching-model", "batching-ensemble-non-batching-model"],
)
def test_dims_without_batch_dimension_match_as_in_triton(model: str, max_batch_size: int) -> None:
    plan_of(ensemble(ident(model, "X", "Y"), max_batch_size=max_batch_size))


def test_ensemble_tensor_is_checked_by_its_reshape() -> None:
    config = ensemble(ident("four", "X", "Y"), outputs=[("Y", "TYPE_INT32", [4])])
    config.input[0].ClearField("dims")
    config.input[0].dims.extend([1, 4])
    config.input[0].reshape.shape.extend([4])
    plan_of(config)


def test_decoupled_flow_may_continue_through_other_steps() -> None:
    # dec starts flow 1; a continues it; pair reads two tensors of that same flow
    plan = plan_of(
        ensemble(
            ident("dec", "X", "d"),
            ident("a", "d", "e"),
            step("pair", {"INPUT0": "d", "INPUT1": "e"}, {"OUTPUT0": "Y"}),
        )
    )
    assert plan.decoupled
    assert [s.decoupled for s in plan.steps] == [True, False, False]


# --------------------------------------------------------------------------- load errors


def test_cycle_between_steps_is_walked() -> None:
    message = error_of(
        ensemble(
            step("pair", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "t"}),
            ident("a", "t", "Y"),
        )
    )
    assert message == (
        f"in ensemble {ENS}, the steps form a cycle: step 0 (model 'pair') reads 'Y' from "
        "step 1 (model 'a') reads 't' from step 0 (model 'pair')"
    )


def test_cycle_away_from_the_inputs_is_found() -> None:
    # X -> c -> Y is fine; a and b feed each other and touch nothing else
    message = error_of(ensemble(ident("a", "u", "v"), ident("b", "v", "u"), ident("c", "X", "Y")))
    assert_names(message, ENS, "cycle", "step 0 (model 'a')", "step 1 (model 'b')", "'u'", "'v'")


def test_step_reading_its_own_output_is_a_cycle() -> None:
    message = error_of(ensemble(step("pair", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "Y"})))
    assert_names(message, ENS, "cycle", "step 0 (model 'pair') reads 'Y' from step 0")


def test_unknown_composing_model() -> None:
    lookup = Lookup()
    message = error_of(ensemble(ident("a", "X", "t"), ident("ghost", "t", "Y")), lookup)
    assert_names(
        message,
        f"ensemble {ENS} contains models that are not available or ambiguous: ghost",
        # the step, and the lookup's reason
        f"step 1 (model 'ghost'): ensemble '{ENS}' depends on 'ghost' which is not loaded",
    )
    assert ("ghost", -1) in lookup.calls


def test_every_unknown_composing_model_is_listed() -> None:
    message = error_of(ensemble(ident("zombie", "X", "t"), ident("ghost", "t", "Y")))
    assert_names(message, ENS, "ghost, zombie", "'ghost' which is not loaded", "'zombie'")


def test_unknown_composing_version() -> None:
    lookup = Lookup()
    config = ensemble(ident("a", "X", "t"), step("b", {"INPUT0": "t"}, {"OUTPUT0": "Y"}, 7))
    message = error_of(config, lookup)
    assert_names(message, ENS, "step 1 (model 'b'): ", "required version 7 is not loaded")
    assert lookup.calls == [("a", -1), ("b", 7)]


def test_ensemble_naming_itself_is_a_circular_dependency() -> None:
    lookup = Lookup()
    message = error_of(ensemble(ident(ENS, "X", "Y")), lookup)
    assert message == f"circular dependency between ensembles: {ENS} -> {ENS}"
    assert lookup.calls == []


def test_ensemble_input_no_step_reads() -> None:
    message = error_of(ensemble(ident("a", "X", "Y"), inputs=[("X", *INT), ("UNUSED", *INT)]))
    assert message == f"ensemble input 'UNUSED' for ensemble '{ENS}' is not used"


def test_ensemble_output_no_step_writes() -> None:
    message = error_of(ensemble(ident("a", "X", "Y"), outputs=[("Y", *INT), ("Z", *INT)]))
    assert message == f"output 'Z' for ensemble '{ENS}' is not written by any step"


def test_tensor_written_by_two_steps() -> None:
    message = error_of(ensemble(ident("a", "X", "Y"), ident("b", "X", "Y")))
    assert message == (
        f"ensemble tensor 'Y' can appear in an output map only once for ensemble '{ENS}' "
        "step 1 (model 'b') (step 0 (model 'a') writes it too)"
    )


def test_step_output_written_onto_an_ensemble_input() -> None:
    message = error_of(ensemble(ident("a", "X", "Y"), ident("b", "Y", "X")))
    assert_names(
        message,
        f"ensemble tensor 'X' can appear in an output map only once for ensemble '{ENS}'",
        "step 1 (model 'b')",
        "(it is an ensemble input)",
    )


def test_two_outputs_of_one_step_onto_one_tensor() -> None:
    message = error_of(
        ensemble(step("pair", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "Y", "OUTPUT1": "Y"}))
    )
    assert message == (
        f"in ensemble {ENS}, step 0 (model 'pair'): multiple outputs in model pair are mapped "
        "to the same ensemble tensor Y"
    )


def test_intermediate_tensor_nobody_reads() -> None:
    config = ensemble(
        step("pair", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "Y", "OUTPUT1": "dangling"})
    )
    assert error_of(config) == (
        f"ensemble tensor 'dangling' is unused in ensemble '{ENS}': step 0 (model 'pair') "
        "writes it but no step reads it"
    )


def test_step_input_that_nothing_produces() -> None:
    config = ensemble(
        ident("a", "X", "Y"), ident("b", "nowhere", "Z"), outputs=[("Y", *INT), ("Z", *INT)]
    )
    assert error_of(config) == (
        f"in ensemble {ENS}, step 1 (model 'b'): ensemble tensor 'nowhere' for input 'INPUT0' "
        "is neither an ensemble input nor written by any step"
    )


def test_input_map_key_that_is_not_a_composing_input() -> None:
    config = ensemble(ident("a", "X", "t"), step("b", {"BOGUS": "t"}, {"OUTPUT0": "Y"}))
    assert error_of(config) == (
        f"in ensemble {ENS}, step 1 (model 'b'): ensemble tensor t is mapping to non-existing "
        "input BOGUS in model b"
    )


def test_required_composing_input_left_unmapped() -> None:
    config = ensemble(step("pair", {"INPUT0": "X"}, {"OUTPUT0": "Y"}))
    assert error_of(config) == (
        f"in ensemble {ENS}, step 0 (model 'pair'): input INPUT1 in model pair is not mapped "
        "to any ensemble tensors"
    )


def test_output_map_key_that_is_not_a_composing_output() -> None:
    config = ensemble(ident("a", "X", "t"), step("b", {"INPUT0": "t"}, {"NOPE": "Y"}))
    assert error_of(config) == (
        f"in ensemble {ENS}, step 1 (model 'b'): ensemble tensor Y is mapped from non-existing "
        "output NOPE in model b"
    )


def test_datatype_mismatch_between_steps() -> None:
    config = ensemble(
        ident("a", "X", "t"), ident("fp", "t", "Y"), outputs=[("Y", "TYPE_FP32", [-1])]
    )
    assert error_of(config) == (
        f"in ensemble {ENS}, step 1 (model 'fp'): ensemble tensor t: inconsistent data type: "
        "TYPE_INT32 is inferred from model a while TYPE_FP32 is inferred from model fp"
    )


def test_datatype_mismatch_at_an_ensemble_input() -> None:
    config = ensemble(ident("a", "X", "Y"), inputs=[("X", "TYPE_FP32", [-1])])
    assert error_of(config) == (
        f"in ensemble {ENS}, step 0 (model 'a'): ensemble tensor X: inconsistent data type: "
        f"TYPE_FP32 is inferred from ensemble '{ENS}' while TYPE_INT32 is inferred from model a"
    )


def test_datatype_mismatch_at_an_ensemble_output() -> None:
    config = ensemble(ident("a", "X", "Y"), outputs=[("Y", "TYPE_FP32", [-1])])
    assert error_of(config) == (
        f"in ensemble {ENS}, step 0 (model 'a'): ensemble tensor Y: inconsistent data type: "
        f"TYPE_INT32 is inferred from model a while TYPE_FP32 is inferred from ensemble '{ENS}'"
    )


def test_shape_mismatch_between_steps() -> None:
    config = ensemble(ident("four", "X", "t"), ident("eight", "t", "Y"))
    assert error_of(config) == (
        f"in ensemble {ENS}, step 1 (model 'eight'): ensemble tensor t: inconsistent shape: "
        "[4] is inferred from model four while [8] is inferred from model eight"
    )


def test_shape_rank_mismatch_at_an_ensemble_input() -> None:
    config = ensemble(ident("four", "X", "Y"), inputs=[("X", "TYPE_INT32", [2, 2])])
    assert error_of(config) == (
        f"in ensemble {ENS}, step 0 (model 'four'): ensemble tensor X: inconsistent shape: "
        f"[2,2] is inferred from ensemble '{ENS}' while [4] is inferred from model four"
    )


def test_shape_mismatch_at_an_ensemble_output() -> None:
    config = ensemble(ident("four", "X", "Y"), outputs=[("Y", "TYPE_INT32", [8])])
    assert_names(error_of(config), ENS, "step 0 (model 'four')", "tensor Y", "[4]", "[8]")


def test_ensemble_batch_size_larger_than_a_composing_models() -> None:
    config = ensemble(ident("a", "X", "t"), ident("batch4", "t", "Y"), max_batch_size=8)
    assert error_of(config) == (
        f"ensemble {ENS} allows maximum batch size 8, but it contains model batch4 which only "
        "allows maximum batch size to be 4 (step 1 (model 'batch4'))"
    )


def test_instance_group_on_an_ensemble() -> None:
    config = ensemble(ident("a", "X", "Y"), extra="instance_group [ { count: 2 } ]")
    assert error_of(config) == f"instance group should not be specified for ensemble '{ENS}'"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "optimization { priority: PRIORITY_MAX }",
            f"optimization should not be specified for ensemble '{ENS}'",
        ),
        (
            'model_warmup [ { name: "w" batch_size: 1 } ]',
            f"model_warmup can not be specified for ensemble '{ENS}'",
        ),
    ],
    ids=["optimization", "model_warmup"],
)
def test_optimization_and_warmup_on_an_ensemble(extra: str, expected: str) -> None:
    assert error_of(ensemble(ident("a", "X", "Y"), extra=extra)) == expected


def test_step_mixing_a_decoupled_flow_and_an_ensemble_input() -> None:
    config = ensemble(
        ident("dec", "X", "d"),
        step("pair", {"INPUT0": "X", "INPUT1": "d"}, {"OUTPUT0": "Y"}),
    )
    assert error_of(config) == (
        f"in ensemble {ENS}, step of model 'pair' receives inputs originated from different "
        "decoupled models (step 1 (model 'pair'))"
    )


def test_ensemble_outputs_from_different_decoupled_flows() -> None:
    config = ensemble(
        ident("dec", "X", "Y"), ident("a", "X", "Z"), outputs=[("Y", *INT), ("Z", *INT)]
    )
    assert error_of(config) == (
        f"in ensemble {ENS}, ensemble outputs originated from different decoupled models: "
        "'Y' from step 0 (model 'dec'), 'Z' from the ensemble inputs"
    )


@pytest.mark.parametrize(
    ("scheduling", "expected"),
    [
        ("", f"ensemble scheduling must be set for ensemble {ENS} whose platform is ensemble"),
        ("ensemble_scheduling { }", f"must specify 'step' for ensemble '{ENS}'"),
        (
            'ensemble_scheduling { step [ { input_map { key: "INPUT0" value: "X" } '
            'output_map { key: "OUTPUT0" value: "Y" } } ] }',
            f"must specify 'model_name' in step 0 of ensemble '{ENS}'",
        ),
        (
            'ensemble_scheduling { step [ { model_name: "a" '
            'output_map { key: "OUTPUT0" value: "Y" } } ] }',
            f"must specify 'input_map' in step 0 of ensemble '{ENS}'",
        ),
        (
            'ensemble_scheduling { step [ { model_name: "a" '
            'input_map { key: "INPUT0" value: "X" } } ] }',
            f"must specify 'output_map' in step 0 of ensemble '{ENS}'",
        ),
    ],
    ids=["no-scheduling", "no-steps", "no-model-name", "no-input-map", "no-output-map"],
)
def test_incomplete_ensemble_scheduling(scheduling: str, expected: str) -> None:
    assert error_of(ensemble(extra=scheduling)) == expected


def test_ensemble_tensor_without_datatype() -> None:
    config = ensemble(ident("a", "X", "Y"), outputs=[("Y", "TYPE_INVALID", [-1])])
    assert error_of(config) == f"ensemble '{ENS}': tensor 'Y' must specify 'data_type'"


# --------------------------------------------------------------------------------- routes


@pytest.fixture(scope="module")
def branches() -> EnsemblePlan:
    """Inputs X, X2; outputs Z, Y, W, V::

    step 0 pair(X, X2) -> t (OUTPUT0), Z (OUTPUT1)
    step 1 a(t)        -> u
    step 2 b(t)        -> Y
    step 3 pair(u, Y)  -> W
    step 4 c(X2)       -> V          (a branch of its own)
    """
    return plan_of(
        ensemble(
            step("pair", {"INPUT0": "X", "INPUT1": "X2"}, {"OUTPUT0": "t", "OUTPUT1": "Z"}),
            ident("a", "t", "u"),
            ident("b", "t", "Y"),
            step("pair", {"INPUT0": "u", "INPUT1": "Y"}, {"OUTPUT0": "W"}),
            ident("c", "X2", "V"),
            inputs=[("X", *INT), ("X2", *INT)],
            outputs=[("Z", *INT), ("Y", *INT), ("W", *INT), ("V", *INT)],
        )
    )


def test_route_walks_only_the_steps_an_output_needs(branches: EnsemblePlan) -> None:
    route = branches.route(("V",))
    assert route.wanted == ("V",)
    assert route.steps == branches.steps
    assert route.start == (4,)
    assert route.requested == {4: ("OUTPUT0",)}
    assert route.consumers == {"X2": (4,)}
    assert route.refs == {"V": 1, "X2": 1}


def test_route_asks_steps_only_for_the_outputs_it_uses(branches: EnsemblePlan) -> None:
    route = branches.route(("Y",))
    assert sorted(route.requested) == [0, 2]
    assert route.requested[0] == ("OUTPUT0",)  # not OUTPUT1 (Z): nobody wants it
    assert route.start == (0,)
    assert route.consumers == {"X": (0,), "X2": (0,), "t": (2,)}
    assert route.refs == {"Y": 1, "X": 1, "X2": 1, "t": 1}


def test_route_refs_count_reads_plus_one_for_wanted_outputs(branches: EnsemblePlan) -> None:
    route = branches.route(("W", "Y"))
    assert sorted(route.requested) == [0, 1, 2, 3]
    assert route.consumers["t"] == (1, 2)
    assert route.refs["t"] == 2  # read by steps 1 and 2
    assert route.refs["Y"] == 2  # read by step 3 and returned to the client
    assert route.refs["W"] == 1
    assert route.refs["u"] == 1
    assert "Z" not in route.refs and "V" not in route.refs


def test_route_for_every_output(branches: EnsemblePlan) -> None:
    route = branches.route(("Z", "Y", "W", "V"))
    assert route.start == (0, 4)
    assert sorted(route.requested) == [0, 1, 2, 3, 4]
    assert route.requested[0] == ("OUTPUT0", "OUTPUT1")
    assert route.consumers["X2"] == (0, 4)
    assert route.refs["X2"] == 2
    assert route.refs["Z"] == 1  # wanted, read by no step


def test_route_is_computed_once_per_set_of_outputs(branches: EnsemblePlan) -> None:
    assert branches.route(("Y",)) is branches.route(("Y",))
    assert branches.route(("Y", "W")) is not branches.route(("W", "Y"))


def test_route_start_excludes_steps_that_wait_on_other_steps() -> None:
    plan = plan_of(
        ensemble(
            ident("a", "X", "t"),
            step("pair", {"INPUT0": "X", "INPUT1": "t"}, {"OUTPUT0": "Y"}),
        )
    )
    route = plan.route(("Y",))
    assert route.start == (0,)
    assert route.consumers == {"X": (0, 1), "t": (1,)}
    assert route.refs == {"Y": 1, "X": 2, "t": 1}


def test_a_step_reading_one_tensor_twice_counts_two_reads() -> None:
    plan = plan_of(ensemble(step("pair", {"INPUT0": "X", "INPUT1": "X"}, {"OUTPUT0": "Y"})))
    route = plan.route(("Y",))
    assert route.consumers == {"X": (0,)}
    assert route.refs["X"] == 2


def test_plan_is_decoupled_when_any_step_is() -> None:
    assert plan_of(ensemble(ident("a", "X", "t"), ident("dec", "t", "Y"))).decoupled
    assert not plan_of(ensemble(ident("a", "X", "t"), ident("b", "t", "Y"))).decoupled
