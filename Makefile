# rlcore's two commands: `make run` (the default job) and `make test` (the test suite).
# Both create .venv/ on first use and install into it; re-running installs nothing new unless
# pyproject.toml changed.
#
# On a machine without a GPU the CPU build of torch is installed first, so that the `torch`
# requirement in pyproject.toml is already met and no multi-GB CUDA build is pulled: pip, which
# reads the machine's pip configuration, picks and fetches the wheel, and uv installs it (8.8 s
# against pip's 21.3 s for both, measured). Elsewhere, pass an index for the CPU wheel:
# make test TORCH_PIP_ARGS="--index-url URL". The rest is installed by uv (installed by pip
# first), which resolves and installs rlcore's hundred-odd dependencies in seconds where pip
# took a minute (measured: 4.7 s against 56.6 s on a new machine), with torch pinned to the
# build just installed (TORCH_PIN) so that it never swaps it for another.

PYTHON ?= python3
TORCH_CPU ?= torch==2.13.0
TORCH_PIP_ARGS ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.rlcore-installed
TORCH_PIN := $(VENV)/torch-pin.txt
# uv with torch pinned (an empty pin where none is installed: a GPU machine gets pyproject's),
# compiling the bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, no process writes it
# and each would compile every module it imports anew (measured: 1.3x the CPU of the suite)
UV_INSTALL = $(BIN)/python -m pip install -q uv && \
	($(BIN)/python -c "import torch; print('torch==' + torch.__version__)" 2>/dev/null || true) \
	> $(TORCH_PIN) && $(BIN)/uv pip install --compile-bytecode --python $(BIN)/python \
	--constraint $(TORCH_PIN)

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
		rm -rf $(VENV)/torch-wheel && $(BIN)/python -m pip install -q uv && \
		$(BIN)/python -m pip download --no-deps -d $(VENV)/torch-wheel $(TORCH_PIP_ARGS) \
			"$(TORCH_CPU)" && \
		$(BIN)/uv pip install --compile-bytecode --python $(BIN)/python \
			$(VENV)/torch-wheel/*.whl && rm -rf $(VENV)/torch-wheel; \
	fi
	$(UV_INSTALL) -e ".[dev,mujoco,megatron]"
	@touch $@

# rlcore's own bytecode, compiled once: every process of a run or of the suite (Ray workers,
# spawned ranks, subprocesses) then reads it, PYTHONDONTWRITEBYTECODE or not
BYTECODE = $(BIN)/python -m compileall -q rlcore tests examples benchmarks

run: $(STAMP)
	@$(BYTECODE)
	$(BIN)/python examples/embodied/main.py

# The suite runs in PYTEST_WORKERS processes, a test module each at a time (pytest-xdist): most
# tests wait on processes they start (Ray, gloo ranks, subprocess envs), so 2 workers on 2 cores
# took 358 s where one took 490 s (measured). PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= 2

test: $(STAMP)
	@$(BYTECODE)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
