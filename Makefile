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

.PHONY: serve test models bench lint clean fuzz interop-deps

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

models: $(VENV)/.installed
	$(PY) examples/build_models.py --repository $(REPO)

serve: models
	$(PY) -m tritium serve --model-repository $(REPO) $(ARGS)

test: $(VENV)/.installed interop-deps
	$(PY) -m pytest $(ARGS)

# @grpc/grpc-js for tests/integration/test_grpc_interop_node.py, as package-lock.json pins it;
# reinstalled only when package.json or the lock changes. Without node this says so and the
# tests skip; with node but no npm it fails (the tests would otherwise fail without grpc-js).
interop-deps:
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

bench: models
	$(PY) bench/run.py $(ARGS)
	$(PY) bench/streams_soak.py
	$(PY) bench/grpc_floor.py
	$(PY) bench/channel_floor.py

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
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info $(NODE_INTEROP)/node_modules
	find $(REPO) -name '*.onnx' -delete
