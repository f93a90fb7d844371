# Two entry points for a fresh machine (Python 3.11+, pip):
#   make demo   set up and run the main job on a bundled example
#   make test   set up and run the whole test suite (what CI runs)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo cases test bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

EXAMPLE := examples/lotka_volterra_ude

demo: $(STAMP)
	$(BIN)/petab-sciml validate $(EXAMPLE)/problem.yaml
	$(BIN)/petab-sciml info $(EXAMPLE)/problem.yaml
	$(BIN)/python $(EXAMPLE)/train.py --backend jax
	$(BIN)/petab-sciml test-cases run test_cases --backend all

cases: $(STAMP)
	$(BIN)/petab-sciml test-cases run --backend all

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
