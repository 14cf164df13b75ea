"""The Helm chart (deploy/helm/tritium), rendered without Helm by deploy/helm/render.py: the
committed manifests (deploy/kubernetes/) are the chart with its values; every Kubernetes
object matches the API's schema (the ``kubernetes`` package's models, unknown fields
refused); the values reach the manifests (flags parsed by tritium's own parser); the grace
period outlasts the drain; the HPA, the adapter rule and the recording rule name one metric;
the KServe runtime's flags are tritium's. ``kubectl kustomize`` builds the plain manifests."""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from tritium.cli.main import build_parser, options_from_args  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
_spec = importlib.util.spec_from_file_location("helm_render", DEPLOY / "helm" / "render.py")
assert _spec is not None and _spec.loader is not None
render = importlib.util.module_from_spec(_spec)
sys.modules["helm_render"] = render
_spec.loader.exec_module(render)

VALUES = yaml.safe_load((DEPLOY / "helm" / "tritium" / "values.yaml").read_text())


def _objects(text: str) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text) if doc}


def _render(**changes: Any) -> dict[str, dict[str, Any]]:
    values = copy.deepcopy(VALUES)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = values
        for part in parents:
            target = target[part]
        target[last] = value
    return _objects(render.render(values))


def _container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _options(args: list[str]) -> Any:
    return options_from_args(build_parser().parse_args(["serve", *args]))


def test_the_committed_manifests_are_the_chart_rendered() -> None:
    committed = (DEPLOY / "kubernetes" / "tritium.yaml").read_text()
    hint = "run: python deploy/helm/render.py --out deploy/kubernetes/tritium.yaml"
    assert render.render() == committed, hint


# -- the API's schemas ----------------------------------------------------------------------
def _models() -> Any:
    return pytest.importorskip("kubernetes.client")


def _check(value: Any, kind: str, where: str) -> None:
    """``value`` fits the OpenAPI type ``kind`` of the kubernetes package; unknown keys fail."""
    models = _models()
    if kind.lower().startswith("list["):  # List[V1Container] (older packages: list[...])
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _check(item, kind[5:-1], f"{where}[{i}]")
    elif kind.lower().startswith(("dict[", "dict(")):  # Dict[str, str]
        assert isinstance(value, dict), where
        inner = kind[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            _check(item, inner, f"{where}.{key}")
    elif kind in ("str", "int", "bool", "float", "object", "datetime"):
        expected = {"str": str, "int": int, "bool": bool, "float": (int, float)}
        if kind in expected:
            assert isinstance(value, expected[kind]), f"{where}: {value!r} is not {kind}"
    else:
        model = getattr(models, kind)
        assert isinstance(value, dict), f"{where}: not an object"
        by_key = {json_key: attr for attr, json_key in model.attribute_map.items()}
        for key, item in value.items():
            assert key in by_key, f"{where}: unknown field {key!r} for {kind}"
            _check(item, model.openapi_types[by_key[key]], f"{where}.{key}")


_SCHEMAS = {
    ("apps/v1", "Deployment"): "V1Deployment",
    ("v1", "Service"): "V1Service",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "V2HorizontalPodAutoscaler",
}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"autoscaling__enabled": False, "podDisruptionBudget__enabled": False},
        {"redis__enabled": True, "redis__passwordSecret": "redis-auth"},
        {"serviceMonitor__enabled": True, "prometheusRule__enabled": True},
    ],
    ids=["defaults", "fixed-replicas", "redis", "prometheus-operator"],
)
def test_every_object_matches_the_kubernetes_schema(changes: dict[str, Any]) -> None:
    for kind, obj in _render(**changes).items():
        key = (obj["apiVersion"], kind)
        if key in _SCHEMAS:
            _check(obj, _SCHEMAS[key], kind)
        else:  # the Prometheus operator's CRDs
            assert obj["apiVersion"] == "monitoring.coreos.com/v1", key
            assert kind in ("ServiceMonitor", "PrometheusRule")
        assert obj["metadata"]["name"]


# -- values → manifests ---------------------------------------------------------------------
def test_the_defaults_serve_triton_s_ports_with_its_probes() -> None:
    objects = _render()
    container = _container(objects)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["resources"] == VALUES["resources"]
    options = _options(container["args"])
    assert options.repository.paths == (Path("/models"),)
    assert options.exit_timeout_secs == VALUES["exitTimeoutSecs"]
    assert (options.http.port, options.grpc.port, options.metrics.port) == (8000, 8001, 8002)
    service_ports = {p["name"]: p["port"] for p in objects["Service"]["spec"]["ports"]}
    assert service_ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert "replicas" not in objects["Deployment"]["spec"]  # the HPA owns it
    assert objects["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 2


def test_the_grace_period_outlasts_the_drain() -> None:
    spec = _render()["Deployment"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = _options(container["args"]).exit_timeout_secs
    assert spec["terminationGracePeriodSeconds"] > pause + drain


def test_redis_init_container_and_extra_args_reach_the_pod() -> None:
    objects = _render(
        autoscaling__enabled=False,
        replicaCount=3,
        redis__enabled=True,
        redis__passwordSecret="redis-auth",
        extraArgs=["--log-verbose=1"],
        modelRepository__initContainer__enabled=True,
    )
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    container = _container(objects)
    options = _options(container["args"])
    redis = options.response_cache_redis
    assert redis is not None and (redis.host, redis.port, redis.db) == ("redis", 6379, 0)
    assert (redis.socket_timeout_ms, redis.connect_timeout_ms) == (200, 200)
    assert options.logging.verbose == 1
    (env,) = container["env"]
    assert env["name"] == "TRITONCACHE_REDIS_PASSWORD"
    assert env["valueFrom"]["secretKeyRef"] == {"name": "redis-auth", "key": "password"}
    (init,) = pod["initContainers"]
    assert init["volumeMounts"] == [{"name": "models", "mountPath": "/models"}]
    models = {v["name"]: v for v in pod["volumes"]}["models"]
    assert models == {"name": "models", "emptyDir": {}}
    assert "HorizontalPodAutoscaler" not in objects


def test_one_autoscaling_metric_from_rule_to_adapter_to_hpa() -> None:
    objects = _render(prometheusRule__enabled=True)
    recorded = yaml.safe_load((DEPLOY / "prometheus" / "autoscaling.yml").read_text())
    (file_rule,) = recorded["groups"][0]["rules"]
    (chart_rule,) = objects["PrometheusRule"]["spec"]["groups"][0]["rules"]
    assert chart_rule == file_rule
    adapter = yaml.safe_load((DEPLOY / "helm" / "prometheus-adapter-values.yaml").read_text())
    (custom,) = adapter["rules"]["custom"]
    assert file_rule["record"] in custom["seriesQuery"]
    assert re.fullmatch(custom["name"]["matches"], file_rule["record"])
    metric = objects["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert metric == custom["name"]["as"] == VALUES["autoscaling"]["metricName"]


def test_the_kserve_runtime_runs_tritium_flags() -> None:
    runtime = yaml.safe_load((DEPLOY / "kserve" / "servingruntime.yaml").read_text())
    service = yaml.safe_load((DEPLOY / "kserve" / "inferenceservice.yaml").read_text())
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container"  # the name KServe looks for
    options = _options(container["args"])
    assert options.repository.paths == (Path("/mnt/models"),)  # where KServe puts storageUri
    assert (options.http.port, options.grpc.port) == (8080, 9000)  # KServe's ports
    _check({k: v for k, v in container.items()}, "V1Container", "kserve-container")


def test_kubectl_kustomize_builds_the_plain_manifests() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (Debian's kubernetes-client)")
    done = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "kubernetes")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(done.stdout) if doc)
    assert kinds == sorted(_render())


# -- the renderer ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "template",
    [
        "{{ .Values.nope }}",
        '{{ include "x" . }}',
        "{{ .Values.resources }}",  # a map needs toYaml
        "{{- if .Values.replicaCount }}open",
        "{{ end }}",
        '{{ .Files.Get "x" }}',
    ],
)
def test_the_renderer_refuses_what_it_does_not_implement(template: str) -> None:
    context = render.Context(VALUES, {"Name": "t", "Namespace": "n"}, {"Name": "c"})
    with pytest.raises(render.TemplateError):
        render.execute(render.parse(template), context)


def test_the_renderer_trims_and_indents_as_helm() -> None:
    context = render.Context({"a": {"b": 1}, "l": ["x", "y"], "on": True}, {}, {})
    text = (
        "k:\n  {{- toYaml .Values.a | nindent 2 }}\n{{- range .Values.l }}\n- {{ . | quote }}\n"
        "{{- end }}\n{{- if not .Values.on }}\nno{{- else }}\nyes{{- end }}\n"
    )
    assert render.execute(render.parse(text), context) == 'k:\n  b: 1\n- "x"\n- "y"\nyes\n'


# -- what a cluster without extras accepts --------------------------------------------------
_VARIANTS = [
    {},
    {"serviceMonitor__enabled": True, "prometheusRule__enabled": True},
    {"autoscaling__enabled": False, "redis__enabled": True},
]


def test_the_defaults_need_no_prometheus_operator() -> None:
    """A cluster without the operator's CRDs refuses its kinds, and the whole release with
    them: the defaults render none; each switch turns its own object on."""
    assert {obj["apiVersion"] for obj in _render().values()} <= {
        "apps/v1",
        "v1",
        "policy/v1",
        "autoscaling/v2",
    }
    assert "ServiceMonitor" in _render(serviceMonitor__enabled=True)
    assert "PrometheusRule" not in _render(serviceMonitor__enabled=True)
    assert "PrometheusRule" in _render(prometheusRule__enabled=True)


@pytest.mark.parametrize("changes", _VARIANTS, ids=["defaults", "operator", "redis"])
def test_no_manifest_names_a_namespace(changes: dict[str, Any]) -> None:
    """The release's namespace (helm -n, kubectl apply -n, kustomize's namespace:) decides."""
    for kind, obj in _render(**changes).items():
        assert "namespace" not in obj["metadata"], kind
    committed = yaml.safe_load_all((DEPLOY / "kubernetes" / "tritium.yaml").read_text())
    assert all("namespace" not in doc["metadata"] for doc in committed if doc)


# -- values merged as Helm merges them -------------------------------------------------------
def test_merge_follows_helm() -> None:
    base = {"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "f": "x", "g": {"h": 1}}
    override = {"a": {"c": [3], "d": {"k": 2}, "new": None}, "f": None, "g": "flat"}
    before = copy.deepcopy((base, override))
    merged = render.merge(base, override)
    assert merged == {"a": {"b": 1, "c": [3], "d": {"e": 1, "k": 2}}, "g": "flat"}
    assert (base, override) == before  # neither input changed
    assert render.merge({"a": 1}, {"b": {"c": None, "d": 2}}) == {"a": 1, "b": {"d": 2}}


def test_a_partial_values_file_merges_over_the_defaults(tmp_path: Path) -> None:
    partial = tmp_path / "values.yaml"
    partial.write_text(
        "redis:\n  enabled: true\n  host: cache\nresources:\n  limits: null\n"
        "extraArgs: [--log-verbose=1]\n"
    )
    out = tmp_path / "out.yaml"
    args = ["--values", str(partial), "--set", "autoscaling.enabled=false", "--out", str(out)]
    assert render.main(args) == 0
    objects = _objects(out.read_text())
    container = _container(objects)
    options = _options(container["args"])
    redis = options.response_cache_redis
    assert redis is not None and (redis.host, redis.port) == ("cache", 6379)  # port: default
    assert options.logging.verbose == 1
    assert container["resources"] == {"requests": VALUES["resources"]["requests"]}
    assert objects["Deployment"]["spec"]["replicas"] == VALUES["replicaCount"]
    assert "HorizontalPodAutoscaler" not in objects


def test_set_builds_the_path_it_names() -> None:
    values = render.chart_values([], ["serviceMonitor.interval=30s", "podDisruptionBudget=null"])
    assert values["serviceMonitor"] == {"enabled": False, "interval": "30s"}
    assert "podDisruptionBudget" not in values
    with pytest.raises(render.TemplateError):
        render.chart_values([], ["replicaCount"])


# -- Helm itself (make helm-deps) --------------------------------------------------------------
_PARTIAL = {
    "defaults": None,
    "partial": "redis:\n  enabled: true\n  passwordSecret: auth\nresources:\n  limits: null\n",
    "operator": "serviceMonitor:\n  enabled: true\nprometheusRule:\n  enabled: true\n"
    "autoscaling:\n  enabled: false\nextraArgs: [--log-verbose=1]\n",
}


@pytest.fixture(scope="module")
def helm() -> str:
    found = shutil.which("helm") or str(DEPLOY.parent / "build" / "helm" / "helm")
    if not Path(found).is_file():
        pytest.skip("helm not found on PATH or in build/helm (make helm-deps fetches Helm 4)")
    return found


def _helm(helm: str, *args: str) -> str:
    done = subprocess.run([helm, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _keyed(text: str) -> dict[tuple[str, str], Any]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


@pytest.mark.parametrize("name", list(_PARTIAL))
def test_helm_lints_and_renders_what_the_renderer_renders(
    helm: str, name: str, tmp_path: Path
) -> None:
    chart = str(DEPLOY / "helm" / "tritium")
    files: list[Path] = []
    if _PARTIAL[name] is not None:
        files.append(tmp_path / "values.yaml")
        files[0].write_text(str(_PARTIAL[name]))
    flags = [arg for path in files for arg in ("-f", str(path))]
    _helm(helm, "lint", "--strict", chart, *flags)
    by_helm = _keyed(_helm(helm, "template", "tritium", chart, *flags))
    ours = _keyed(render.render(render.chart_values(files, [])))
    assert sorted(by_helm) == sorted(ours)
    assert by_helm == ours


# -- kubernetes-validate (test extra) ----------------------------------------------------------
@pytest.mark.parametrize("name", list(_PARTIAL))
def test_kubernetes_validate_strict_accepts_the_manifests(name: str, tmp_path: Path) -> None:
    """Kubernetes' own JSON schemas, unknown fields refused (the operator's kinds have no
    schema there: it warns and passes them)."""
    found = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    found = found or shutil.which("kubernetes-validate")
    if found is None:
        pytest.skip("kubernetes-validate not installed (the test extra)")
    files = []
    if _PARTIAL[name] is not None:
        files.append(tmp_path / "values.yaml")
        files[0].write_text(str(_PARTIAL[name]))
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(render.render(render.chart_values(files, [])))
    done = subprocess.run(
        [found, "--strict", str(manifests)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed for resource deployment/tritium" in done.stdout + done.stderr
