# The whole set-up is two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install only when the package metadata changes; the editable install picks up code edits.
STAMP := $(VENV)/.installed-dev

.PHONY: install demo test test-slow test-all lint format bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: install
	$(BIN)/unstall demo

# The default run: every test not marked slow (well under ten minutes on two cores). Two
# processes (pytest-xdist): much of the suite waits on Ray clusters, subprocesses and emulated
# GPUs rather than computing, so two share two cores well. PYTEST_WORKERS=0 runs in one.
PYTEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS)

test-slow: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m slow

test-all: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) -m "slow or not slow"

lint: install
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy

format: install
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

bench: install
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
