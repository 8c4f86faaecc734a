"""TRL 1.16's ``GRPOTrainer`` and rlcore's GRPO on the same work, in one process on one device
(issue 51): ``benchmarks/trl_baseline.py --device cuda`` and gpu_check's ``check_trl_grpo``.

The work (``WORK``): a Qwen2.5-0.5B-architecture model with random weights (gpu_check's
``random_qwen``, bf16 on the GPU, the tiny job's tokenizer), 64 prompts (rlcore's synthetic
arithmetic prompts, no chat template, the same text to both) x 4 completions x at most 256 new
tokens (temperature 1, top-p 1, top-k off; random weights rarely sample the EOS token, so
completions run to 256: each row reports the generated tokens it counted), GRPO advantages,
token-mean clipped loss (TRL ``loss_type="dapo"``, epsilon 0.2; rlcore ``token-mean``, 0.2 both
sides), no KL (TRL ``beta=0``: no reference model; rlcore neither in the reward nor in the
loss), one AdamW step per iteration over all 256 completions (lr 1e-6, no decay, eps 1e-8,
gradient norm clipped to 1.0) in micro-batches of ``--micro-batch`` completions, no gradient
checkpointing. TRL: model and passes in bf16 (``bf16=True`` and the weights loaded as bf16),
``use_vllm=False`` (transformers' ``generate``), one generation per optimizer step
(``steps_per_generation`` = ``gradient_accumulation_steps``: no old-log-prob pass, as in
rlcore where the rollout's log-probs are the old ones). rlcore: ``actor.model.dtype=bfloat16``,
the ``torch`` backend, ``actor.model.share_group_prompts=true`` (a prompt is prefilled once for
its 4 completions: rlcore's own saving, the same tokens trained) and ``actor.shuffle=false``.
``rlcore_fast`` is rlcore with issue 51's paths on (``FAST``): the static-cache decode loop
(a CUDA graph per decode step on CUDA) and the log-probs from the hidden states; the static
loop prefills every row (no shared prompts). The reward is the GSM8K strict rule on both sides
(0 for random text: every advantage is 0, the backward passes run all the same).

Timing: an iteration is the time between the ends of two consecutive optimizer steps, with
``torch.cuda.synchronize()`` at each mark (TRL: a ``TrainerCallback``; rlcore: around
``runner.iterate``); the first ``warmup`` iterations of each run are dropped. The systems run
in turn, a whole run each (TRL, then rlcore, ``rounds`` times), in this one process: a model
built for each run, the previous run's memory freed first. Tokens/s counts the generated tokens
(TRL's ``completions/mean_length`` and rlcore's ``response/length_mean``, times 256).
"""

from __future__ import annotations

import gc
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

WORK = {
    "prompts": 64,
    "group": 4,
    "new_tokens": 256,
    "lr": 1e-6,
    "dtype": "bfloat16",
}
# --small: a CPU rehearsal of the same code (gpu_check's SMALL model, float32)
SMALL_WORK = {"prompts": 8, "group": 4, "new_tokens": 16, "lr": 1e-6, "dtype": "float32"}


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu"


# rlcore with issue 51's paths: the static-cache decode loop (a CUDA graph per step on CUDA)
# and the log-probs from the hidden states (no full-vocabulary logits); the static loop
# prefills every row, so prompts are not shared there
# rlcore's paths before issue 51 (the 0.5B config now ships with FAST's first two on)
TODAY = ("rollout.hf.static_cache=false", "actor.model.use_fused_kernels=false")
FAST = (
    "rollout.hf.static_cache=true",
    "actor.model.use_fused_kernels=true",
    "actor.model.share_group_prompts=false",
)


def rlcore_config(
    model_dir: Path,
    out: Path,
    work: dict,
    device: str,
    micro: int,
    seed: int,
    extra: tuple[str, ...] = (),
):
    from rlcore.config import load_config

    overrides = [
        f"cluster.device={device}",
        "cluster.devices_per_node=1",
        f"runner.output_dir={out / 'rlcore_grpo'}",
        "runner.progress=false",
        "logger.tensorboard=false",
        "runner.checkpoint_every=0",
        f"runner.seed={seed}",
        f"actor.model.path={model_dir}",
        f"actor.model.dtype={work['dtype']}",
        "actor.training_backend=torch",
        "actor.model.gradient_checkpointing=false",
        "actor.model.share_group_prompts=true",
        "actor.shuffle=false",
        "actor.ppo_epochs=1",
        f"actor.ppo_mini_batch_size={work['prompts']}",  # one optimizer step per iteration
        f"actor.ppo_micro_batch_size={micro}",
        "actor.optim.name=adamw",
        f"actor.optim.lr={work['lr']}",
        "actor.optim.eps=1e-8",
        "actor.optim.weight_decay=0.0",
        "actor.optim.max_grad_norm=1.0",
        "actor.optim.warmup_steps=0",
        "actor.optim.decay=constant",
        "rollout.micro_batch_size=null",
        "rollout.temperature=1.0",
        "rollout.top_p=1.0",
        "rollout.top_k=0",
        "data.train_files=[]",
        "data.val_files=[]",
        "data.synthetic.num_train=8000",
        "data.synthetic.num_val=200",
        "data.chat_template=false",
        f"data.train_batch_size={work['prompts']}",
        f"data.max_response_length={work['new_tokens']}",
        "algorithm.adv_type=grpo",
        f"algorithm.group_size={work['group']}",
        "algorithm.loss_agg_func=token-mean",
        "algorithm.clip_ratio_low=0.2",
        "algorithm.clip_ratio_high=0.2",
        "algorithm.use_kl_in_reward=false",
        "algorithm.use_kl_loss=false",
    ]
    return load_config("reasoning/qwen2.5-0.5b_gsm8k_ppo", [*overrides, *extra])


def prompt_rows(config, model_dir: Path) -> list[dict[str, str]]:
    """rlcore's training prompts as the text it tokenises, with their answers (for TRL)."""
    from trl_prompts import prompt_texts

    from rlcore.data.sampler import load_prompt_set
    from rlcore.models.lm import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    prompts = load_prompt_set(config, tokenizer, train=True)
    texts = prompt_texts(config, tokenizer)
    if len(texts) != len(prompts.answers):
        raise RuntimeError(f"{len(texts)} prompt texts for {len(prompts.answers)} prompts")
    return [{"prompt": t, "answer": a} for t, a in zip(texts, prompts.answers, strict=True)]


def _row(system: str, seconds: list[float], warmup: int, generated: list[float], **extra):
    timed, counted = seconds[warmup:], generated[warmup:]
    if not timed:
        raise RuntimeError(f"{system}: {len(seconds)} iterations timed, {warmup} warm-up")
    median = statistics.median(timed)
    tokens = statistics.fmean(counted) if counted else None
    return {
        "system": system,
        "seconds_per_iteration_median": round(median, 4),
        "seconds_per_iteration_all": [round(s, 4) for s in seconds],
        "iterations_timed": len(timed),
        "warmup_dropped": warmup,
        "generated_tokens_per_iteration": None if tokens is None else round(tokens, 1),
        "generated_tokens_per_s": None if tokens is None else round(tokens / median, 1),
        **extra,
    }


def run_trl(model_dir: Path, rows, work, device, micro, iterations, warmup, seed) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl_baseline import correct

    completions = work["prompts"] * work["group"]
    if completions % micro:
        raise ValueError(f"--micro-batch {micro} does not divide {completions} completions")
    accumulation = completions // micro
    dtype = getattr(torch, work["dtype"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)

    def accuracy(prompts, completions, answer, **kwargs):
        return [correct(c, a) for c, a in zip(completions, answer, strict=True)]

    marks: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            _sync(device)
            marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            _sync(device)
            marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"] * completions)

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_grpo_"),
        report_to="none",
        seed=seed,
        use_cpu=device == "cpu",
        bf16=work["dtype"] == "bfloat16",
        fp16=False,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,  # one generation, one optimizer step
        num_generations=work["group"],
        max_completion_length=work["new_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_iterations=1,
        beta=0.0,
        loss_type="dapo",
        epsilon=0.2,
        learning_rate=work["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        max_steps=warmup + iterations,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        use_vllm=False,
        log_completions=False,
        dataloader_num_workers=0,
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=accuracy,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)  # its log lines would mix with the JSON lines
    try:
        trainer.train()
    finally:
        del trainer, policy
        _free(device)
    seconds = [b - a for a, b in itertools.pairwise(marks)]
    return _row("trl", seconds, warmup, lengths, trl=trl.__version__)


def run_rlcore(config, device: str, iterations: int, warmup: int) -> dict:
    import torch

    from rlcore.placement import plan_for_config
    from rlcore.runners.supervisor import build_runner

    rows = config.data.train_batch_size * config.algorithm.group_size
    # the runner sets the process's torch threads (runner.torch_threads): TRL's next run gets
    # the process's own number back
    threads = torch.get_num_threads()
    runner = build_runner(config, plan_for_config(config))
    seconds, generated, stages = [], [], []
    try:
        for iteration in range(1, warmup + iterations + 1):
            _sync(device)
            start = time.perf_counter()
            metrics = runner.iterate(iteration)
            _sync(device)
            seconds.append(time.perf_counter() - start)
            generated.append(metrics["response/length_mean"] * rows)
            stages.append({k[5:-2]: v for k, v in metrics.items() if k.startswith("time/")})
    finally:
        runner.close()
        del runner
        _free(device)
        torch.set_num_threads(threads)
    timed = stages[warmup:]
    medians = {k: round(statistics.median(s.get(k, 0.0) for s in timed), 4) for k in timed[-1]}
    return _row("rlcore", seconds, warmup, generated, seconds_per_stage_median=medians)


def compare(
    device: str,
    small: bool,
    out: Path,
    *,
    micro: int = 16,
    iterations: int = 2,
    warmup: int = 1,
    rounds: int = 1,
    seed: int = 1,
    emit=None,
    systems: tuple[str, ...] = ("trl", "rlcore", "rlcore_fast"),
) -> dict[str, Any]:
    """``rounds`` runs of each system, TRL first in each round; every run's row goes to
    ``emit`` (a callable) as it ends. The medians over the runs and rlcore's over TRL's."""
    work = SMALL_WORK if small else WORK
    import gpu_check

    model_dir, _ = gpu_check.qwen_dir(out, small)  # (shared with its qwen checks)
    configs = {
        "rlcore": rlcore_config(model_dir, out, work, device, micro, seed, TODAY),
        "rlcore_fast": rlcore_config(model_dir, out, work, device, micro, seed, FAST),
    }
    rows = prompt_rows(configs["rlcore"], model_dir)
    name = device_name(device)
    settings = {**work, "micro_batch": micro, "device": name, "model_dir": str(model_dir)}
    systems = tuple(s for s in ("trl", *configs) if s in systems)
    medians: dict[str, list[float]] = {system: [] for system in systems}
    runs: dict[str, list[dict]] = {system: [] for system in systems}
    for round_ in range(1, rounds + 1):
        for system in systems:
            if system == "trl":
                row = run_trl(model_dir, rows, work, device, micro, iterations, warmup, seed)
            else:
                row = run_rlcore(configs[system], device, iterations, warmup)
                row["system"] = system
            row = {**row, "round": round_, "device": name, "settings": settings}
            medians[system].append(row["seconds_per_iteration_median"])
            runs[system].append(row)
            if emit is not None:
                emit(row)
    seconds = {system: statistics.median(medians[system]) for system in systems}
    return {
        "device": name,
        **{f"{system}_seconds_per_iteration": round(seconds[system], 4) for system in systems},
        **{
            f"{system}_over_trl": round(seconds[system] / seconds["trl"], 4)
            for system in systems
            if system != "trl" and "trl" in seconds
        },
        "target_rlcore_over_trl": 0.5,
        "runs": runs,
    }


def check_trl_grpo(args, out: Path) -> dict[str, Any]:
    """gpu_check's check: one round, a warm-up iteration and ``args.iterations`` timed ones per
    system, micro-batches of ``args.micro_batch``; skipped where TRL is not importable."""
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as error:
        return {
            "ok": None,
            "skipped": f"TRL is not importable ({error}): benchmarks/gpu_wheels.sh trl "
            "(pandas, arrow) fetches it; benchmarks/gpu_env_probe.py says what the machine has",
        }
    result = compare(
        args.device,
        args.small,
        out,
        micro=args.micro_batch,
        iterations=args.iterations,
        systems=tuple(getattr(args, "trl_systems", None) or ("trl", "rlcore", "rlcore_fast")),
    )
    for system in result["runs"]:
        (row,) = result["runs"][system]
        result[system] = {k: v for k, v in row.items() if k not in ("settings", "system", "device")}
    settings = result["runs"]["trl"][0]["settings"]
    del result["runs"]
    return {"ok": True, **result, "settings": settings}


def main(args) -> None:
    """``trl_baseline.py --device DEVICE``: one JSON line per run, then the comparison."""
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible; --device cpu --small rehearses")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="trl_same_work_"))
    result = compare(
        args.device,
        args.small,
        out,
        micro=args.micro_batch,
        iterations=args.iterations,
        warmup=args.warmup,
        rounds=args.rounds,
        seed=args.seed,
        emit=lambda row: print(json.dumps(row), flush=True),
    )
    del result["runs"]
    print(json.dumps({"system": "comparison", **result}), flush=True)
