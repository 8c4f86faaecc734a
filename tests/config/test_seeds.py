"""The seed documents' configs load as written: verl's command line (seed 000) and RLinf's two
YAML blocks (seed 002), copied here verbatim (the seeds live outside the repository)."""

import hashlib
import importlib.util
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from rlcore.cli import run_entry_point
from rlcore.columns import LAST_VALUE, OLD_LOG_PROBS, VALUES
from rlcore.config import load_config
from rlcore.config.errors import ConfigError
from rlcore.models.hub import local_model_dir
from rlcore.models.lm import check_model_dir
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from tests.lm_fixtures import TINY

REPO = Path(__file__).resolve().parents[2]

# seed 000 (verl's PPO page), the reference example's overrides after `bash run_gemma.sh`.
VERL_COMMAND_LINE = [
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "trainer.logger=['console']",
    "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
    "data.train_batch_size=256",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
    "actor_rollout_ref.actor.ppo_micro_batch_size=2",
    "critic.ppo_micro_batch_size=2",
]

# seed 002 (RLinf's PPO page), section 3.1, verbatim.
RLINF_EMBODIED = """
algorithm:

   # Core PPO settings (recommended not to change)
   normalize_advantages: True
   group_size: 1
   adv_type: gae
   loss_type: actor_critic
   loss_agg_func: "token-mean"

   # Algorithm parameters (typically require tuning)

   rollout_micro_batch_size: 256
   logprob_forward_micro_batch_size: 16  # Larger batch_size improves stability.
                                         # Adjust according to compute resources and model size.

   entropy_bonus: 0          # Optional: encourage exploration
   clip_ratio_high: 0.2      # PPO clipping parameter (epsilon)
   clip_ratio_low: 0.2       # Should match clip_ratio_high
   value_clip: 0.2           # Stabilizes value function updates

   gamma: 0.99               # Discount factor for GAE
   gae_lambda: 0.95          # Lambda parameter for GAE

   huber_delta: 10.0         # Delta parameter for Huber loss in value training
"""

# seed 002, section 3.2: the algorithm block and the placement/component block, verbatim but for
# the "..." lines that stand for the rest of a config.
RLINF_REASONING = """
algorithm:
   # Group size should be 1
   group_size: 1

   # Advantage function
   adv_type: gae
   gamma: 1
   gae_lambda: 1
   normalize_advantages: True

   # The type of actor loss. This is different from embodied tasks,
   # because the actor and critic are not in the same model and cannot perform backward together.
   loss_type: actor
   loss_agg_func: "token-mean"

   # For actor loss
   clip_ratio_c: 3.0
   clip_ratio_low: 0.2
   clip_ratio_high: 0.2

   # For critic loss
   value_clip: 0.2           # Stabilizes value function updates

cluster:
  num_nodes: 1
  component_placement:
    # Note the addition of a critic component compared to GRPO
    actor,critic,rollout,reward: all

actor:
  group_name: "ActorGroup"
  training_backend: megatron

critic:
  use_critic_model: true # This parameter indicates that the critic is a complete model, not just a value head.
  group_name: "CriticGroup"
  training_backend: megatron
"""  # noqa: E501 (the seed's own line lengths)


def on_top_of(base: str, block: str) -> str:
    """A user's config file: a shipped config, then the seed's block."""
    return f"defaults:\n  - /{base}\n  - _self_\n" + textwrap.dedent(block)


def test_verl_command_line_maps_every_override_and_says_so(tiny_lm, capsys):
    _, dirs = tiny_lm
    local = [o.replace("Qwen/Qwen2.5-0.5B-Instruct", str(dirs.actor)) for o in VERL_COMMAND_LINE]
    config = load_config("reasoning/tiny_arith_ppo", [*local, "warmup.steps=0"])
    said = capsys.readouterr().err
    for alias, target in [
        ("trainer.n_gpus_per_node", "cluster.devices_per_node"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "rollout.tensor_parallel_size"),
        ("trainer.logger", "logger.console"),
        ("critic.model.path", "critic.model_path"),
        ("actor_rollout_ref.model.path", "actor.model.path"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "actor.ppo_mini_batch_size"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size", "actor.ppo_micro_batch_size"),
    ]:
        assert f"rlcore: {alias} (verl) is {target}" in said
    assert said.count("rlcore: ") == 7  # critic.ppo_micro_batch_size is rlcore's own spelling
    assert "counted per rank here" in said
    assert config.cluster.devices_per_node == 1
    assert config.rollout.tensor_parallel_size == 1
    assert (config.logger.console, config.logger.tensorboard, config.logger.wandb) == (
        True,
        False,
        False,
    )
    assert config.actor.model.path == config.critic.model_path == str(dirs.actor)
    assert config.data.train_batch_size == 256
    assert config.actor.ppo_mini_batch_size == 64
    assert config.actor.ppo_micro_batch_size == config.critic.ppo_micro_batch_size == 2


@pytest.fixture
def hf_cache(tiny_lm, tmp_path, monkeypatch):
    """A Hugging Face cache (huggingface_hub's layout: refs/main names a snapshot whose files
    link to blobs) holding the tiny model as Qwen/Qwen2.5-0.5B-Instruct, the hub unreachable."""
    from huggingface_hub import constants

    _, dirs = tiny_lm
    repo = tmp_path / "hf" / "models--Qwen--Qwen2.5-0.5B-Instruct"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in dirs.actor.iterdir():
        blob = repo / "blobs" / hashlib.sha256(file.name.encode()).hexdigest()
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return snapshot


def test_a_hub_id_is_read_from_the_local_cache_and_refused_in_one_line_when_absent(
    hf_cache, monkeypatch
):
    from huggingface_hub import constants

    assert local_model_dir("Qwen/Qwen2.5-0.5B-Instruct", "actor.model.path") == hf_cache
    with pytest.raises(ConfigError, match=r"^actor.model.path: Qwen/Qwen9 is not a folder here, "):
        local_model_dir("Qwen/Qwen9", "actor.model.path")
    # online, but the hub does not answer (nothing listens on port 9): one line, no traceback
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"Qwen/Qwen9 .* the hub cannot give it") as refused:
        local_model_dir("Qwen/Qwen9", "actor.model.path")
    assert "\n" not in str(refused.value)
    # a path that exists is a path, whatever it looks like; one that does not is named as given
    assert local_model_dir(str(hf_cache), "x") == hf_cache
    with pytest.raises(ConfigError, match=r"actor.model.path: Qwen/none is not a directory"):
        check_model_dir(str(local_model_dir("./Qwen/none", "x")), "actor.model.path")


def test_verl_command_line_passes_the_dry_run_with_the_model_in_the_hf_cache(
    hf_cache, tmp_path, capsys
):
    args = [*VERL_COMMAND_LINE, "runner.dry_run=true", f"runner.output_dir={tmp_path}"]
    assert run_entry_point("reasoning/tiny_arith_ppo", args) == 0
    assert "actor.model.path names a model" in capsys.readouterr().err  # (no warm-up)


@pytest.fixture
def verl_gsm8k(tmp_path):
    """verl-layout train.parquet and test.parquet, written by examples/reasoning/prepare_gsm8k.py
    from a local GSM8K copy in the datasets format (260 and 20 short problems of its form)."""
    import datasets

    problems = [
        {"question": f"{a}+{b}?", "answer": f"{a} + {b} = <<{a}+{b}={a + b}>>{a + b}\n#### {a + b}"}
        for a in range(20)
        for b in range(14)
    ]
    local = tmp_path / "gsm8k_local"
    splits = {"train": problems[:260], "test": problems[260:]}
    datasets.DatasetDict(
        {k: datasets.Dataset.from_list(v) for k, v in splits.items()}
    ).save_to_disk(str(local))
    spec = importlib.util.spec_from_file_location(
        "prepare_gsm8k", REPO / "examples" / "reasoning" / "prepare_gsm8k.py"
    )
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    out = tmp_path / "data" / "gsm8k"
    assert prepare.main(["--local_dataset_path", str(local), "--local_save_dir", str(out)]) == 0
    return [f"data.train_files={out / 'train.parquet'}", f"data.val_files={out / 'test.parquet'}"]


def test_verl_gsm8k_files_are_written_as_verl_writes_them(verl_gsm8k):
    import datasets

    train = datasets.load_dataset(
        "parquet", data_files=verl_gsm8k[0].split("=", 1)[1], split="train"
    )
    assert len(train) == 260
    row = train[7]  # 0 + 7
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert row["prompt"] == [
        {
            "role": "user",
            "content": '0+7? Let\'s think step by step and output the final answer after "####".',
        }
    ]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "7"}
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == 7


def test_the_seed_command_line_with_verl_files_passes_the_dry_run_and_trains(
    hf_cache, verl_gsm8k, tmp_path, capsys
):
    """The seed's verl command line as written (a hub id in the HF cache: the tiny model as
    Qwen2.5), with verl-layout GSM8K files: the dry run passes; then one iteration of the
    seed's 256 prompts, scored by data_source, logged to the console only."""
    out = f"runner.output_dir={tmp_path / 'runs'}"
    args = [*VERL_COMMAND_LINE, *verl_gsm8k, out]
    # the dry run tokenises the prompts as the run does: at the config's 48 tokens, none fits
    with pytest.raises(SystemExit):
        run_entry_point("reasoning/tiny_arith_ppo", [*args, "runner.dry_run=true"])
    assert "data.train_files: every prompt is longer than data.max_prompt_length=48" in (
        capsys.readouterr().err
    )
    args.append("data.max_prompt_length=256")  # (the tiny tokenizer's pieces are short)
    assert run_entry_point("reasoning/tiny_arith_ppo", [*args, "runner.dry_run=true"]) == 0
    capsys.readouterr()
    ours = ["runner.total_iterations=1", "runner.val_every=1", "runner.progress=false"]
    assert run_entry_point("reasoning/tiny_arith_ppo", [*args, *ours, "runner.run_name=verl"]) == 0
    out, err = capsys.readouterr()
    assert "train.parquet is in verl's layout" in err and "test.parquet is in verl's layout" in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["iterations"] == 1
    assert "step 1: " in err and "actor/pg_loss=" in err  # trainer.logger=['console']
    assert not (tmp_path / "runs" / "verl" / "tensorboard").exists()


def test_a_verl_key_with_wrong_values_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.logger: swanlab is not a logger here"):
        load_config("reasoning/tiny_arith_ppo", ["trainer.logger=[console,swanlab]"])
    with pytest.raises(ConfigError, match=r"rollout.tensor_parallel_size: 2, but the hf engine"):
        load_config(
            "reasoning/tiny_arith_ppo", ["actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
        )
    with pytest.raises(ConfigError, match=r"algorithm.group_size: 0 is out of range"):
        load_config("reasoning/tiny_arith_ppo", ["actor_rollout_ref.rollout.n=0"])


def test_an_alias_and_its_rlcore_key_set_apart_in_one_file_are_refused(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text(
        on_top_of("reasoning/tiny_arith_ppo", "algorithm:\n  lam: 0.9\n  gae_lambda: 0.95\n")
    )
    with pytest.raises(
        ConfigError,
        match=r"algorithm.lam: set to 0.9, which is "
        r"algorithm.gae_lambda here, but the config also sets",
    ):
        load_config(str(path))


def test_two_spellings_of_one_key_must_agree(tmp_path):
    """verl's actor and critic both say use_remove_padding; rlcore has one key for both, so a
    file giving them different values is refused, and equal values are taken."""
    path = tmp_path / "pack.yaml"
    both = (
        "actor_rollout_ref:\n  model:\n    use_remove_padding: {}\n"
        "critic:\n  model:\n    use_remove_padding: {}\n"
    )
    path.write_text(on_top_of("reasoning/tiny_arith_ppo", both.format("true", "true")))
    assert load_config(str(path)).actor.model.use_remove_padding is True
    path.write_text(on_top_of("reasoning/tiny_arith_ppo", both.format("true", "false")))
    with pytest.raises(
        ConfigError,
        match=r"critic.model.use_remove_padding: set to False, but "
        r"actor_rollout_ref.model.use_remove_padding sets True",
    ):
        load_config(str(path))


def test_an_alias_in_a_file_beats_the_config_it_builds_on(tmp_path):
    path = tmp_path / "lam.yaml"
    path.write_text(on_top_of("reasoning/tiny_arith_ppo", "algorithm:\n  lam: 0.9\n"))
    assert load_config(str(path)).algorithm.gae_lambda == 0.9  # tiny_arith_ppo sets 1.0


def test_rlinf_embodied_block_validates_and_runs_as_written(tmp_path, capsys):
    path = tmp_path / "rlinf_embodied.yaml"
    path.write_text(on_top_of("embodied/cartpole_ppo", RLINF_EMBODIED))
    ours = [
        "runner.total_env_steps=2048",
        "runner.progress=false",
        "logger.tensorboard=false",
        f"runner.output_dir={tmp_path}",
        "runner.run_name=rlinf",
    ]
    config = load_config(str(path), ours)
    assert config.rollout.micro_batch_size == 256
    assert config.actor.log_prob_micro_batch_size == 16
    assert config.algorithm.huber_delta == 10.0
    assert run_entry_point(str(path), ours) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 2048 // (8 * 64)  # cartpole_ppo: 8 steps x 64 envs each
    assert "recompute" in summary["seconds_per_stage"]  # the actor's own log-prob pass ran


def test_the_actor_recomputes_the_rollouts_numbers_in_micro_batches(tmp_path):
    """Same weights, so the actor's recomputed log-probs and values equal the rollout's (a second
    computation of the same quantities), whatever the forward sizes."""
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "rollout.micro_batch_size=3",
            "actor.log_prob_micro_batch_size=5",
            "env.num_envs=4",
            "runner.rollout_steps=16",
            "actor.ppo_mini_batch_size=64",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
        ],
    )
    runner = EmbodiedRunner(config, plan_for_config(config))
    try:
        runner.sync()
        batch = runner.rollout.collect(runner.version)
        again = runner.actor.recompute(batch.select("obs", "actions", "last_obs"))
        for name in (OLD_LOG_PROBS, VALUES, LAST_VALUE):
            torch.testing.assert_close(again[name], batch[name], rtol=1e-5, atol=1e-6)
    finally:
        runner.close()


def test_the_rollout_acts_on_micro_batches_with_the_same_actions(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "rollout.micro_batch_size=3",
            "env.num_envs=8",
            "actor.ppo_mini_batch_size=64",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
        ],
    )
    runner = EmbodiedRunner(config, plan_for_config(config))
    try:
        rollout, sizes = runner.rollout, []
        act = rollout.model.act
        rollout.model.act = lambda obs, *a, **k: sizes.append(len(obs)) or act(obs, *a, **k)
        obs = torch.randn(8, 4)
        chunked = rollout._act(obs, deterministic=True)
        assert sizes == [3, 3, 2]
        whole = act(obs, deterministic=True)
        for a, b in zip(chunked, whole, strict=True):
            torch.testing.assert_close(a, b)
    finally:
        runner.close()


def test_rlinf_reasoning_block_loads_and_megatron_is_refused_on_cpu_slots(tmp_path):
    """RLinf's block trains actor and critic on Megatron: it validates as written, and the plan
    refuses it here, where the slots are CPUs (Megatron-core's model calls CUDA)."""
    path = tmp_path / "rlinf_reasoning.yaml"
    path.write_text(on_top_of("reasoning/tiny_arith_ppo", RLINF_REASONING))
    config = load_config(str(path))
    assert config.actor.training_backend == config.critic.training_backend == "megatron"
    with pytest.raises(ConfigError) as refused:
        plan_for_config(config, gpus=lambda: 0)
    assert str(refused.value).splitlines() == [
        f"{c}.training_backend: megatron runs on GPUs only (Megatron-core's model calls CUDA), "
        "and the plan's devices are CPUs (cluster.device auto); use training_backend torch or "
        "fsdp2"
        for c in ("actor", "critic")
    ]


@pytest.mark.usefixtures("local_ray")
def test_rlinf_reasoning_block_runs_with_the_torch_backend(tiny_lm, tmp_path, capsys):
    _, dirs = tiny_lm
    path = tmp_path / "rlinf_reasoning.yaml"
    path.write_text(
        on_top_of("reasoning/tiny_arith_ppo", RLINF_REASONING.replace("megatron", "torch"))
    )
    ours = [
        *(o for o in TINY if not o.startswith("runner.total_iterations=")),  # (given once)
        f"warmup.cache_dir={dirs.actor.parent}",
        "cluster.devices_per_node=2",
        "runner.total_iterations=1",
        f"runner.output_dir={tmp_path}",
    ]
    config = load_config(str(path), ours)
    plan = plan_for_config(config)
    assert {c: plan.world_size(c) for c in plan.components} == dict.fromkeys(
        ("actor", "critic", "rollout", "reward"), 2
    )
    assert "worker groups: actor=ActorGroup, critic=CriticGroup" in plan.table()
    assert run_entry_point(str(path), ours) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["iterations"] == 1


def test_verl_sections_in_a_yaml_file_become_rlcore_keys(tmp_path, capsys):
    path = tmp_path / "verl.yaml"
    path.write_text(
        on_top_of(
            "reasoning/tiny_arith_ppo",
            """
        actor_rollout_ref:
          rollout:
            n: 4
          actor:
            ppo_mini_batch_size: 32
            clip_ratio: 0.28
        algorithm:
          adv_estimator: grpo
        trainer:
          total_training_steps: 7
        """,
        )
    )
    config = load_config(str(path))
    assert config.algorithm.group_size == 4 and config.algorithm.adv_type == "grpo"
    assert config.actor.ppo_mini_batch_size == 32 and config.runner.total_iterations == 7
    assert config.algorithm.clip_ratio_low == config.algorithm.clip_ratio_high == 0.28
    assert config.derived.critic_model is False  # grpo reads no values
    said = capsys.readouterr().err
    assert (
        "rlcore: actor_rollout_ref.actor.clip_ratio (verl) is algorithm.clip_ratio_low and "
        "algorithm.clip_ratio_high here" in said
    )


def test_verl_spellings_of_backends_lora_checkpoints_and_resume_map_to_rlcore_keys(capsys):
    common = ["trainer.experiment_name=x", "actor_rollout_ref.model.path=/m"]
    fsdp = load_config(
        "reasoning/tiny_arith_ppo",
        [
            *common,
            "actor_rollout_ref.actor.strategy=fsdp",  # FSDP1 in verl: FSDP2 here
            "critic.strategy=fsdp2",
            "actor_rollout_ref.actor.fsdp_config.offload_policy=true",
            "trainer.resume_mode=disable",
            "trainer.max_actor_ckpt_to_keep=2",
            "trainer.default_local_dir=/runs",
        ],
    )
    assert (fsdp.actor.training_backend, fsdp.critic.training_backend) == ("fsdp2", "fsdp2")
    assert fsdp.actor.fsdp.offload is True
    assert (fsdp.runner.resume, fsdp.runner.keep_checkpoints) == ("never", 2)
    assert fsdp.runner.output_dir == "/runs"
    lora = load_config(
        "reasoning/tiny_arith_ppo",
        [
            *common,
            "trainer.resume_mode=auto",
            "actor_rollout_ref.model.lora_rank=8",
            "actor_rollout_ref.model.lora_alpha=16",
        ],
    )
    assert (lora.actor.model.lora.rank, lora.actor.model.lora.alpha) == (8, 16.0)
    assert lora.runner.resume == "auto"
    said = capsys.readouterr().err
    assert "rlcore: actor_rollout_ref.actor.strategy (verl) is actor.training_backend here" in said
    assert "trainer.default_local_dir (verl) is runner.output_dir here; a run is written" in said
    with pytest.raises(ConfigError, match=r"trainer.resume_mode: resume_path is runner.resume_dir"):
        load_config("reasoning/tiny_arith_ppo", ["trainer.resume_mode=resume_path"])
    with pytest.raises(ConfigError, match=r"critic.strategy: 'ddp' is not one of verl's fsdp"):
        load_config("reasoning/tiny_arith_ppo", ["critic.strategy=ddp"])


def test_verl_offload_switches_are_one_here_and_must_agree(capsys):
    both = [
        f"{section}.{switch}=true"
        for section in ("actor_rollout_ref.actor.fsdp_config", "critic.fsdp")
        for switch in ("param_offload", "optimizer_offload")
    ]
    strategies = ["actor_rollout_ref.actor.strategy=fsdp", "critic.strategy=fsdp"]
    config = load_config("reasoning/tiny_arith_ppo", [*both, *strategies])
    assert config.actor.fsdp.offload is True and config.critic.fsdp.offload is True
    assert "param_offload, optimizer_offload and offload_policy are one switch" in (
        capsys.readouterr().err
    )
    with pytest.raises(ConfigError, match=r"param_offload sets True; both are actor.fsdp.offload"):
        load_config(
            "reasoning/tiny_arith_ppo",
            [
                "actor_rollout_ref.actor.fsdp_config.param_offload=true",
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
            ],
        )


@pytest.mark.parametrize(
    ("verl", "actor", "critic", "line"),
    [
        # the switch and the length: that budget; the critic's switch follows the actor's, at
        # verl's critic length (32768)
        (
            [
                "actor_rollout_ref.actor.use_dynamic_bsz=true",
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
            ],
            4096,
            32768,
            "are actor.max_tokens_per_micro_batch=4096 here",
        ),
        # the switch alone: verl's default length
        (["actor_rollout_ref.actor.use_dynamic_bsz=true"], 16384, 32768, "=16384 here"),
        # a length without the switch: no budget, as in verl
        (
            ["critic.ppo_max_token_len_per_gpu=999"],
            None,
            None,
            "critic.ppo_max_token_len_per_gpu (verl) has no effect without",
        ),
    ],
)
def test_verl_dynamic_batch_size_is_the_token_budget(verl, actor, critic, line, capsys):
    config = load_config("reasoning/tiny_arith_ppo", [*verl, "actor.ppo_micro_batch_size=null"])
    assert config.actor.max_tokens_per_micro_batch == actor
    assert config.critic.max_tokens_per_micro_batch == critic
    assert line in capsys.readouterr().err


def test_verl_token_lengths_that_differ_for_one_model_are_refused():
    with pytest.raises(ConfigError, match=r"one token budget here \(actor.max_tokens_per_micro"):
        load_config(
            "reasoning/tiny_arith_ppo",
            [
                "actor_rollout_ref.actor.use_dynamic_bsz=true",
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
                "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8192",
                "actor.ppo_micro_batch_size=null",
            ],
        )


VERL_SCORE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    right = solution_str.strip().endswith(ground_truth)
    return {"score": float(right) + extra_info["bonus"], "acc": right, "source": len(data_source)}
"""


def test_verl_custom_reward_function_is_a_custom_reward_called_as_verl_calls_it(tmp_path, capsys):
    (tmp_path / "score.py").write_text(VERL_SCORE)
    config = load_config(
        "reasoning/tiny_arith_ppo", [f"custom_reward_function.path={tmp_path}/score.py"]
    )
    assert config.reward.kind == "custom"
    assert (
        config.reward.rules.custom_fn == f"{tmp_path}/score.py:compute_score"
    )  # verl's default name
    assert "custom_reward_function.path and .name (verl) are reward.kind=custom" in (
        capsys.readouterr().err
    )
    # the row's data_source and extra_info reach it, by keyword, as verl passes them
    from rlcore.rewards.rules import load_custom_fn
    from rlcore.rewards.verdicts import Rules, rule_verdict

    fn = load_custom_fn(config.reward.rules.custom_fn)
    verdict = rule_verdict(
        Rules.of(config.reward), fn, "so #### 4", "4", 0, "openai/gsm8k", {"bonus": 0.5}
    )
    assert (verdict.score, verdict.correct) == (1.5, True)
    assert verdict.components["source"] == len("openai/gsm8k")
    with pytest.raises(ConfigError, match=r"names .*score.py:other, but reward.rules.custom_fn is"):
        load_config(
            "reasoning/tiny_arith_ppo",
            [
                f"custom_reward_function.path={tmp_path}/score.py",
                "custom_reward_function.name=other",
                "reward.rules.custom_fn=x.py:f",
            ],
        )
