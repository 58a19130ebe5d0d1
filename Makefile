# Two commands set up and run everything: `make train` and `make test`.
# Each (re)creates .venv when needed; torch is installed only when it is not importable yet,
# pinned to the tested CPU release, so pip never pulls a multi-GB CUDA build.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup train test test-full lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,sweeps]"
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(BIN)/python src/train.py $(ARGS)

test: $(STAMP)  # the fast suite: every method, the checks, one run through the CLI
	$(BIN)/python -m pytest -m "not slow" $(ARGS)

test-full: $(STAMP)  # everything: the CLI's runs, sweeps, faults, reports, compile
	$(BIN)/python -m pytest $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/ruff format --check src tests scripts

bench: $(STAMP)
	$(BIN)/python scripts/bench_grads.py --out experiments/bench_grads.json

clean:
	rm -rf $(VENV) outputs multirun wandb
