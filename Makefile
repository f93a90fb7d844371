# Two entry points for a fresh machine (Python 3.11+, pip):
#   make demo   set up and run the main job on a bundled example
#   make test   set up and run the whole test suite (what CI runs)
#   make test PYTHON=python3.11   the same on another interpreter (its own .venv-3.11)
#
# The default interpreter is the newest Python 3.12+ found on PATH or under pyenv: pip
# gives older Pythons an older JAX (on 3.11 the last release that supports it), which is
# slower.  Without one, python3, with a note.
NEWEST_PYTHON := $(shell for v in 3.13 3.12; do \
	if python$$v -c '' >/dev/null 2>&1; then echo python$$v; exit 0; fi; \
	if ls -d $(HOME)/.pyenv/versions/$$v.*/bin/python >/dev/null 2>&1; then \
		echo python$$v; exit 0; fi; done)
ifeq ($(origin PYTHON),undefined)
ifeq ($(NEWEST_PYTHON),)
PYTHON := python3
$(info note: no Python 3.12+ found, using python3: pip then installs an older JAX, slower by about 2.5x)
else
PYTHON := $(NEWEST_PYTHON)
endif
DEFAULT_PYTHON := yes
endif
# A pyenv shim answers only for the versions pyenv has selected; then use pyenv's own
# install of that version (python3.12 -> ~/.pyenv/versions/3.12.*/bin/python).
PYTHON_EXE := $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null || \
	ls -d $(HOME)/.pyenv/versions/$(patsubst python%,%,$(notdir $(PYTHON))).*/bin/python \
	2>/dev/null | sort -V | tail -n 1)
PY_VERSION := $(shell $(PYTHON_EXE) -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
	2>/dev/null)
# One virtual environment per interpreter, so that two versions never share one;
# the default interpreter keeps .venv.
VENV ?= $(if $(DEFAULT_PYTHON),.venv,.venv-$(PY_VERSION))
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(PY_VERSION)
DEMO_STAMP := $(VENV)/.installed-demo-$(PY_VERSION)
# A virtual environment made by another interpreter (the default moved to a newer
# Python) is made anew rather than mixed.
NEW_VENV = @if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; \
	print("%d.%d" % sys.version_info[:2])')" != "$(PY_VERSION)" ]; then \
	echo "$(VENV) holds another Python: making it anew for $(PY_VERSION)"; rm -rf $(VENV); fi

.PHONY: setup demo cases test test-fast bench clean venv-path

$(STAMP): pyproject.toml constraints.txt
	@test -n "$(PY_VERSION)" || { echo "no Python interpreter for PYTHON=$(PYTHON)"; exit 1; }
	$(NEW_VENV)
	$(PYTHON_EXE) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs only JAX, SBML and the fit extra (no PyTorch): a quicker first install.
$(DEMO_STAMP): pyproject.toml constraints.txt
	@test -n "$(PY_VERSION)" || { echo "no Python interpreter for PYTHON=$(PYTHON)"; exit 1; }
	$(NEW_VENV)
	$(PYTHON_EXE) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[jax,sbml,fit]'
	touch $(DEMO_STAMP)

setup: $(STAMP)

EXAMPLE := examples/lotka_volterra_ude

DEMO_OUT ?= demo_fit

demo: $(DEMO_STAMP)
	$(BIN)/petab-sciml validate $(EXAMPLE)/problem.yaml
	$(BIN)/petab-sciml fit $(EXAMPLE)/problem.yaml --starts 4 --steps 1000 --lr 0.02 \
		--out $(DEMO_OUT) --force
	$(BIN)/python $(EXAMPLE)/report.py $(DEMO_OUT)
	@echo "plots: $(DEMO_OUT)/plots/  trained problem: $(DEMO_OUT)/best/problem.yaml"

cases: $(STAMP)
	$(BIN)/petab-sciml test-cases run --backend all
	$(BIN)/petab-sciml test-cases run --backend all --dtype float64 --no-suite \
		test_cases $$($(BIN)/python -c 'from petab_sciml.testcases import default_suite as d; \
		s = d(); print(s / "test_cases" / "ml_model_import" if s else "")')

# Two pytest workers (CI has 2 cores); each test module runs whole on one worker, so
# module-scoped fixtures are built once.  TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2

PYTEST_ARGS ?=

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The tests not marked slow (each under ~2 s): the quick check while developing, under
# 3 minutes on 2 cores.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" $(PYTEST_ARGS)

# The virtual environment's folder (for scripts: `make -s venv-path PYTHON=...`).
venv-path:
	@echo $(VENV)

# The maintained benchmarks are benchmarks/bench_*.py (their figures:
# benchmarks/FIGURES.md); benchmarks/investigations/ and the other scripts are not run.
bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf .venv .venv-* build *.egg-info
