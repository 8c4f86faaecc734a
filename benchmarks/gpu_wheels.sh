#!/usr/bin/env bash
# The wheels a lent GPU machine without internet lacks to run benchmarks/gpu_check.py, for its
# Python (3.12 on the machines lent so far: torch, transformers, peft, safetensors, psutil and
# tensorboard are there already; a one-process plan needs no Ray). Run here, in the repository's
# root; it writes .whl/ (keep it out of git: `echo /.whl/ >> .git/info/exclude`), 4.2 MiB.
# There: pip install --no-index --no-deps --target /tmp/site .whl/*.whl, then
# PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_check.py (docs/backends.md has what it gave).
#
# Sets beyond rlcore's own, named as arguments (`bash benchmarks/gpu_wheels.sh trl pandas`):
#   trl     TRL 1.16.0 for benchmarks/trl_baseline.py --device cuda, with accelerate, datasets
#           4.8.5 (the newest that takes the machine's huggingface-hub <2, which transformers
#           5.17 pins, and any pyarrow >= 21) and its pure-Python needs (dill, multiprocess,
#           xxhash, requests and its own), about 3 MiB;
#   pandas  pandas 2.3.3 (takes numpy 1.26 and 2.x) with python-dateutil, six, pytz, tzdata,
#           about 13 MiB: TRL and datasets import it;
#   arrow   pyarrow 21.0.0, 41 MiB: datasets imports it. With everything above that is 60.7
#           MiB, 63.7 with the repository's tracked files (3 MiB): at the 64 MiB a run carries.
#           MEGATRON=0 leaves megatron-core (2.5 MiB; only the qwen_megatron check needs it)
#           out, and a set the machine has (gpu_env_probe.py) need not travel.
# benchmarks/gpu_env_probe.py, run there first, says which of these the machine has. Then, with
# `.whl` carried (measured here: rlcore's set with trl and pandas, 19.9 MiB):
#   python3 benchmarks/gpu_env_probe.py
#   pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:. HF_HUB_OFFLINE=1 python3 benchmarks/trl_baseline.py --device cuda
# RLCORE=0 leaves out rlcore's own set. The sizes and the total are printed at the end.
set -euo pipefail
PY=${PY:-.venv/bin/python}
VERSION=${PYTHON_VERSION:-3.12}
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$p")
done
fetch() {
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$VERSION" \
        --implementation cp "${platforms[@]}" -d .whl "$@"
}
if [ "${RLCORE:-1}" != 0 ]; then
    fetch hydra-core==1.3.8 omegaconf==2.3.1 Farama-Notifications==0.0.6 gymnasium==1.4.0 \
        tensordict==0.15.3 pyvers==0.2.3
    if [ "${MEGATRON:-1}" != 0 ]; then fetch megatron-core==0.16.1; fi
    # antlr4-python3-runtime 4.9.3 (hydra's) is published as a source archive only: built here
    "$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
fi
for set in "$@"; do
    case "$set" in
    trl)
        fetch trl==1.16.0 accelerate==1.15.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 \
            xxhash==4.1.0 requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3
        ;;
    pandas)
        fetch pandas==2.3.3 python-dateutil==2.9.0.post0 six==1.17.0 pytz==2026.6 tzdata==2026.6
        ;;
    arrow) fetch pyarrow==21.0.0 ;;
    *)
        echo "gpu_wheels.sh: unknown set '$set'; the sets are trl, pandas and arrow" >&2
        exit 2
        ;;
    esac
done
ls -s --block-size=K .whl
du -cb .whl/*.whl | tail -1 | awk '{printf ".whl/ holds %.1f MiB (a run carries at most 64 MiB with the repository'"'"'s files)\n", $1 / 1048576}'
