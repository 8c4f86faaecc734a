"""verl's own example scripts (verl_examples/, unchanged) run as verl users run them:
``bash run_x.sh key=value ...``, the script's ``python3 -m verl.trainer.main_ppo`` answered by
rlcore (verl_shim/), ``$HOME`` holding tiny models and verl-layout data under the scripts' own
paths (hub ids in a Hugging Face cache). The overrides appended through the script's ``$@`` are
what a CPU and tiny models need (sizes, the hf engine, one device); each script dry-runs clean
with them, each script's keys are mapped (its lines said), and the dry run and the run agree."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SCRIPTS = HERE / "verl_examples"

# hub ids the scripts name, each the tiny model in the home's Hugging Face cache
HUB_IDS = ("Qwen/Qwen2-7B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "google/gemma-2-2b-it")

# appended by every run through the script's $@: one CPU, the hf engine, tiny sizes
ON_A_CPU = [
    "trainer.n_gpus_per_node=1",
    "trainer.device=cpu",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "~actor_rollout_ref.rollout.gpu_memory_utilization",
    "trainer.logger=['console']",
    "trainer.total_training_steps=2",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "data.max_prompt_length=256",
    "data.max_response_length=8",
]


def _verl_rows(rows, source, split):
    return [
        {
            "data_source": source,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": i},
        }
        for i, (question, answer) in enumerate(rows)
    ]


def _write_data(home: Path) -> None:
    """verl-layout GSM8K and MATH files where the scripts read them ($HOME/data/...)."""
    import datasets

    sums = [(f"{a}+{b}? Answer after ####.", str(a + b)) for a in range(12) for b in range(12)]
    for name, source in (("gsm8k", "openai/gsm8k"), ("math", "DigitalLearningGmbH/MATH-lighteval")):
        folder = home / "data" / name
        folder.mkdir(parents=True)
        for split, rows in (("train", sums[:128]), ("test", sums[128:])):
            table = datasets.Dataset.from_list(_verl_rows(rows, source, split))
            table.to_parquet(str(folder / f"{split}.parquet"))


def _cache_as(hub: Path, hub_id: str, model: Path) -> None:
    """``model`` in a Hugging Face cache as ``hub_id`` (huggingface_hub's layout)."""
    repo = hub / f"models--{hub_id.replace('/', '--')}"
    commit = hashlib.sha1(hub_id.encode()).hexdigest()
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(model, repo / "snapshots" / commit)


@pytest.fixture(scope="module")
def verl_home(tiny_lm, tmp_path_factory):
    """``(env, home)``: a $HOME with the scripts' data and model folders, a Hugging Face cache
    with their hub ids, ``python3`` this interpreter with verl_shim/ on its path."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from rlcore.models.lm import load_tokenizer

    _, dirs = tiny_lm
    root = tmp_path_factory.mktemp("verl_home")
    home, hub, bin_dir = root / "home", root / "hub", root / "bin"
    _write_data(home)
    shutil.copytree(dirs.actor, home / "models" / "Qwen2-7B-Instruct")
    torch.manual_seed(0)
    reward_model = AutoModelForSequenceClassification.from_pretrained(str(dirs.actor), num_labels=1)
    reward_model.save_pretrained(home / "models" / "FsfairX-LLaMA3-RM-v0.1")
    load_tokenizer(dirs.actor).save_pretrained(home / "models" / "FsfairX-LLaMA3-RM-v0.1")
    for hub_id in HUB_IDS:
        _cache_as(hub, hub_id, dirs.actor)
    bin_dir.mkdir()
    # (a script, not a link: a venv's python finds its packages by the path it is started as)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    env = {
        "HOME": str(home),
        "PATH": f"{bin_dir}:/usr/bin:/bin",  # (no huggingface-cli: the rm script's downloads fail)
        "PYTHONPATH": f"{REPO}:{HERE / 'verl_shim'}",
        "HF_HUB_CACHE": str(hub),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    }
    return env, home


def script_argv(env, name, *appended):
    """What ``bash SCRIPT appended...`` gives ``python3 -m verl.trainer.main_ppo`` (its argv
    after the module), recorded by a ``python3`` that writes it out: the script's own lines as
    bash expands them ($HOME, quotes, ``$@``)."""
    bin_dir = Path(env["PATH"].split(":")[0]).with_name("recorder")
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text('#!/bin/sh\nshift 2\nprintf "%s\\0" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    done = subprocess.run(
        ["bash", str(SCRIPTS / name), *appended],
        env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split("\0")[:-1]


@pytest.fixture
def hub_cache(verl_home, monkeypatch):
    """This process reads hub ids from the home's cache, offline (as the scripts' runs do)."""
    from huggingface_hub import constants

    env, _ = verl_home
    monkeypatch.setattr(constants, "HF_HUB_CACHE", env["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return verl_home


# per script: what a CPU and tiny models need beyond ON_A_CPU, and values the config must hold,
# read off the script by hand
CASES = {
    "run_gemma.sh": (
        [],
        {
            "algorithm.adv_type": "gae",
            "actor.ppo_micro_batch_size": 4,
            "critic.ppo_micro_batch_size": 4,
            "critic.optim.lr": 1e-5,
            "logger.project": "verl_example",
        },
    ),
    "run_qwen2-7b_rm.sh": (
        # verl's warm-up as a share of the run has no counterpart (named in the refusal):
        # deleted through $@, as a verl user would
        [
            "~actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
            "~critic.optim.lr_warmup_steps_ratio",
        ],
        {"reward.kind": "model", "reward.model.combine": "rule_only_for_accuracy"},
    ),
    "run_qwen2-7b.sh": (
        [],
        {
            "algorithm.adv_type": "grpo",
            "algorithm.group_size": 5,
            "algorithm.kl_loss_coef": 0.001,
            "algorithm.kl_loss_type": "low_var_kl",
            "actor.fsdp.offload": False,  # (the reference's True gives way)
        },
    ),
    "run_qwen2_5-3b_gsm8k_grpo_lora.sh": (
        [],
        {"actor.model.lora.rank": 64, "actor.model.lora.alpha": 32.0, "data.shuffle": False},
    ),
    "run_qwen2-7b_seq_balance.sh": (
        [],
        {
            "actor.max_tokens_per_micro_batch": 24000,
            "actor.ppo_micro_batch_size": None,  # (verl ignores it under dynamic batching)
            "rollout.backend": "hf",  # (the script's sglang, replaced through $@)
        },
    ),
}


def value_at(config, path):
    for part in path.split("."):
        config = getattr(config, part)
    return config


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_verl_example_dry_runs_clean_with_its_keys_mapped(hub_cache, name, tmp_path):
    from rlcore.cli import run_entry_point
    from rlcore.config import load_config

    env, home = hub_cache
    extra, expected = CASES[name]
    argv = script_argv(env, name, *ON_A_CPU, *extra, f"trainer.default_local_dir={tmp_path}")
    assert argv[0].startswith("algorithm.adv_estimator=")  # (the script's own first line)
    assert run_entry_point("reasoning/tiny_arith_ppo", [*argv, "runner.dry_run=true"]) == 0
    config = load_config("reasoning/tiny_arith_ppo", argv)
    for path, value in expected.items():
        assert value_at(config, path) == value, path
    # the tiny sizes appended through $@ replaced the script's (the last value wins)
    assert (config.data.train_batch_size, config.runner.total_iterations) == (8, 2)
    assert config.data.train_files[0] == str(home / "data" / "gsm8k" / "train.parquet")


def test_the_scripts_own_values_are_refused_only_for_what_rlcore_lacks(hub_cache):
    """Without the overrides, one pass names every key rlcore lacks a counterpart for: vLLM,
    verl's warm-up ratio, a length in epochs."""
    from rlcore.config import ConfigError, load_config

    env, _ = hub_cache
    with pytest.raises(ConfigError) as refused:
        load_config("reasoning/tiny_arith_ppo", script_argv(env, "run_qwen2-7b_rm.sh"))
    named = [line.split(":", 1)[0] for line in str(refused.value).splitlines()]
    assert named == [
        "actor_rollout_ref.rollout.name",  # vllm
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
        "trainer.total_epochs",  # (alone: runs are counted in iterations here)
        "critic.optim.lr_warmup_steps_ratio",
    ]


def test_a_script_runs_through_verls_module_name(verl_home, tmp_path):
    """``python3 -m verl.trainer.main_ppo`` in the script itself is rlcore (verl_shim/)."""
    env, _ = verl_home
    done = subprocess.run(
        ["bash", str(SCRIPTS / "run_qwen2-7b_seq_balance.sh"), *ON_A_CPU, "runner.dry_run=true"],
        env={**env, "HF_HUB_CACHE": env["HF_HUB_CACHE"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dry run: the config and placement are valid" in done.stdout
    assert "actor_rollout_ref.actor.use_dynamic_bsz and " in done.stderr


# each of the five scripts, as its case's overrides make it fit a CPU (0.2-1.3 s each here, the
# model and data built once for the module)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_verl_example_trains_two_iterations(hub_cache, name, tmp_path, capsys):
    from rlcore.cli import run_entry_point

    env, _ = hub_cache
    extra, _ = CASES[name]
    argv = script_argv(env, name, *ON_A_CPU, *extra, f"trainer.default_local_dir={tmp_path}")
    assert run_entry_point("reasoning/tiny_arith_ppo", [*argv, "runner.progress=false"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 2
