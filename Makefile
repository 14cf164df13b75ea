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

.PHONY: serve test models bench lint clean fuzz

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

test: $(VENV)/.installed
	$(PY) -m pytest $(ARGS)

bench: models
	$(PY) bench/run.py $(ARGS)
	$(PY) bench/streams_soak.py
	$(PY) bench/grpc_floor.py

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
	rm -rf $(VENV) build src/*.egg-info
	find $(REPO) -name '*.onnx' -delete
