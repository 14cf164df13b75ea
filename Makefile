# tritium — the commands a newcomer needs: `make serve` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
REPO ?= examples/model_repository
ARGS ?=

.PHONY: serve test models bench lint clean

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

lint: $(VENV)/.installed
	$(PY) -m pip install -q ruff
	$(VENV)/bin/ruff check src tests bench examples

clean:
	rm -rf $(VENV) build src/*.egg-info
	find $(REPO) -name '*.onnx' -delete
