#!/usr/bin/env bash
# The wheels a lent GPU machine without internet lacks to run benchmarks/gpu_check.py, for its
# Python (3.12 on the machines lent so far: torch, transformers, peft, safetensors, psutil and
# tensorboard are there already; a one-process plan needs no Ray). Run here, in the repository's
# root; it writes .whl/ (keep it out of git: `echo /.whl/ >> .git/info/exclude`), 4.2 MiB.
# There: pip install --no-index --no-deps --target /tmp/site .whl/*.whl, then
# PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_check.py (docs/backends.md has what it gave).
set -euo pipefail
PY=${PY:-.venv/bin/python}
VERSION=${PYTHON_VERSION:-3.12}
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$p")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$VERSION" \
    --implementation cp "${platforms[@]}" -d .whl \
    hydra-core==1.3.8 omegaconf==2.3.1 Farama-Notifications==0.0.6 gymnasium==1.4.0 \
    tensordict==0.15.3 pyvers==0.2.3 megatron-core==0.16.1
# antlr4-python3-runtime 4.9.3 (hydra's) is published as a source archive only: built here
"$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
ls .whl
