# rlcore's two commands: `make run` (the default job) and `make test` (the test suite).
# Both create .venv/ on first use and install into it; re-running installs nothing new unless
# pyproject.toml changed.
#
# On a machine without a GPU the CPU build of torch is installed first, so that the `torch`
# requirement in pyproject.toml is already met and pip never pulls a multi-GB CUDA build.
# Elsewhere, pass an index for the CPU wheel: make test TORCH_PIP_ARGS="--index-url URL".

PYTHON ?= python3
TORCH_CPU ?= torch==2.13.0
TORCH_PIP_ARGS ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.rlcore-installed

.PHONY: setup run test lint format clean

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@if nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: torch comes from pyproject.toml (a CUDA build)"; \
	elif $(BIN)/python -c "import torch" >/dev/null 2>&1; then \
		echo "torch already installed in $(VENV)"; \
	else \
		echo "no GPU: installing the CPU build $(TORCH_CPU) first"; \
		$(BIN)/python -m pip install $(TORCH_PIP_ARGS) "$(TORCH_CPU)"; \
	fi
	$(BIN)/python -m pip install -e ".[dev,mujoco,megatron]"
	@touch $@

run: $(STAMP)
	$(BIN)/python examples/embodied/main.py

# The suite runs in PYTEST_WORKERS processes, a test module each at a time (pytest-xdist): most
# tests wait on processes they start (Ray, gloo ranks, subprocess envs), so 2 workers on 2 cores
# took 358 s where one took 490 s (measured). PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
