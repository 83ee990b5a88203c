# gpuctl — the developer entry points. Everything a run needs is installed from here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test unit lint bench venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

venv: $(STAMP)

## demo: install into a local virtual environment and show the views of the bundled example snapshot
demo: $(STAMP)
	$(BIN)/gpuctl views --snapshot examples/snapshot

## lint: ruff and mypy --strict on gpuctl/
lint: $(STAMP)
	$(BIN)/ruff check gpuctl tests bench
	$(BIN)/ruff format --check gpuctl tests bench
	$(BIN)/mypy

## test: lint, then every test suite
test: lint
	$(BIN)/python -m pytest -q tests

## unit: the fast suites only
unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/cli

## bench: measure against reference runs and write docs/benchmarks.md
bench: $(STAMP)
	$(BIN)/python -m bench.run --write docs/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
