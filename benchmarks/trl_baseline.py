"""Hugging Face TRL on the default reasoning job's work: seconds per PPO (TRL 1.12) or GRPO
(TRL 1.16) iteration, to set beside rlcore's ``benchmarks/reasoning.py``. Runs in a TRL venv of
its own (rlcore need not be importable there); CPU only, one torch thread.

Setup (venvs outside the repo; torch the same CPU build as rlcore's venv)::

    python3.11 -m venv /work/venvs/trl112 && python3.11 -m venv /work/venvs/trl116
    /work/venvs/trl112/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /work/venvs/trl112/bin/pip install trl==1.12.0 transformers==5.23.0 datasets==5.2.0
    /work/venvs/trl116/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /work/venvs/trl116/bin/pip install trl==1.16.0 transformers==5.23.0 datasets==5.2.0

(TRL 1.12.0 is the last release with ``trl.experimental.ppo.PPOTrainer``; both resolved
accelerate 1.15.0.) Then, from the repository root::

    # the default job's prompts and its cached tiny model folder (rlcore's venv)
    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/trl_prompts.py
    # PPO: one process with gc.collect as TRL has it, one with gc.collect a no-op
    HF_HUB_OFFLINE=1 /work/venvs/trl112/bin/python benchmarks/trl_baseline.py ppo
    # GRPO, group 4, without and with the KL loss
    HF_HUB_OFFLINE=1 /work/venvs/trl116/bin/python benchmarks/trl_baseline.py grpo --beta 0
    HF_HUB_OFFLINE=1 /work/venvs/trl116/bin/python benchmarks/trl_baseline.py grpo --beta 0.04

Options: ``--iterations 10 --warmup 2`` (iterations run; the first ``--warmup`` are dropped
before the median), ``--prompts outputs/trl_baseline/prompts.jsonl`` (trl_prompts.py's file; its
header names the model folder, ``--model DIR`` overrides it), ``--gc-collect both|true|false``
(PPO; ``both`` runs this script twice, one process each, as patching ``gc.collect`` is
process-wide), ``--reward rule|model`` (PPO, below), ``--mini-batches 2``, ``--seed 1``,
``--count-flops`` (adds ``gflop_per_iteration``: torch's ``FlopCounterMode`` over the training,
matrix products; the seconds of such a run are not comparable).
One JSON line per measurement on stdout::

    {"system": "trl", "trl": "1.12.0", "algo": "ppo", "beta": 0.001, "gc_collect": true,
     "seconds_per_iteration_median": ..., "iterations_timed": 8, "settings": {...}}

(``beta`` is the KL coefficient: PPO's in-reward ``kl_coef``, GRPO's KL-loss ``beta``.)

Without ``ppo``/``grpo``: TRL 1.16's GRPO and rlcore's GRPO on the same work in this one
process, where both are importable (issue 51; benchmarks/trl_same_work.py says what is matched):
a random Qwen2.5-0.5B-architecture model, 64 prompts x 4 completions x 256 tokens, bf16, no KL,
one optimizer step per iteration. ``--device cuda`` (default) or ``--device cpu --small`` (a
small model, 8 prompts x 4 x 16 tokens: a rehearsal in seconds), ``--rounds 1`` (runs of each
system, TRL first), ``--iterations 3 --warmup 1``, ``--micro-batch 16``, ``--out DIR``. One JSON
line per run (``"system": "trl"`` or ``"rlcore"``: seconds per iteration, generated tokens/s,
the device's name), then ``"system": "comparison"`` with ``rlcore_over_trl`` (the target: at
most 0.5). gpu_check can run it as a check: ``trl_baseline.check_trl_grpo(args, out)``. On a
lent GPU machine without internet, with the wheels of ``bash benchmarks/gpu_wheels.sh trl
pandas`` carried in ``.whl/`` (19.9 MiB with rlcore's own; ``arrow`` adds pyarrow, 41 MiB, for
a machine without it: benchmarks/gpu_env_probe.py tells)::

    python3 benchmarks/gpu_env_probe.py
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:. HF_HUB_OFFLINE=1 python3 benchmarks/trl_baseline.py --device cuda

What one iteration is, and how it is timed: a ``TrainerCallback`` notes ``time.perf_counter()``
at ``on_train_begin`` and at every ``on_step_end``; an iteration is the time between the ends of
two consecutive iterations, so it holds everything TRL's loop does for one batch: generation,
scoring, the old/reference/value passes, advantages, the updates, TRL's own logging and (PPO)
its ``gc.collect()`` / ``empty_cache()`` calls. No evaluation, sample generations or checkpoints
(``num_sample_generations=0``, ``save_strategy="no"``, ``eval_strategy="no"``).

Matched with the rlcore command (``benchmarks/reasoning.py data.train_batch_size=64
data.max_response_length=16 algorithm.use_kl_in_reward=true actor.ppo_mini_batch_size=32
runner.torch_threads=1``):

* model: the default job's cached tiny Qwen2 folder (``.cache/rlcore/tiny-<hash>``: 2 layers,
  hidden 128, its own 279-token tokenizer), float32, as policy and as reference (a second copy
  loaded from the folder); the PPO value model is ``AutoModelForSequenceClassification
  (num_labels=1)`` from the same folder (backbone from the checkpoint, a fresh ``score`` head).
* prompts: rlcore's own prompt token ids (``question + " Answer after ####."``, written by
  trl_prompts.py), left-padded; GRPO gets the same text and tokenises it as rlcore does (the
  tokenizer adds no special tokens to it either way). 64 prompts per iteration.
* sampling: temperature 1.0, top-p 1, top-k off, at most 16 new tokens, stopping at EOS
  (PPO ``stop_token="eos"``; rlcore stops at EOS too).
* PPO: ``per_device_train_batch_size=64``, ``gradient_accumulation_steps=1``,
  ``num_mini_batches=2`` -> 64 responses per iteration, 2 optimizer steps of 32 responses
  (rlcore: ``ppo_mini_batch_size=32`` prompts, micro-batch 64 -> the same 2 x 32), 1 PPO epoch;
  KL in the reward with ``kl_coef=0.001``, ``kl_estimator="k1"`` (rlcore's
  ``kl_penalty: kl``); gamma 1, lambda 1 (rlcore's ``gae_lambda: 1.0``), clip 0.2, value clip 0.2,
  ``vf_coef=0.5``; lr 1e-4, constant schedule, no warm-up.
* GRPO: ``num_generations=4``, ``per_device_train_batch_size=64`` completions,
  ``gradient_accumulation_steps=2``, ``steps_per_generation=4`` -> a generation batch of 256
  completions (64 prompts x 4) and 2 optimizer steps of 128 completions (2 micro-batches of 64)
  per iteration, which is rlcore's ``ppo_mini_batch_size=32`` prompts x 4 with micro-batch 64;
  ``--mini-batches 1`` gives one optimizer step of 256 instead. ``num_iterations=1`` (one
  epoch), ``loss_type="dapo"`` (token mean, rlcore's ``token-mean``), ``beta`` 0 (no reference
  model loaded) or 0.04 (TRL's k3 KL loss, rlcore's ``low_var_kl``), clip 0.2, lr 1e-4
  constant, ``use_vllm=False``. Since 2 optimizer steps are taken per generation
  (``gradient_accumulation_steps`` is not a multiple of ``steps_per_generation``), TRL computes
  the old log-probs in an extra no-grad forward pass over the 256 completions; rlcore keeps the
  rollout's log-probs instead (``actor.recompute_log_probs=false``: no such pass). With
  ``--mini-batches 1`` (one step of 256) TRL skips that pass too. rlcore's GRPO runs with
  ``actor.model.share_group_prompts=true`` (a prompt prefilled and passed once for the
  completions to it, the same log-probs and gradients) and ``actor.shuffle=false`` (verl's
  default: each optimizer step takes 32 whole groups in order, so every micro-batch shares its
  prompts fully; TRL shuffles the 256 completions before splitting them into its 2 steps). TRL
  has no prompt sharing and computes each prompt for every completion.
* reward: 1.0 when the number after the last ``####`` in the completion equals the reference
  answer (rlcore's strict GSM8K rule; rlcore's default ``correct_score=1``, ``format_score=0``),
  else 0.0. GRPO: a plain reward function reading the dataset's ``answer`` column. PPO: TRL 1.12's
  ``PPOTrainer`` takes no reward function, only a ``reward_model`` module that it calls through
  ``trl.experimental.utils.get_reward`` (``getattr(model, model.base_model_prefix)(...)`` then
  ``model.score(hidden_states[-1])``). ``--reward rule`` (default) passes ``RuleReward``, a
  module with that interface which decodes each sequence and applies the rule (the answer is
  recomputed from the "What is a + b?" question), so the PPO iteration does the same work as
  rlcore's: no reward network. ``--reward model`` passes a second
  ``AutoModelForSequenceClassification(num_labels=1)`` from the folder instead (the usual TRL
  setup; one more forward pass of the tiny model per iteration; its scores are meaningless).
* dtype float32, ``bf16=False``/``fp16=False`` (both TRL configs default ``bf16`` to True),
  ``gradient_checkpointing=False`` (both TRL configs default it to True; rlcore's
  ``actor.model.gradient_checkpointing`` is false; ``--gradient-checkpointing`` turns it on;
  TRL 1.12's ``PPOTrainer`` never calls ``gradient_checkpointing_enable``, so for PPO the flag
  changes nothing),
  ``use_cpu=True``, ``torch.set_num_threads(1)`` before any model is built, dropout off.

What cannot be matched:

* TRL's PPO trains the policy and the value model together: one loss (``pg_loss + vf_coef *
  vf_loss``), one backward through ``PolicyAndValueWrapper`` and one AdamW over both, one learning
  rate. rlcore updates the critic (lr 1e-3) and the actor (lr 1e-4) separately, each with its own
  optimizer and gradient clipping. The FLOPs are the same; the number of optimizer calls is not.
* TRL's PPO takes the rollout log-probs from ``generate``'s scores (no separate old-log-prob
  forward, as rlcore by default) and runs the reference, value and reward passes per
  ``local_rollout_forward_batch_size`` (64: one pass each); rlcore has its own stage list
  (generate, reward, ref, values, advantages, critic_update, actor_update).
* The pad token is the EOS token (id 0) in this tokenizer; TRL's PPO builds attention masks as
  ``ids != pad_token_id``, so it also masks the EOS it generated (its usual behaviour with such
  tokenizers). Shapes and FLOPs are unaffected.
* Reward scoring: rlcore scores in 2 worker processes (``reward.rules.num_processes=2``); here it is
  in-process (TRL has no such option). Scoring 64-256 short strings takes well under a
  millisecond either way.
* rlcore's ``seconds_per_stage["iteration"]`` is a mean over every iteration (the first
  included); this script reports the median after dropping ``--warmup`` iterations. Parse
  rlcore's ``time/iteration_s`` (``logger.console=true``) for its median.
* Prompt order: TRL's samplers shuffle with their own seed; rlcore draws with its own. Lengths
  differ by at most a couple of tokens between 2-digit sums.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STRICT = re.compile(r"####\s*(-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\.?)")
QUESTION = re.compile(r"What is (\d+) ([+*-]) (\d+)\?")


def correct(completion: str, answer: str) -> float:
    """1.0 when the number after the last '####' in ``completion`` equals ``answer``."""
    found = STRICT.findall(completion)
    if not found:
        return 0.0
    got = found[-1].strip().replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        return 1.0 if float(got) == float(answer) else 0.0
    except ValueError:
        return 0.0


def read_prompts(path: str) -> tuple[dict, list[dict]]:
    lines = Path(path).read_text().splitlines()
    if not lines:
        raise SystemExit(f"{path} is empty; run benchmarks/trl_prompts.py first")
    header, rows = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    return header, rows


class IterationClock:
    """Times between the ends of consecutive iterations (``steps`` optimizer steps each)."""

    def __init__(self, steps_per_iteration: int) -> None:
        self.steps = steps_per_iteration
        self.marks: list[float] = []

    def callback(self):
        from transformers import TrainerCallback

        clock = self

        class Clock(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.marks.append(time.perf_counter())

            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step % clock.steps == 0:
                    clock.marks.append(time.perf_counter())

        return Clock()

    def seconds(self) -> list[float]:
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


def train_counting(trainer, args) -> float | None:
    """``trainer.train()``; with ``--count-flops``, under torch's FlopCounterMode, returning the
    GFLOP of matrix products (and attention, where torch counts it) per iteration."""
    if not args.count_flops:
        trainer.train()
        return None
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        trainer.train()
    return counter.get_total_flops() / args.iterations / 1e9


def summarise(
    args,
    algo: str,
    version: str,
    beta: float,
    gc_collect: bool,
    clock,
    settings,
    flops: float | None = None,
):
    seconds = clock.seconds()
    timed = seconds[args.warmup :]
    if not timed:
        raise SystemExit(f"only {len(seconds)} iterations timed; raise --iterations")
    row = {
        "system": "trl",
        "trl": version,
        "algo": algo,
        "beta": beta,
        "gc_collect": gc_collect,
        "seconds_per_iteration_median": round(statistics.median(timed), 4),
        "seconds_per_iteration_mean": round(statistics.fmean(timed), 4),
        "iterations_timed": len(timed),
        "seconds_per_iteration_all": [round(s, 4) for s in seconds],
        "settings": settings,
    }
    if flops is not None:  # counting slows every operation: these seconds are not comparable
        row["gflop_per_iteration"] = round(flops, 3)
    print(json.dumps(row), flush=True)


def versions() -> dict[str, str]:
    import accelerate
    import torch
    import transformers
    import trl

    return {
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "accelerate": accelerate.__version__,
    }


def run_ppo(args, header: dict, rows: list[dict]) -> None:
    if args.gc_collect == "both":
        for flag in ("true", "false"):
            cmd = [sys.executable, *sys.argv]
            cmd = [c for c in cmd if not c.startswith("--gc-collect")]
            subprocess.run([*cmd, f"--gc-collect={flag}"], check=True)
        return
    gc_collect = args.gc_collect == "true"
    if not gc_collect:
        import gc

        gc.collect = lambda *a, **k: 0  # before TRL is imported and the trainer built

    import torch

    torch.set_num_threads(args.threads)
    import trl
    from datasets import Dataset
    from torch import nn
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    model_dir, tokenizer, policy = load_policy(args, header)
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    value = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=1, dtype=torch.float32
    )
    value.config.pad_token_id = tokenizer.pad_token_id

    class RuleReward(nn.Module):
        """The rule reward behind TRL's ``get_reward`` interface: ``backbone(...)`` decodes each
        sequence and returns its 0/1 score at every position as ``hidden_states[-1]``
        (``[B, T, 1]``); ``score`` is the identity. The question's sum is the answer."""

        base_model_prefix = "backbone"

        def __init__(self, suffix: str) -> None:
            super().__init__()
            self.suffix = suffix
            self.score = nn.Identity()

        def backbone(self, input_ids, attention_mask, **kwargs):
            texts = tokenizer.batch_decode(input_ids * attention_mask, skip_special_tokens=True)
            scores = []
            for text in texts:
                question, _, completion = text.partition(self.suffix)
                match = QUESTION.search(question)
                if match is None:
                    scores.append(0.0)
                    continue
                a, op, b = int(match[1]), match[2], int(match[3])
                answer = {"+": a + b, "-": a - b, "*": a * b}[op]
                scores.append(correct(completion, str(answer)))
            hidden = torch.tensor(scores, dtype=torch.float32)[:, None, None]
            hidden = hidden.expand(-1, input_ids.shape[1], 1)

            class Out:
                hidden_states = (hidden,)

            return Out()

    if args.reward == "rule":
        reward = RuleReward(header["prompt_suffix"])
    else:
        reward = AutoModelForSequenceClassification.from_pretrained(
            model_dir, num_labels=1, dtype=torch.float32
        )
        reward.config.pad_token_id = tokenizer.pad_token_id

    batch = args.prompts_per_iteration
    train = Dataset.from_dict({"input_ids": [r["input_ids"] for r in rows]})
    out = tempfile.mkdtemp(prefix="trl_ppo_")
    config = PPOConfig(
        output_dir=out,
        report_to="none",
        seed=args.seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_mini_batches=args.mini_batches,
        num_ppo_epochs=1,
        local_rollout_forward_batch_size=batch,
        total_episodes=batch * args.iterations,
        response_length=args.max_new_tokens,
        temperature=1.0,
        stop_token="eos",
        missing_eos_penalty=None,
        kl_coef=args.kl_coef,
        kl_estimator="k1",
        whiten_rewards=False,
        gamma=1.0,
        lam=1.0,
        cliprange=0.2,
        cliprange_value=0.2,
        vf_coef=0.5,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        num_sample_generations=0,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    trainer = PPOTrainer(
        args=config,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref,
        reward_model=reward,
        value_model=value,
        train_dataset=train,
        eval_dataset=train.select(range(batch)),
    )
    clock = IterationClock(1)
    trainer.add_callback(clock.callback())
    flops = train_counting(trainer, args)
    settings = {
        **versions(),
        "model_dir": model_dir,
        "prompts_per_iteration": batch,
        "responses_per_iteration": batch,
        "max_new_tokens": args.max_new_tokens,
        "temperature": 1.0,
        "stop_at_eos": True,
        "ppo_epochs": 1,
        "num_mini_batches": args.mini_batches,
        "micro_batch": batch // args.mini_batches,
        "kl_in_reward": True,
        "kl_coef": args.kl_coef,
        "kl_estimator": "k1",
        "critic": True,
        "reference": True,
        "reward": "rule module (RuleReward)"
        if args.reward == "rule"
        else "AutoModelForSequenceClassification",
        "torch_threads": torch.get_num_threads(),
        "iterations": args.iterations,
        "warmup_dropped": args.warmup,
        "device": "cpu",
        "dtype": "float32",
        "gradient_checkpointing": args.gradient_checkpointing,
    }
    summarise(args, "ppo", trl.__version__, args.kl_coef, gc_collect, clock, settings, flops)


def load_policy(args, header: dict):
    """The model folder, its tokenizer (left padding, a pad token) and the policy, float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = args.model or header["model_dir"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return (
        model_dir,
        tokenizer,
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
    )


def run_grpo(args, header: dict, rows: list[dict]) -> None:
    import torch

    torch.set_num_threads(args.threads)
    import trl
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model_dir, tokenizer, policy = load_policy(args, header)

    def accuracy(prompts, completions, answer, **kwargs):
        return [correct(c, a) for c, a in zip(completions, answer, strict=True)]

    group, batch = args.group_size, args.prompts_per_iteration
    completions = batch * group
    micro = args.micro_batch
    per_step = completions // args.mini_batches  # completions per optimizer step
    if per_step % micro:
        raise SystemExit(f"{per_step} completions per optimizer step, not a multiple of {micro}")
    accumulation = per_step // micro
    train = Dataset.from_dict(
        {"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows]}
    )
    out = tempfile.mkdtemp(prefix="trl_grpo_")
    config = GRPOConfig(
        output_dir=out,
        report_to="none",
        seed=args.seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation * args.mini_batches,
        num_generations=group,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_iterations=1,
        beta=args.beta,
        loss_type="dapo",
        epsilon=0.2,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=args.iterations * args.mini_batches,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        use_vllm=False,
        log_completions=False,
        dataloader_num_workers=0,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=accuracy,
        args=config,
        train_dataset=train,
        processing_class=tokenizer,
    )
    clock = IterationClock(args.mini_batches)
    trainer.add_callback(clock.callback())
    flops = train_counting(trainer, args)
    settings = {
        **versions(),
        "model_dir": model_dir,
        "prompts_per_iteration": batch,
        "num_generations": group,
        "completions_per_iteration": completions,
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "steps_per_generation": accumulation * args.mini_batches,
        "optimizer_steps_per_iteration": args.mini_batches,
        "max_completion_length": args.max_new_tokens,
        "temperature": 1.0,
        "num_iterations": 1,
        "loss_type": "dapo",
        "beta": args.beta,
        "reference": args.beta != 0,
        "reward": "rule function",
        "use_vllm": False,
        "torch_threads": torch.get_num_threads(),
        "iterations": args.iterations,
        "warmup_dropped": args.warmup,
        "device": "cpu",
        "dtype": "float32",
        "gradient_checkpointing": args.gradient_checkpointing,
    }
    summarise(args, "grpo", trl.__version__, args.beta, True, clock, settings, flops)


def check_trl_grpo(args, out: Path) -> dict:
    """gpu_check's check of TRL's GRPO beside rlcore's on the same work (trl_same_work.py)."""
    from trl_same_work import check_trl_grpo as check

    return check(args, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "algo",
        nargs="?",
        choices=["ppo", "grpo"],
        help="TRL alone on the tiny job's work, on the CPU; left out: TRL's GRPO and rlcore's "
        "on the same work in this process (--device, trl_same_work.py)",
    )
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default=None, help="no algo: cuda (default) or cpu"
    )
    parser.add_argument("--small", action="store_true", help="no algo: a small model and batch")
    parser.add_argument("--rounds", type=int, default=1, help="no algo: runs of each system")
    parser.add_argument("--out", default=None, help="no algo: working folder (default: a new one)")
    parser.add_argument("--prompts", default="outputs/trl_baseline/prompts.jsonl")
    parser.add_argument("--model", default=None, help="model folder (default: the header's)")
    parser.add_argument("--iterations", type=int, default=None, help="10; no algo: 3")
    parser.add_argument("--warmup", type=int, default=None, help="2; no algo: 1")
    parser.add_argument("--prompts-per-iteration", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--mini-batches", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kl-coef", type=float, default=0.001, help="PPO: KL in the reward")
    parser.add_argument("--gc-collect", choices=["both", "true", "false"], default="both")
    parser.add_argument("--reward", choices=["rule", "model"], default="rule")
    parser.add_argument("--beta", type=float, default=0.0, help="GRPO: KL loss coefficient")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument(
        "--count-flops",
        action="store_true",
        help="also report GFLOP per iteration (torch's FlopCounterMode; the "
        "seconds are then not comparable)",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="TRL's configs' default; off by default here, as in rlcore",
    )
    parser.add_argument(
        "--micro-batch", type=int, default=None, help="GRPO: completions/pass (64; no algo: 16)"
    )
    args = parser.parse_args()
    same_work = args.algo is None
    # set here, not on import: gpu_check imports this module for check_trl_grpo, and its other
    # checks' processes must not inherit them (torch is imported after this point)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not same_work:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not same_work and args.device == "cuda":
        parser.error(
            f"{args.algo} runs TRL alone on the CPU; leave {args.algo} out for --device cuda"
        )
    args.device = args.device or "cuda"
    if args.iterations is None:
        args.iterations = 3 if same_work else 10
    if args.warmup is None:
        args.warmup = 1 if same_work else 2
    if args.micro_batch is None:
        args.micro_batch = 16 if same_work else 64
    if same_work:
        import trl_same_work

        trl_same_work.main(args)
        return
    header, rows = read_prompts(args.prompts)
    (run_ppo if args.algo == "ppo" else run_grpo)(args, header, rows)


if __name__ == "__main__":
    main()
