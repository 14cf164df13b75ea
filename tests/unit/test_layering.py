"""The layering of ../shared/DESIGN.md, checked on the import statements of src/tritium:
the core imports no transport framework, and the front-ends reach the core only through the
server facade (and the value modules)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tritium"
TRANSPORTS = {"grpc", "grpc_health", "httptools", "uvloop", "starlette", "uvicorn", "aiohttp"}
# What a front-end may import from tritium itself (a module, or every module of a package).
# ``tensor_codec`` is the BYTES/raw tensor wire format shared with the Python backend's stub
# protocol: syntax, not core logic. ``access`` (``policy``, ``audit``) is the pure access
# policy and the audit log every front-end applies at its dispatch point; ``metrics.render``
# the Prometheus text the metrics endpoint serves; ``transport`` the protocol cores (HTTP/2);
# ``logs.budget`` the bound on log lines a client can cause; ``loop_spin`` the event loop's
# spin before it sleeps, which front-ends arm while a client's next request is due (the
# server facade keeps its count of inferences in flight); ``api`` the one inference call every
# front-end hands its decoded requests to.
FRONTEND_ALLOWED = {
    "types",
    "errors",
    "server",
    "api",
    "options",
    "tensor_codec",
    "metrics.render",
    "access",
    "transport",
    "logs.budget",
    "loop_spin",
}


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(level, dotted name, names imported from it) of every import in a module; level > 0 for
    relative ones."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(0, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", [a.name for a in node.names]))
    return found


def _tritium_modules(path: Path, level: int, name: str, names: list[str]) -> list[str]:
    """The tritium modules (dotted, without ``tritium.``) an import refers to; ``from X import
    m`` names the module ``X.m`` when m is one. Empty if the import is outside tritium."""
    if level == 0:
        if name != "tritium" and not name.startswith("tritium."):
            return []
        parts = name.split(".")[1:]
    else:
        package = path.relative_to(SRC).parent.parts
        parts = [*package[: len(package) - (level - 1)], *(name.split(".") if name else [])]
    modules = []
    for alias in names or [""]:
        sub = [*parts, alias] if alias else parts
        where = SRC.joinpath(*sub)
        is_module = alias and (where.with_suffix(".py").exists() or where.is_dir())
        modules.append(".".join(sub if is_module else parts) or "__init__")
    return modules


def _allowed_for_frontends(module: str) -> bool:
    return any(module == ok or module.startswith(ok + ".") for ok in FRONTEND_ALLOWED)


# The transport's side: the protocol cores (``transport/``: httptools under HTTP/1.1), the
# front-ends, the runtime that binds them, the command line's entry point (uvloop), the
# in-process API's server loop (uvloop, tritonserver/_loop.py), tritium.pytriton's embedded
# runner (the server on a thread's own uvloop loop) and ``python -m tritium``.
NOT_CORE = {
    "runtime.py",
    "cli/main.py",
    "__main__.py",
    "tritonserver/_loop.py",
    "pytriton/_embedded.py",
}
CORE = [
    p
    for p in SRC.rglob("*.py")
    if "frontends" not in p.parts
    and p.relative_to(SRC).parts[0] != "transport"
    and str(p.relative_to(SRC)) not in NOT_CORE
]
FRONTENDS = list((SRC / "frontends").rglob("*.py"))


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(SRC)))
def test_core_imports_no_transport(path: Path) -> None:
    for level, name, _ in _imports(path):
        if level == 0:
            assert name.split(".")[0] not in TRANSPORTS, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", FRONTENDS, ids=lambda p: str(p.relative_to(SRC)))
def test_frontends_use_only_the_facade(path: Path) -> None:
    for level, name, names in _imports(path):
        for module in _tritium_modules(path, level, name, names):
            if module.split(".")[0] != "frontends":
                assert _allowed_for_frontends(module), (
                    f"{path.relative_to(SRC)} imports tritium.{module}"
                )


TRANSPORT = sorted((SRC / "transport").rglob("*.py"))


@pytest.mark.parametrize("path", TRANSPORT, ids=lambda p: str(p.relative_to(SRC)))
def test_transports_import_only_transports(path: Path) -> None:
    """``transport/`` (HTTP/1.1, HTTP/2, gRPC) imports nothing of tritium but itself, type-only
    imports included: it is given settings records and the seams of ``transport/host.py``
    (issue 38)."""
    for level, name, names in _imports(path):
        for module in _tritium_modules(path, level, name, names):
            assert module.split(".")[0] == "transport", (
                f"{path.relative_to(SRC)} imports tritium.{module}"
            )


# grpcio is no server of tritium's (issue 12): the gRPC front-end is its own HTTP/2 transport.
# ``grpc_health`` (the health_pb2 messages) and tritonclient's generated modules stay.
@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_imports_grpcio(path: Path) -> None:
    for level, name, _ in _imports(path):
        if level == 0:
            assert name.split(".")[0] != "grpc", f"{path.relative_to(SRC)} imports {name}"


def test_serving_imports_no_ml_runtime() -> None:
    """Backends are imported when a model needs them: importing the server (and everything a
    server with only Python models runs) imports no onnxruntime."""
    import subprocess
    import sys

    code = (
        "import sys, tritium.runtime, tritium.server; "
        "print(sorted(m for m in ('onnxruntime', 'torch', 'openvino') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# The layers of the whole package, lowest first: a module imports only from layers below its
# own (or from its own package), so no two packages import each other. The units are the
# top-level modules and packages of src/tritium, all of them (``test_layers_name_every_unit``).
# See docs/architecture.md, "Layers".
LAYERS: list[set[str]] = [
    # protocol cores (HTTP/2 sans-IO, HTTP/1.1); Triton's datatypes: nothing else of tritium
    # (_lazy_client: tritonclient.grpc without the gRPC library, set up by __init__)
    {"transport", "datatypes", "_lazy_client"},
    {"__init__", "errors", "types"},  # the values every layer passes around
    # pure: no request, no model (loop_spin: the event loop's spin before it sleeps;
    # countdown: the exit timeout of a shutdown; readiness: the server's ready state and
    # its waiters; validation: a request's tensors checked
    # against a model's tables)
    {
        "tensor_codec",
        "metrics",
        "access",
        "tracing",
        "loop_spin",
        "countdown",
        "validation",
        "readiness",
    },
    # one inference's state and what it reads of its model (ServedModel); the server's
    # frozen options
    {"request", "options"},
    # parameters, raw input, classification, shared memory, response cache; the logs (the
    # access log's entry reads its request's times)
    {"extensions", "logs"},
    {"config"},  # config.pbtxt -> ModelSpec
    {"backends"},
    {"scheduling"},
    {"repository"},  # the load manager, a loaded Model, warm-up
    {"api"},  # the one inference call (model lookup, cache, forwarding, tracing, access log)
    {"shutdown"},  # the server's stop: in-flight inferences drained, models unloaded
    {"server"},  # the facade
    # the front-ends; Triton's in-process API over the server (tritonserver)
    {"frontends", "tritonserver"},
    {"runtime", "tritonfrontend"},  # tritonfrontend: the front-ends on an in-process server
    {"workers"},  # --workers N: the supervisor, a worker's control plane, totals
    {"cli"},  # tritium serve, the flag table
    # PyTriton's API served in the caller's process (its TritonConfig read by cli's flag table)
    {"pytriton"},
    {"__main__", "compat"},  # compat: Triton's module names, opt-in (imports by name only)
]
LAYER_OF = {unit: index for index, units in enumerate(LAYERS) for unit in units}


def _unit(path: Path) -> str:
    """The package (or top-level module) a source file belongs to."""
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _runtime_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(level, module, names) of the imports that run: ``if TYPE_CHECKING:`` blocks skipped."""
    found: list[tuple[int, str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((0, alias.name, []) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append((child.level, child.module or "", [a.name for a in child.names]))
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _target_unit(path: Path, level: int, module: str, names: list[str]) -> str:
    if level == 0:
        return module.split(".")[1] if module.startswith("tritium.") else ""
    package = path.relative_to(SRC).parent.parts
    base = list(package[: len(package) - (level - 1)])
    parts = base + (module.split(".") if module else [])
    if not parts:  # ``from . import X``: X from the package's __init__, or module X
        where = SRC / names[0]
        return names[0] if where.with_suffix(".py").exists() or where.is_dir() else "__init__"
    return parts[0]


ALL_MODULES = sorted(SRC.rglob("*.py"))


def test_layers_name_every_unit() -> None:
    """LAYERS is the directory listing: every top-level module and package, nothing else."""
    assert {_unit(p) for p in ALL_MODULES} == set(LAYER_OF)
    assert sum(len(units) for units in LAYERS) == len(LAYER_OF)  # each in one layer


def _unit_imports(path: Path) -> set[str]:
    """The other units ``path`` imports, type-only imports (``if TYPE_CHECKING:``) included:
    a type-only import up the layers is a cycle between packages too."""
    own = _unit(path)
    targets = {_target_unit(path, *found) for found in _imports(path)}
    return {t for t in targets if t and t != own}


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_go_down_the_layers(path: Path) -> None:
    """Every import, type-only ones (``if TYPE_CHECKING:``) included."""
    own = _unit(path)
    for target in _unit_imports(path):
        assert LAYER_OF[target] < LAYER_OF[own], (
            f"{path.relative_to(SRC)} ({own}, layer {LAYER_OF[own]}) imports {target} "
            f"(layer {LAYER_OF[target]})"
        )


def test_type_only_imports_count() -> None:
    """request.py imports the tracing package's Trace only under ``if TYPE_CHECKING:``."""
    request = SRC / "request.py"
    runtime = {_target_unit(request, *found) for found in _runtime_imports(request)}
    assert "tracing" in _unit_imports(request) and "tracing" not in runtime


def test_no_cycle_between_packages() -> None:
    """The graph of units (top-level packages and modules), type-only imports included, is
    acyclic: no two packages reach each other, not even through types."""
    graph: dict[str, set[str]] = {}
    for path in ALL_MODULES:
        graph.setdefault(_unit(path), set()).update(_unit_imports(path))
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def _module_graph() -> dict[str, set[str]]:
    """Module -> the tritium modules it imports when it runs (late imports in functions too;
    ``if TYPE_CHECKING:`` blocks skipped). A package stands for its ``__init__``."""
    graph: dict[str, set[str]] = {}
    for path in ALL_MODULES:
        own = _module_name(path)
        targets = {
            module
            for level, name, names in _runtime_imports(path)
            for module in _tritium_modules(path, level, name, names)
        }
        graph[own] = targets - {own}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_modules() -> None:
    """Not even one held by a late import inside a function (pb_metrics once imported
    pb_utils that way; the error types it shares with it are in pb_errors now)."""
    graph = _module_graph()
    assert "backends.python.pb_errors" in graph["backends.python.pb_metrics"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
