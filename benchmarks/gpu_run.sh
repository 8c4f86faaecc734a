#!/usr/bin/env bash
# Issue 51's one prepared device run: today's paths (the baseline) and every new one in the same
# call, each check isolated, one JSON line per check under $OUT. benchmarks/README.md says how
# to call it (what to carry, the timeout). Each step has its own deadline, so one that hangs
# leaves the others their time; the whole stays under about 8 minutes.
set -u
OUT=${OUT:-/tmp/gpu_run}
mkdir -p "$OUT"
WORK=/tmp/gpu_check_work  # the random 0.5B model is built once, for every check
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia_smi.csv" 2>&1
python3 benchmarks/gpu_env_probe.py > "$OUT/probe.json" 2>&1
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1
export PYTHONPATH=/tmp/site:. HF_HUB_OFFLINE=1
# generation (generate / static / graph alternated), where a decode step's time goes, the PPO
# iteration of the 0.5B config as it is today and with every new path (two fused chunk sizes;
# the compiled variant, FAST_VARIANTS="chunk2048 compiled", compiles for about 180 s: its own call)
timeout "${CHECK_S:-220}" python3 benchmarks/gpu_check.py --out "$WORK" \
    --only ${CHECKS:-generate decode_profile qwen_ddp qwen_fast} --micro-batch 64 --fast-micro-batches ${FAST_MB:-64} \
    --fast-variants ${FAST_VARIANTS:-chunk2048 chunk512} \
    2> "$OUT/check.err" | tee "$OUT/check.jsonl"
# TRL 1.16's GRPO beside rlcore's (the new paths; TRL_SYSTEMS="trl rlcore rlcore_fast" adds
# today's) on the same work
timeout "${TRL_S:-120}" python3 benchmarks/gpu_check.py --out "$WORK" --only trl_grpo \
    --micro-batch 16 --trl-systems ${TRL_SYSTEMS:-trl rlcore_fast} \
    2> "$OUT/trl.err" | tee "$OUT/trl.jsonl"
# the decode step compiled by inductor before its capture (compiling takes tens of seconds)
timeout "${COMPILE_S:-170}" python3 benchmarks/gpu_check.py --out "$WORK" \
    --only generate_compiled 2> "$OUT/compiled.err" | tee "$OUT/compiled.jsonl"
tail -c 2000 "$OUT/check.err" "$OUT/trl.err" "$OUT/compiled.err"
