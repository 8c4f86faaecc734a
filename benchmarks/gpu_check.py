"""Check a GPU machine: the default jobs on CUDA, one PPO iteration of the 0.5B config under DDP
and FSDP2 with seconds, tokens/s, peak memory and MFU by stage, and ManiSkill's GPU simulator.
One JSON line per check (the first describes the device).

    python benchmarks/gpu_check.py [--only CHECK ...] [--iterations 2] [--micro-batch 16]

Checks (``--only`` picks some): ``cartpole`` and ``tiny_reasoning`` (the two default jobs with
``cluster.device`` on the GPU), ``moe`` (the tiny mixture-of-experts job, and routing replay's
effect in bf16, ``benchmarks/moe_replay.py``), ``ulysses`` (sequence parallelism's activation
memory on 2 ranks, ``benchmarks/ulysses_memory.py``; 2 GPUs on a GPU machine), ``qwen_ddp``,
``qwen_ddp_fused`` (with ``actor.model.use_fused_kernels``) and ``qwen_fsdp2``
(``reasoning/qwen2.5-0.5b_gsm8k_ppo`` with a randomly initialised Qwen2.5-0.5B-architecture model,
since no weights can be downloaded, on the synthetic arithmetic prompts; the torch backend with
bf16 weights, and FSDP2 on one rank with fp32 weights cast to bf16 for the passes),
``qwen_megatron`` (the same on the Megatron-core backend, bf16 weights, one rank; it needs CUDA
and megatron-core), ``maniskill``
(PickCube's GPU simulator, random actions, when mani-skill is importable) and ``maniskill_ppo``
(PPO iterations of ``embodied/maniskill_pickcube_ppo`` in its GPU recipe: 512 envs of the GPU
simulator handing their observation tensors to the policy on the same GPU), ``maniskill_rgb_ppo``
(the same with camera images, ``obs_mode: rgb``, into the CNN: 64 envs) and ``maniskill_lm_ppo``
(the same task's states acted on by an LM policy, ``actor.model.type: lm``, the tiny LM: 256
envs), the stepping stones to VLA policies on the GPU. A check that fails
prints its error and the next runs.

The qwen checks run ``--iterations`` iterations and report the last (the first pays for CUDA's
start-up); MFU is the training stages' model FLOPs (``6 N`` per token plus attention, N the
matmul parameters) over the stage's seconds and the GPU's dense bf16 peak (``PEAK_BF16``; null
for a GPU not listed). ``--device cpu --small`` runs the same code on a CPU with a small model (the
test suite does, so the script stays runnable where no GPU is).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import shutil
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

# Dense bf16 tensor-core peak, TFLOP/s, by a substring of torch.cuda.get_device_name().
PEAK_BF16 = {
    "H200": 989.0,
    "H100 SXM": 989.0,
    "H100 80GB HBM3": 989.0,
    "H100 NVL": 835.0,
    "H100 PCIe": 756.0,
    "H100": 756.0,
    "A100": 312.0,
    "L40S": 362.0,
    "A10G": 70.0,
    "L4": 121.0,
}

# Qwen2.5-0.5B(-Instruct)'s architecture (its config.json)
QWEN_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
SMALL = {
    **QWEN_05B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
}

CHECKS = (
    "cartpole",
    "tiny_reasoning",
    "moe",
    "ulysses",
    "generate",
    "generate_compiled",
    "decode_profile",
    "qwen_ddp",
    "qwen_ddp_static",
    "qwen_ddp_fused",
    "qwen_fast",
    "update_profile",
    "trl_grpo",
    "qwen_fsdp2",
    "qwen_megatron",
    "maniskill",
    "maniskill_ppo",
    "maniskill_rgb_ppo",
    "maniskill_lm_ppo",
)


# today's paths (the baseline; the 0.5B config ships with the new ones on): transformers'
# generate and log-probs from the whole logits
BASELINE = ("rollout.hf.static_cache=false", "actor.model.use_fused_kernels=false")
# the hf engine's static-cache decode loop, a CUDA graph per step (rollout.hf.*)
STATIC = ("rollout.hf.static_cache=true", "rollout.hf.cuda_graph=true")
# the log-probs from the last hidden states a chunk at a time (no full-vocabulary logits)
FUSED = ("actor.model.use_fused_kernels=true",)
FAST = (*STATIC, *FUSED)


def device_info(device: str) -> dict[str, Any]:
    if device == "cpu":
        return {"name": "cpu", "peak_bf16_tflops": None, "torch": torch.__version__}
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    return {
        "name": name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "peak_bf16_tflops": peak,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": torch.cuda.device_count(),
    }


def _common(out: Path, device: str) -> list[str]:
    return [
        f"cluster.device={device}",
        f"runner.output_dir={out}",
        "runner.progress=false",
        "logger.tensorboard=false",
        "runner.checkpoint_every=0",
    ]


# the default jobs ------------------------------------------------------------------------------


def check_cartpole(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config
    from rlcore.runners.embodied import EmbodiedRunner

    overrides = _common(out, args.device)
    if args.small:
        overrides.append("runner.total_env_steps=4096")
    config = load_config("embodied/cartpole_ppo", overrides)
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    keys = ("eval_return_mean", "env_steps", "wall_s", "sps", "train_sps", "time_to_threshold_s")
    return {"ok": True, **{k: summary[k] for k in keys}}


# a reasoning job's iterations and batch with --small
SMALL_REASONING = [
    "runner.total_iterations=2",
    "data.train_batch_size=16",
    "actor.ppo_mini_batch_size=8",
    "data.synthetic.num_val=16",  # (the before and after validations: the run's largest cost)
]


def check_tiny_reasoning(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config
    from rlcore.runners.supervisor import build_runner

    overrides = _common(out, args.device) + (SMALL_REASONING if args.small else [])
    config = load_config("reasoning/tiny_arith_ppo", overrides)
    summary = build_runner(config, plan_for_config(config)).run()
    keys = (
        "val_accuracy_before",
        "val_accuracy_after",
        "iterations",
        "wall_s",
        "tokens_per_s",
        "seconds_per_stage",
    )
    return {"ok": True, **{k: summary[k] for k in keys}}


def check_moe(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The tiny mixture-of-experts job (``reasoning/tiny_arith_moe_ppo``, routing replayed) on
    the device, then routing replay's effect in bf16 there (``benchmarks/moe_replay.py``): the
    routings the training pass would flip and the log-prob gap to the rollout's."""
    from moe_replay import measure

    from rlcore.config import load_config
    from rlcore.placement import plan_for_config
    from rlcore.prepare import prepare_models
    from rlcore.runners.supervisor import build_runner

    overrides = _common(out, args.device)
    if args.small:  # (and the tiny MoE's warm-up cut short: it is built for this check)
        overrides += [*SMALL_REASONING, "warmup.steps=5", "warmup.stop_at_accuracy=null"]
    config = load_config("reasoning/tiny_arith_moe_ppo", overrides)
    summary = build_runner(config, plan_for_config(config)).run()
    bf16 = ["actor.model.dtype=bfloat16", "actor.recompute_log_probs=true"]
    replay_config = load_config("reasoning/tiny_arith_moe_ppo", [*overrides, *bf16])
    rows = 16 if args.small else 128
    replay = measure(replay_config, prepare_models(replay_config), rows, 1, args.device)
    keys = ("val_accuracy_before", "val_accuracy_after", "iterations", "wall_s")
    return {"ok": True, **{k: summary[k] for k in keys}, "replay_bf16": replay}


def check_ulysses(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Ulysses sequence parallelism on 2 ranks (``benchmarks/ulysses_memory.py``): the
    activations a rank keeps for the backward pass against one rank's, and both losses. On a GPU
    machine it needs 2 GPUs (NCCL: one device a rank)."""
    from ulysses_memory import measure

    if args.device == "cuda" and torch.cuda.device_count() < 2:
        return {"ok": None, "skipped": "needs 2 GPUs (NCCL: one device a rank); this has 1"}
    length = 256 if args.small else 4096
    shape = {"rows": 2, "length": length, "layers": 4, "hidden": 128, "heads": 4, "vocab": 1024}
    row = measure(argparse.Namespace(ranks=2, device=args.device, **shape))
    same = abs(row["loss_split"] - row["loss_alone"]) <= 1e-5 * abs(row["loss_alone"])
    return {"ok": same, **row}


# one PPO iteration of the 0.5B config --------------------------------------------------------


def random_qwen(where: Path, arch: dict[str, Any], tokenizer_dir: Path) -> Path:
    """A Qwen2 model folder of ``arch`` with random weights (bf16 on disk) and the tiny model's
    tokenizer (its ids are a subset of the vocabulary: the model computes at full size)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlcore.models.lm import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    config = Qwen2Config(
        **arch,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(where)
    tokenizer.save_pretrained(where)
    return where


def _tiny_model_dir(out: Path) -> Path:
    """A folder with the default reasoning job's tokenizer (built, or from its cache). The
    tokenizer is trained on the task's text before any warm-up, so the tiny model is built
    without one: the same tokenizer in a second instead of the warm-up's half a minute."""
    from rlcore.config import load_config
    from rlcore.prepare import prepare_models

    config = load_config(
        "reasoning/tiny_arith_ppo",
        [f"runner.output_dir={out}", "warmup.steps=0", "warmup.stop_at_accuracy=null"],
    )
    return prepare_models(config).actor


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters that take part in a matmul per token: all but the input embedding table, plus
    the output projection when it is tied to that table (it computes all the same)."""
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    tied = getattr(model.config, "tie_word_embeddings", False) and hasattr(model, "lm_head")
    return total - embedding.numel() + (embedding.numel() if tied else 0)


def counted_params(model_dir: Path) -> tuple[int, int]:
    """``matmul_params`` of the actor and of the critic built from ``model_dir`` (on the meta
    device: nothing allocated)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        actor = AutoModelForCausalLM.from_config(config)
        config.num_labels = 1  # a value head, as rlcore.models.lm.load_value_model builds it
        critic = AutoModelForTokenClassification.from_config(config)
    return matmul_params(actor), matmul_params(critic)


def qwen_dir(out: Path, small: bool) -> tuple[Path, dict[str, Any]]:
    """The random Qwen2.5-0.5B-architecture model folder ``out/qwen`` (SMALL with ``small``),
    built once per run and shared by every check (trl_same_work's too), and its
    architecture."""
    arch = SMALL if small else QWEN_05B
    model_dir = out / "qwen"
    if not model_dir.is_dir():
        random_qwen(model_dir, arch, _tiny_model_dir(out))
    return model_dir, arch


# generation: transformers' generate against the static-cache loop -------------------------------


def _rollout_config(
    args: argparse.Namespace, out: Path, model_dir: Path, new: int, *extra: str
) -> Any:
    """The 0.5B config for the rollout alone: the random model, ``new`` tokens a response, bf16
    on a GPU (float32 on a CPU), ``extra`` overrides."""
    from rlcore.config import load_config

    return load_config(
        "reasoning/qwen2.5-0.5b_gsm8k_ppo",
        [
            *_common(out, args.device),
            f"actor.model.path={model_dir}",
            "data.train_files=[]",
            "data.val_files=[]",
            "data.chat_template=false",
            f"data.max_response_length={new}",
            "actor.model.dtype=" + ("float32" if args.device == "cpu" else "bfloat16"),
            *extra,
        ],
    )


GENERATE_VARIANTS = {
    "generate": {"rollout.hf.static_cache": False},
    "static": {"rollout.hf.static_cache": True, "rollout.hf.cuda_graph": False},
    "graph": {"rollout.hf.static_cache": True, "rollout.hf.cuda_graph": True},
}
COMPILED_VARIANTS = {
    "generate": {"rollout.hf.static_cache": False},
    "graph": {"rollout.hf.static_cache": True},
    "compiled": {"rollout.hf.static_cache": True, "rollout.hf.compile": True},
}


def check_generate(
    args: argparse.Namespace, out: Path, variants: dict[str, dict] = GENERATE_VARIANTS
) -> dict[str, Any]:
    """The ``hf`` engine on the issue's workload (256 prompts x 256 sampled tokens with their
    log-probs, bf16): transformers' generate (today's path) and the static-cache loop's
    ``variants`` (uncaptured, a CUDA graph per decode step, compiled), alternated twice; then
    how close the graph path's greedy tokens are to generate's and its recorded log-probs to a
    forward pass."""
    from tensordict import TensorDict

    from rlcore.config import replace_keys
    from rlcore.data.sequences import left_pad
    from rlcore.workers.reasoning.rollout import HFEngine

    model_dir, _ = qwen_dir(out, args.small)
    rows, new = (8, 8) if args.small else (256, 256)
    base = _rollout_config(args, out, model_dir, new)
    device = torch.device(args.device)
    variants = dict(variants)
    engines: dict[str, Any] = {}
    for name, keys in variants.items():
        model = engines["generate"].model if engines else None
        engines[name] = HFEngine(replace_keys(base, keys), model_dir, device, model)
    gen = torch.Generator().manual_seed(0)
    vocab = len(engines["generate"].tokenizer)
    prompts = [
        torch.randint(10, vocab, (int(n),), generator=gen).tolist()
        for n in torch.randint(40, 81, (rows,), generator=gen)
    ]
    ids, mask = left_pad(prompts, engines["generate"].tokenizer.pad_token_id)
    batch = TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[rows])

    def timed(name: str, greedy: bool = False, part: TensorDict = batch) -> tuple[float, Any]:
        _sync(args.device)
        start = time.perf_counter()
        result = engines[name].generate(part, greedy=greedy, log_probs=not greedy)
        _sync(args.device)
        return time.perf_counter() - start, result

    first, errors = {}, {}
    for name in list(variants):  # start-up (the graph's capture) paid here
        try:
            first[name] = round(timed(name)[0], 3)
        except Exception as error:  # one path failing leaves the others measured
            errors[name] = f"{type(error).__name__}: {error}"[:600]
            del variants[name]
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    tokens = {}
    for _ in range(2):
        for name in variants:
            s, result = timed(name)
            seconds[name].append(round(s, 3))
            tokens[name] = int(result["response_mask"].sum())
    best = {name: min(v) for name, v in seconds.items()}
    row = {
        "ok": not errors,
        "rows": rows,
        "new_tokens": new,
        "first_call_s": first,
        "seconds": seconds,
        "tokens_per_s": {n: round(tokens[n] / best[n], 1) for n in variants},
        "speedup_vs_generate": {n: round(best["generate"] / best[n], 2) for n in variants},
        "graphs_captured": engines["graph"].decoder.captures,
        "errors": errors,
    }
    if "graph" in variants:
        row.update(_agreement(engines, batch[: min(rows, 64)], timed))
    return row


def check_decode_profile(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Where a decode step's time goes on the static loop with graphs: one call of 256 rows x
    64 sampled tokens (after a warm call that captures) under torch's profiler, the kernels and
    the host operations that take the most time, and the wall time a step."""
    from tensordict import TensorDict
    from torch.profiler import ProfilerActivity, profile

    from rlcore.workers.reasoning.rollout import HFEngine

    model_dir, _ = qwen_dir(out, args.small)
    rows, new = (8, 8) if args.small else (256, 64)
    config = _rollout_config(args, out, model_dir, new, "rollout.hf.static_cache=true")
    engine = HFEngine(config, model_dir, torch.device(args.device))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, len(engine.tokenizer), (rows, 60), generator=gen)
    batch = TensorDict({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, [rows])
    engine.generate(batch, greedy=False, log_probs=True)
    _sync(args.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        engine.generate(batch, greedy=False, log_probs=True)
        _sync(args.device)
    wall = time.perf_counter() - start
    events = prof.key_averages()

    def top(attribute: str, n: int = 14) -> list[list[Any]]:
        ranked = sorted(events, key=lambda e: getattr(e, attribute, 0) or 0, reverse=True)[:n]
        return [
            [e.key[:70], e.count, round((getattr(e, attribute, 0) or 0) / 1e3, 2)] for e in ranked
        ]

    return {
        "ok": True,
        "rows": rows,
        "new_tokens": new,
        "wall_s": round(wall, 3),
        "ms_per_step": round(wall / new * 1e3, 2),
        "top_device_ms": top("self_device_time_total") if args.device == "cuda" else None,
        "top_host_ms": top("self_cpu_time_total"),
    }


def _agreement(engines: dict[str, Any], part: Any, timed: Any) -> dict[str, Any]:
    """Greedy tokens of the graph path against generate's (bf16: sums in another order may flip
    a near tie, after which the rows differ), and its sampled tokens' recorded log-probs
    against a forward pass over prompt and response."""
    from rlcore.columns import ATTENTION_MASK, INPUT_IDS, POSITION_IDS, RESPONSES

    _, a = timed("generate", True, part)
    _, b = timed("graph", True, part)
    same = a[RESPONSES] == b[RESPONSES]
    first_diff = (~same).float().argmax(-1).where(~same.all(-1), torch.tensor(same.shape[1]))
    model, device = engines["graph"].model, engines["graph"].device
    errors = {}
    for name in ("generate", "graph"):  # generate's own bf16 error: the yardstick for the graph's
        _, sampled = timed(name, False, part)
        width = sampled[RESPONSES].shape[1]
        with torch.no_grad():
            logits = model(
                input_ids=sampled[INPUT_IDS].to(device),
                attention_mask=sampled[ATTENTION_MASK].to(device),
                position_ids=sampled[POSITION_IDS].to(device),
            ).logits[:, -width - 1 : -1]
            logp = torch.log_softmax(logits.float(), -1)
            logp = logp.gather(-1, sampled[RESPONSES].to(device)[..., None])[..., 0].cpu()
        valid = sampled["response_mask"].bool()
        error = (logp - sampled["rollout_log_probs"]).abs()[valid]
        errors[name] = {"max": round(float(error.max()), 4), "mean": round(float(error.mean()), 5)}
    return {
        "greedy_rows_identical": round(float(same.all(-1).float().mean()), 3),
        "greedy_tokens_identical": round(float(same.float().mean()), 4),
        "greedy_first_difference_mean": round(float(first_diff.float().mean()), 1),
        "log_prob_error_vs_forward": errors,
    }


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def stage_seconds(metrics: dict[str, float]) -> dict[str, float]:
    """An iteration's seconds by stage, from its ``time/<stage>_s`` metrics (``Stopwatch``)."""
    return {k[len("time/") : -len("_s")]: v for k, v in metrics.items() if k.startswith("time/")}


def check_qwen(
    args: argparse.Namespace, out: Path, backend: str, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config
    from rlcore.runners.supervisor import build_runner

    if backend == "megatron" and args.device != "cuda":
        return {"ok": None, "skipped": "Megatron-core's model needs CUDA"}
    trainer = backend if backend in ("fsdp2", "megatron") else "torch"
    model_dir, arch = qwen_dir(out, args.small)
    overrides = [
        *_common(out, args.device),
        f"actor.model.path={model_dir}",
        "data.train_files=[]",
        "data.val_files=[]",
        "data.synthetic.num_train=8000",
        "data.synthetic.num_val=200",
        "data.chat_template=false",
        f"actor.ppo_micro_batch_size={args.micro_batch}",
        f"critic.ppo_micro_batch_size={args.micro_batch}",
        "rollout.micro_batch_size=null",
        f"actor.training_backend={trainer}",
        f"critic.training_backend={trainer}",
    ]
    if backend == "fsdp2":  # fp32 weights the optimiser updates, bf16 passes (verl's recipe)
        overrides += [
            "actor.model.dtype=float32",
            "actor.fsdp.param_dtype=bfloat16",
            "critic.fsdp.param_dtype=bfloat16",
        ]
    else:
        overrides += ["actor.model.dtype=bfloat16"]
    if args.device == "cpu":  # one process (the CPU's cores are not devices to spread over)
        overrides.append("cluster.devices_per_node=1")
    if args.small:
        overrides += [
            "data.train_batch_size=8",
            "actor.ppo_mini_batch_size=4",
            "data.max_response_length=16",
            "data.max_prompt_length=128",
        ]
    config = load_config("reasoning/qwen2.5-0.5b_gsm8k_ppo", [*overrides, *extra])
    n_actor, n_critic = counted_params(model_dir)
    runner = build_runner(config, plan_for_config(config))
    try:
        seconds = []
        for iteration in range(1, args.iterations + 1):
            if args.device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            metrics = runner.iterate(iteration)
            if args.device == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            # each iteration as it ends (a deadline that cuts a compiling run keeps these)
            timed = {k: round(v, 3) for k, v in stage_seconds(metrics).items()}
            row = {"iteration": iteration, "seconds": round(seconds[-1], 2), "stages": timed}
            print(json.dumps({"qwen_iteration": {"extra": list(extra), **row}}), file=sys.stderr)
    finally:
        runner.close()
    stages = stage_seconds(metrics)
    stages.pop("iteration", None)
    total_tokens = metrics["perf/tokens_per_s"] * sum(stages.values())  # prompt + response
    rows = config.data.train_batch_size * config.algorithm.group_size
    generated = metrics["response/length_mean"] * rows
    seq_len = total_tokens / rows
    peak = args.info.get("peak_bf16_tflops")

    def train_flops(n: int) -> float:  # forward and backward, per PaLM's appendix B
        attention = 12 * arch["num_hidden_layers"] * arch["hidden_size"] * seq_len
        return (6 * n + attention) * total_tokens * config.actor.ppo_epochs

    per_stage = {}
    for stage, s in stages.items():
        tokens = generated if stage == "generate" else total_tokens
        entry = {"seconds": round(s, 3), "tokens_per_s": round(tokens / max(s, 1e-9), 1)}
        flops = {"actor_update": train_flops(n_actor), "critic_update": train_flops(n_critic)}
        if stage in flops:
            achieved = flops[stage] / max(s, 1e-9) / 1e12
            entry["tflops"] = round(achieved, 1)
            entry["mfu"] = None if peak is None else round(achieved / peak, 4)
        per_stage[stage] = entry
    memory = round(torch.cuda.max_memory_allocated() / 2**30, 2) if args.device == "cuda" else None
    return {
        "ok": True,
        "backend": backend,
        "extra": list(extra),
        "params": n_actor,
        "arch": arch["hidden_size"],
        "prompts": config.data.train_batch_size,
        "tokens": round(total_tokens),
        "generated_tokens": round(generated),
        "micro_batch": args.micro_batch,
        "iteration_s": [round(s, 2) for s in seconds],
        # the share of the update's computed positions that are padding (not in the FLOP count)
        "padding_share": metrics.get("actor/padding_share"),
        "stages": per_stage,
        "peak_memory_gib": memory,
    }


# qwen_fast's variants: the fused log-probs' chunk (positions a chunk; the backward holds a few
# float32 [chunk, vocabulary] tensors at once)
# and the decoder layers compiled for every pass of actor, reference and critic (the first
# iteration compiles; the second is the one reported)
FAST_VARIANTS = {
    "chunk2048": (),
    "chunk512": ("actor.entropy_from_logits_chunk_size=512",),
    "compiled": ("actor.use_torch_compile=true", "critic.use_torch_compile=true"),
}


def check_qwen_fast(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """``qwen_ddp`` with every new path on (``FAST``) at each of ``--fast-micro-batches``,
    in each of ``FAST_VARIANTS``: the micro-batch that gives the best update, and the peak
    memory at each; one running out of memory leaves the others measured."""
    runs = []
    chosen = [(n, FAST_VARIANTS[n]) for n in args.fast_variants]
    for size, (name, extra) in itertools.product(args.fast_micro_batches, chosen):
        # (compiled layers: the first two iterations compile each pass's variants, the shapes
        # turning dynamic in the second; measured on CPU: 13.2, 12.6, then 0.13 s)
        iterations = max(args.iterations, 3) if name == "compiled" else args.iterations
        sized = argparse.Namespace(**{**vars(args), "micro_batch": size, "iterations": iterations})
        try:
            runs.append({"variant": name, **check_qwen(sized, out, "ddp", (*FAST, *extra))})
        except Exception as error:
            runs.append(
                {
                    "ok": False,
                    "variant": name,
                    "micro_batch": size,
                    "error": f"{type(error).__name__}: {str(error)[:300]}",
                }
            )
        print(json.dumps({"qwen_fast_run": runs[-1]}), file=sys.stderr, flush=True)  # kept if cut
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return {"ok": all(r["ok"] for r in runs), "runs": runs}


# kernel families by name, the first that matches (cuBLAS' and CUTLASS' matmuls, the attention
# kernels, the optimiser); cuDNN's attention kernels name their wgmma tiles, so on an H100/H200
# they count as matmuls (docs/backends.md's "matmuls and attention")
KERNEL_FAMILIES = (
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "wgmma", "aten::mm", "aten::addmm")),
    ("attention", ("fmha", "flash", "attention", "efficient")),
    ("optimizer", ("multi_tensor", "adam")),
    ("copy", ("copy", "memcpy", "memset", "fill", "cat")),
)


def _family(name: str) -> str:
    low = name.lower()
    return next((f for f, keys in KERNEL_FAMILIES if any(k in low for k in keys)), "other")


def _kernel_shares(prof: Any, wall: float, device: str) -> dict[str, Any]:
    """Where a profiled stage's time went: on CUDA the kernels' own device time by family and
    the busiest kernels, and how much of the stage's wall the GPU was busy at all (the rest is
    launch and Python time); on a CPU the operators' own CPU time."""
    from torch.autograd import DeviceType

    cuda = device == "cuda"
    rows = [
        (e.key, (e.self_device_time_total if cuda else e.self_cpu_time_total) / 1e6, e.count)
        for e in prof.key_averages()
        if (e.device_type == DeviceType.CUDA) == cuda
    ]
    rows = [r for r in rows if r[1] > 0]
    busy = sum(r[1] for r in rows)
    families: dict[str, float] = {}
    for name, seconds, _ in rows:
        families[_family(name)] = families.get(_family(name), 0.0) + seconds
    top = sorted(rows, key=lambda r: -r[1])[:12]
    return {
        "wall_s": round(wall, 3),
        "busy_s": round(busy, 3),
        "busy_share": round(busy / max(wall, 1e-9), 3),
        "families_s": {f: round(v, 3) for f, v in sorted(families.items(), key=lambda kv: -kv[1])},
        "top": [{"name": n[:90], "s": round(v, 4), "calls": c} for n, v, c in top],
    }


def check_update_profile(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Where the updates' time goes (the 0.5B config with the new paths, layers not compiled):
    the second iteration's actor and critic updates under torch's profiler, the third
    iteration's (not profiled) seconds and MFU beside them."""
    from contextlib import contextmanager

    from torch.profiler import ProfilerActivity, profile

    from rlcore.runners import progress

    seen = {"actor_update": 0, "critic_update": 0}
    profiles: dict[str, Any] = {}
    original = progress.Stopwatch.__call__
    activities = [ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(ProfilerActivity.CUDA)

    @contextmanager
    def watched(self: Any, stage: str) -> Any:
        seen[stage] = seen.get(stage, 0) + 1
        if (
            stage not in profiles
            and stage in ("actor_update", "critic_update")
            and seen[stage] == 2
        ):
            _sync(args.device)
            start = time.perf_counter()
            with profile(activities=activities) as prof, original(self, stage):
                yield
                _sync(args.device)
            profiles[stage] = _kernel_shares(prof, time.perf_counter() - start, args.device)
        else:
            with original(self, stage):
                yield

    progress.Stopwatch.__call__ = watched
    try:
        sized = argparse.Namespace(**{**vars(args), "iterations": max(args.iterations, 3)})
        row = check_qwen(sized, out, "ddp", FAST)
    finally:
        progress.Stopwatch.__call__ = original
    updates = {s: row["stages"][s] for s in ("actor_update", "critic_update")}
    return {
        "ok": len(profiles) == 2,
        "micro_batch": row["micro_batch"],
        "padding_share": row["padding_share"],
        "unprofiled": updates,
        "profiles": profiles,
    }


def check_trl_grpo(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """TRL 1.16's GRPOTrainer beside rlcore's GRPO on the same work (benchmarks/trl_same_work.py;
    skipped where TRL is not importable)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trl_same_work import check_trl_grpo as compare

    return compare(args, out)


# ManiSkill's GPU simulator ---------------------------------------------------------------------


def physx_gpu_missing() -> str | None:
    """Why SAPIEN's GPU simulator cannot start here, or None. SAPIEN downloads its PhysX GPU
    library from GitHub on first use, with no deadline: on a machine that cannot reach GitHub
    that would hang the check, so a missing library skips it there."""
    import sapien

    version = sapien.physx.version()
    library = Path.home() / ".sapien" / "physx" / version / "libPhysXGpu_64.so"
    if library.is_file():
        return None
    try:  # where GitHub answers, SAPIEN fetches it
        socket.create_connection(("github.com", 443), timeout=5).close()
        return None
    except OSError:
        pass
    return (
        f"SAPIEN's PhysX GPU library is not at {library} (SAPIEN downloads it from GitHub on "
        "first use: bring linux-so.zip of github.com/sapien-sim/physx-precompiled/releases/"
        f"{version} and unzip it there)"
    )


def check_maniskill(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    if args.device != "cuda":  # (before importing mani-skill and SAPIEN: seconds of CPU)
        return {"ok": None, "skipped": "the GPU simulator needs CUDA"}
    try:
        import gymnasium as gym
        import mani_skill.envs  # noqa: F401  (registers PickCube-v1)
    except ImportError as error:
        return {"ok": None, "skipped": f"mani-skill is not importable: {error}"}
    if missing := physx_gpu_missing():
        return {"ok": None, "skipped": missing}
    num_envs = 1024
    env = gym.make("PickCube-v1", num_envs=num_envs, sim_backend="gpu", obs_mode="state")
    try:
        env.reset(seed=0)
        actions = torch.zeros((num_envs, *env.action_space.shape[1:]), device="cuda")
        for _ in range(10):  # warm-up
            env.step(actions)
        torch.cuda.synchronize()
        steps, start = 200, time.perf_counter()
        for _ in range(steps):
            obs, *_ = env.step(actions.uniform_(-1, 1))
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    finally:
        env.close()
    return {
        "ok": True,
        "num_envs": num_envs,
        "env_steps_per_s": round(steps * num_envs / wall),
        "obs_on": str(obs.device),
    }


def check_maniskill_ppo(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The config's GPU recipe: 512 envs x 50 steps, mini-batches of 800."""
    return _maniskill_ppo(args, out, 512, 50, 800, [])


def _maniskill_ppo(
    args: argparse.Namespace, out: Path, num_envs: int, steps: int, mini: int, extra: list[str]
) -> dict[str, Any]:
    """PPO iterations of ``embodied/maniskill_pickcube_ppo`` on the GPU simulator, ``extra``
    overrides on top of its GPU recipe."""
    if args.device != "cuda":
        return {"ok": None, "skipped": "the GPU simulator needs CUDA"}
    try:
        import mani_skill.envs  # noqa: F401
    except ImportError as error:
        return {"ok": None, "skipped": f"mani-skill is not importable: {error}"}
    if missing := physx_gpu_missing():
        return {"ok": None, "skipped": missing}
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config
    from rlcore.runners.embodied import EmbodiedRunner

    config = load_config(
        "embodied/maniskill_pickcube_ppo",
        [
            *_common(out, args.device),
            "env.vector_mode=native",
            f"env.num_envs={num_envs}",
            f"runner.rollout_steps={steps}",
            "actor.ppo_epochs=4",
            f"actor.ppo_mini_batch_size={mini}",
            f"runner.total_env_steps={(args.iterations + 1) * num_envs * steps}",
            "runner.eval_every=0",
            "runner.eval_episodes=4",
            *extra,
        ],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    keys = ("env_steps", "iterations", "wall_s", "sps", "train_sps", "seconds_per_stage")
    return {"ok": True, "num_envs": num_envs, **{k: summary[k] for k in keys}}


def check_maniskill_rgb_ppo(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Camera images (obs_mode rgb, 128x128) into the Nature CNN, on the GPU simulator."""
    return _maniskill_ppo(args, out, 64, 50, 400, ["env.kwargs={obs_mode:rgb}"])


def check_maniskill_lm_ppo(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """An LM policy (the tiny LM: one state token in, 8 binned action tokens out, a value head)
    acting on PickCube's states on the GPU simulator."""
    lm = [
        "actor.model.type=lm",
        "actor.model.hidden_sizes=[64,64]",  # (the built-in's keys back at their defaults)
        "actor.model.activation=tanh",
        "actor.model.shared_backbone=true",
        "actor.model.log_std_init=0.0",
        "actor.model.lm.action_bins=32",
    ]
    return _maniskill_ppo(args, out, 256, 50, 800, lm)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=CHECKS, default=list(CHECKS))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=16,
        help="responses per forward/backward of actor and critic",
    )
    parser.add_argument(
        "--fast-micro-batches",
        type=int,
        nargs="+",
        default=[64],
        help="qwen_fast: the micro-batches to run it at (at most the mini-batch's rows)",
    )
    parser.add_argument(
        "--fast-variants",
        nargs="+",
        choices=tuple(FAST_VARIANTS),
        default=list(FAST_VARIANTS),
        help="qwen_fast: the variants to run, in this order",
    )
    parser.add_argument(
        "--trl-systems",
        nargs="+",
        choices=("trl", "rlcore", "rlcore_fast"),
        help="trl_grpo: the systems to run (default all three)",
    )
    parser.add_argument("--small", action="store_true", help="a small model and batch")
    parser.add_argument("--out", help="working folder (default: a temporary one)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"check": "device", "ok": False, "error": "no CUDA device visible"}))
        return 1
    args.info = device_info(args.device)
    print(json.dumps({"check": "device", "ok": True, **args.info}), flush=True)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    runs = {
        "cartpole": check_cartpole,
        "tiny_reasoning": check_tiny_reasoning,
        "moe": check_moe,
        "ulysses": check_ulysses,
        "generate": check_generate,
        "generate_compiled": lambda a, o: check_generate(a, o, COMPILED_VARIANTS),
        "decode_profile": check_decode_profile,
        "qwen_ddp": lambda a, o: check_qwen(a, o, "ddp", BASELINE),
        "qwen_ddp_static": lambda a, o: check_qwen(a, o, "ddp", (*BASELINE, *STATIC)),
        "qwen_ddp_fused": lambda a, o: check_qwen(a, o, "ddp", (*BASELINE, *FUSED)),
        "qwen_fast": check_qwen_fast,
        "update_profile": check_update_profile,
        "trl_grpo": check_trl_grpo,
        "qwen_fsdp2": lambda a, o: check_qwen(a, o, "fsdp2", BASELINE),
        "qwen_megatron": lambda a, o: check_qwen(a, o, "megatron", BASELINE),
        "maniskill": check_maniskill,
        "maniskill_ppo": check_maniskill_ppo,
        "maniskill_rgb_ppo": check_maniskill_rgb_ppo,
        "maniskill_lm_ppo": check_maniskill_lm_ppo,
    }
    failed = 0
    try:
        for name in args.only:
            start = time.perf_counter()
            try:
                row = runs[name](args, out)
            except Exception as error:  # the next check still runs
                trace = traceback.format_exc(limit=-4).splitlines()[-6:]
                row = {"ok": False, "error": f"{type(error).__name__}: {error}", "trace": trace}
            failed += row.get("ok") is False
            gc.collect()  # the check's models and caches go before the next one starts
            if args.device == "cuda":
                torch.cuda.empty_cache()
            row["check_s"] = round(time.perf_counter() - start, 1)
            print(json.dumps({"check": name, "device": args.info["name"], **row}), flush=True)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
