# Two entry points for a fresh machine (Python 3.11+, pip):
#   make demo   set up and run the main job on a bundled example
#   make test   set up and run the whole test suite (what CI runs)
#   make test PYTHON=python3.12   the same on another interpreter (its own .venv-3.12)
PYTHON ?= python3
# A pyenv shim answers only for the versions pyenv has selected; then use pyenv's own
# install of that version (python3.12 -> ~/.pyenv/versions/3.12.*/bin/python).
PYTHON_EXE := $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null || \
	ls -d $(HOME)/.pyenv/versions/$(patsubst python%,%,$(notdir $(PYTHON))).*/bin/python \
	2>/dev/null | sort -V | tail -n 1)
PY_VERSION := $(shell $(PYTHON_EXE) -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
	2>/dev/null)
# One virtual environment per interpreter, so that two versions never share one;
# the default interpreter keeps .venv.
VENV ?= $(if $(filter python3,$(PYTHON)),.venv,.venv-$(PY_VERSION))
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: setup demo cases test bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -n "$(PY_VERSION)" || { echo "no Python interpreter for PYTHON=$(PYTHON)"; exit 1; }
	$(PYTHON_EXE) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs only JAX, SBML and the fit extra (no PyTorch): a quicker first install.
$(DEMO_STAMP): pyproject.toml constraints.txt
	@test -n "$(PY_VERSION)" || { echo "no Python interpreter for PYTHON=$(PYTHON)"; exit 1; }
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

# Two pytest workers (CI has 2 cores); each test module runs whole on one worker, so
# module-scoped fixtures are built once.  TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The maintained benchmarks are benchmarks/bench_*.py (their figures:
# benchmarks/FIGURES.md); benchmarks/investigations/ and the other scripts are not run.
bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf .venv .venv-* build *.egg-info
