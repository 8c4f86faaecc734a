#!/bin/bash
# TRL and rlcore alternated in one session on issue #16's settings (benchmarks/trl_baseline.py
# says what is matched): 3 rounds of PPO (TRL 1.12 with and without its gc.collect calls,
# rlcore between them), then 3 rounds of GRPO (TRL 1.16 and rlcore, KL-loss beta 0 and 0.04).
# One JSON line per measurement, appended to $RES. The TRL venvs are set up as trl_baseline.py
# says; run from the repository root:
#   TRL112=/path/venv112/bin/python TRL116=/path/venv116/bin/python bash benchmarks/trl_compare.sh
set -e
TRL112=${TRL112:-/work/venvs/trl112/bin/python}
TRL116=${TRL116:-/work/venvs/trl116/bin/python}
RES=${RES:-/tmp/bench/results.jsonl}
TMP=$(mkdir -p "$(dirname "$RES")" && mktemp -d)
export HF_HUB_OFFLINE=1
BASE="data.train_batch_size=64 data.max_response_length=16 actor.ppo_mini_batch_size=32 runner.torch_threads=1 runner.total_iterations=20 runner.val_every=20 logger.console=true"
rl() {  # label, overrides...
  label=$1; shift
  commit=$(git log --oneline -1 | cut -d' ' -f1); dirty=$(git status --porcelain --untracked-files=no | wc -l)
  PYTHONPATH=. .venv/bin/python benchmarks/reasoning.py $BASE "$@" --seeds 1 > $TMP/rl.out 2> $TMP/rl.err
  iters=$(grep -o "time/iteration_s=[0-9.e-]*" $TMP/rl.err | cut -d= -f2 | tr '\n' ' ')
  line=$(head -1 $TMP/rl.out)
  python3 -c "
import json,statistics,sys
row=json.loads(sys.argv[1]); it=[float(x) for x in sys.argv[2].split()]
print(json.dumps({'system':'rlcore','label':sys.argv[3],'commit':sys.argv[4],'dirty_tracked_files':int(sys.argv[5]),
 'overrides':sys.argv[6],'iteration_mean_all':row['seconds_per_stage']['iteration'],
 'iteration_median_after2':round(statistics.median(it[2:]),4),'iterations':len(it),'seconds_per_stage':row['seconds_per_stage'],
 'padding_share':row['padding_share'],'val_accuracy_before':row['val_accuracy_before'],'val_accuracy_after':row['val_accuracy_after']}))
" "$line" "$iters" "$label" "$commit" "$dirty" "$*" >> $RES
}
trl() { py=$1; shift; "$py" benchmarks/trl_baseline.py "$@" 2>$TMP/trl.err | grep '^{"system"' >> $RES; }
for round in 1 2 3; do
  trl $TRL112 ppo --gc-collect=true
  rl ppo algorithm.use_kl_in_reward=true
  trl $TRL112 ppo --gc-collect=false
done
for round in 1 2 3; do
  trl $TRL116 grpo --beta 0
  rl grpo_beta0 actor.model.share_group_prompts=true actor.shuffle=false algorithm.adv_type=grpo algorithm.group_size=4 algorithm.use_kl_in_reward=false
  trl $TRL116 grpo --beta 0.04
  rl grpo_beta0.04 actor.model.share_group_prompts=true actor.shuffle=false algorithm.adv_type=grpo algorithm.group_size=4 algorithm.use_kl_in_reward=false algorithm.use_kl_loss=true algorithm.kl_loss_coef=0.04
done
