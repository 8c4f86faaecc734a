"""verl's command-line semantics (issue 50, point 2): a key given again takes its last value
(Hydra's rule: ``bash run_x.sh key=value`` appends to the script's own overrides), saying so;
every problem of a config in one pass; dynamic batching drops the micro-batch size in rows, as
verl does."""

import pytest

from rlcore.config import ConfigError, load_config


def test_a_verl_key_given_again_after_the_script_takes_the_last_value(capsys):
    script = ["actor_rollout_ref.rollout.n=5", "algorithm.adv_estimator=grpo"]
    appended = ["actor_rollout_ref.rollout.n=8", "data.train_batch_size=64"]
    config = load_config(
        "reasoning/tiny_arith_ppo", [*script, "data.train_batch_size=32", *appended]
    )
    assert config.algorithm.group_size == 8 and config.data.train_batch_size == 64
    err = capsys.readouterr().err
    assert (
        "actor_rollout_ref.rollout.n is given 2 times (actor_rollout_ref.rollout.n=5, then "
        "actor_rollout_ref.rollout.n=8): the last, actor_rollout_ref.rollout.n=8, wins" in err
    )
    assert "data.train_batch_size is given 2 times" in err


def test_a_config_group_chosen_twice_takes_the_last_choice(capsys):
    local_last = load_config("embodied/cartpole_ppo", ["cluster=gpu_2x8", "cluster=local"])
    assert "cluster is given 2 times" in capsys.readouterr().err
    gpus_last = load_config("embodied/cartpole_ppo", ["cluster=local", "cluster=gpu_2x8"])
    # (configs/cluster/local.yaml: one node; gpu_2x8.yaml: two)
    assert (local_last.cluster.num_nodes, gpus_last.cluster.num_nodes) == (1, 2)


def test_every_problem_of_the_translation_and_the_keys_is_reported_at_once():
    with pytest.raises(ConfigError) as refused:
        load_config(
            "reasoning/tiny_arith_ppo",
            [
                # two verl spellings of algorithm.group_size that disagree (a translation problem)
                "actor_rollout_ref.rollout.n=4",
                "actor_rollout.ref.rollout.n=5",
                "trainer.logger=[console,swanlab]",  # (a value verl's key cannot take here)
                "trainer.total_epochs=15",  # (verl's key, no counterpart)
                "algorithm.clip_ratio_hi=0.3",  # (a misspelt rlcore key)
                "rollout.temperature=0",  # (out of range)
            ],
        )
    lines = str(refused.value).splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "actor_rollout.ref.rollout.n=5",
        "trainer.logger",
        "trainer.total_epochs",
        "algorithm.clip_ratio_hi",
        "rollout.temperature",
    ]
    assert "swanlab is not a logger here" in lines[1]
    assert "did you mean 'algorithm.clip_ratio_high'" in lines[3]


def test_verls_dynamic_batching_drops_the_configs_micro_batch_size_as_verl_does(capsys):
    # the shipped config sets actor.ppo_micro_batch_size: 64; verl splits by tokens alone then
    config = load_config(
        "reasoning/tiny_arith_ppo", ["actor_rollout_ref.actor.use_dynamic_bsz=true"]
    )
    assert config.actor.ppo_micro_batch_size is None
    assert config.actor.log_prob_micro_batch_size is None
    # verl's default lengths: 16384 tokens for the actor, 32768 for the critic (verl's yaml)
    assert config.actor.max_tokens_per_micro_batch == 16384
    assert config.critic.max_tokens_per_micro_batch == 32768
    err = capsys.readouterr().err
    assert "actor.ppo_micro_batch_size: 64 ignored (null), as verl ignores the micro-batch" in err
    # verl's own micro size beside its switch: ignored too, as verl does
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
        ],
    )
    assert (config.actor.ppo_micro_batch_size, config.actor.max_tokens_per_micro_batch) == (
        None,
        4096,
    )
    assert "actor.ppo_micro_batch_size: 16 ignored (null)" in capsys.readouterr().err


def test_a_micro_batch_size_the_user_set_in_rlcores_spelling_clashes_with_the_budget(tmp_path):
    switch = "actor_rollout_ref.actor.use_dynamic_bsz=true"
    clash = r"actor.max_tokens_per_micro_batch: set together with actor.ppo_micro_batch_size"
    with pytest.raises(ConfigError, match=clash):
        load_config("reasoning/tiny_arith_ppo", [switch, "actor.ppo_micro_batch_size=8"])
    own = tmp_path / "mine.yaml"  # (a user's file on top of a shipped config)
    own.write_text(
        "defaults:\n  - /reasoning/tiny_arith_ppo\n  - _self_\n"
        "actor:\n  ppo_micro_batch_size: 8\n"
        "actor_rollout_ref:\n  actor:\n    use_dynamic_bsz: true\n"
    )
    with pytest.raises(ConfigError, match=clash):
        load_config(str(own))


# verl's reward-model example (examples/ppo_trainer/run_qwen2-7b_rm.sh), its reward_model keys
RM_SCRIPT_KEYS = [
    "reward_model.enable=True",
    "reward_model.model.path=/models/FsfairX-LLaMA3-RM-v0.1",
    "reward_model.use_reward_loop=True",
    "reward_model.rollout.name=vllm",
    "reward_model.rollout.gpu_memory_utilization=0.8",
    "reward_model.rollout.tensor_model_parallel_size=1",
    "reward_model.rollout.prompt_length=2048",
    "reward_model.rollout.response_length=1024",
    "reward_model.num_workers=8",
]


def test_verls_reward_model_is_reward_kind_model(capsys):
    config = load_config(
        "reasoning/tiny_arith_ppo", [*RM_SCRIPT_KEYS, "reward_model.micro_batch_size_per_gpu=8"]
    )
    assert config.reward.kind == "model"
    assert config.reward.model.path == "/models/FsfairX-LLaMA3-RM-v0.1"
    assert config.reward.model.micro_batch_size == 8
    # verl's rm_scores replace the rule's score: the model's score is the reward
    assert config.reward.model.combine == "rule_only_for_accuracy"
    err = capsys.readouterr().err
    assert "reward_model.enable (verl) is reward.kind=model here" in err
    assert (
        "reward_model.use_reward_loop, reward_model.num_workers, reward_model.rollout.name, " in err
    )
    # verl 0.9's spelling under reward.
    config = load_config(
        "reasoning/tiny_arith_ppo",
        ["reward.reward_model.enable=true", "reward.reward_model.model_path=/rm"],
    )
    assert (config.reward.kind, config.reward.model.path) == ("model", "/rm")


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        # the model named, but verl would score by rule: never silently
        (
            ["reward_model.model.path=/rm"],
            "reward_model.model.path: set, but reward_model.enable is not set (verl's default: "
            "false), so verl would score by rule",
        ),
        (
            ["reward_model.enable=false", "reward_model.model.path=/rm"],
            "reward_model.model.path: set, but reward_model.enable is false",
        ),
        (
            ["reward_model.enable=true", "reward.kind=gsm8k"],
            "reward_model.enable=true is reward.kind=model here, but reward.kind is gsm8k; for "
            "the model's score as the reward and that rule's verdicts, set reward.kind=model "
            "reward.model.rule=gsm8k",
        ),
        (
            ["reward_model.enable=true", "reward_model.rollout.response_length=4"],
            "reward_model.rollout.response_length: 4, shorter than data.max_response_length=8",
        ),
        (
            ["reward_model.enable=true", "reward_model.strategy=megatron"],
            "reward_model.strategy: 'megatron'; a reward model here runs whole on each reward",
        ),
    ],
)
def test_a_reward_model_verl_would_not_use_as_asked_is_refused_naming_why(overrides, refusal):
    with pytest.raises(ConfigError) as refused:
        load_config("reasoning/tiny_arith_ppo", overrides)
    assert str(refused.value).startswith(refusal)


def test_verls_multi_turn_section_is_the_tool_rollouts_keys(capsys):
    verl = "actor_rollout_ref.rollout.multi_turn"
    config = load_config(
        "reasoning/tiny_calc_tools_grpo",  # (rollout.tools: [calculator])
        [f"{verl}.enable=true", f"{verl}.max_assistant_turns=3", f"{verl}.format=hermes"],
    )
    assert (config.rollout.max_turns, config.rollout.tool_call_regex) == (3, None)
    assert f"{verl}.max_assistant_turns (verl) is rollout.max_turns here" in capsys.readouterr().err
    # off, as verl's default: its format and turns are not read (verl's GRPO seq-balance script)
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [f"{verl}.format=hermes", "actor_rollout_ref.rollout.mode=async"],
    )
    assert len(config.rollout.tools) == 0 and config.rollout.max_turns == 4  # (rlcore's default)
    assert f"{verl}.format (verl): no effect without {verl}.enable=true" in capsys.readouterr().err
    for overrides, refusal in [
        ([f"{verl}.enable=true"], f"{verl}.enable: true, but no tools"),
        (
            [f"{verl}.enable=false", "rollout.tools=[calculator]"],
            f"{verl}.enable: false, but rollout.tools (or rollout.interaction) is set",
        ),
        (
            [f"{verl}.enable=true", "rollout.tools=[calculator]", f"{verl}.format=llama3_json"],
            f"{verl}.format: llama3_json; tool calls are read in the Hermes format here",
        ),
        (
            [f"{verl}.tool_config_path=tools.yaml"],
            f"{verl}.tool_config_path: verl's key has no rlcore counterpart",
        ),
    ]:
        with pytest.raises(ConfigError) as refused:
            load_config("reasoning/tiny_arith_ppo", overrides)
        assert str(refused.value).startswith(refusal), overrides


def test_verls_async_training_maps_its_staleness_bound_and_refuses_the_rest(capsys):
    config = load_config(
        "reasoning/tiny_arith_ppo_async",
        [
            "async_training.staleness_threshold=2",
            "async_training.partial_rollout=true",
            "async_training.use_rollout_log_probs=true",
            # 2 x 1 x 64 = 128 prompts between weight syncs: the config's batch
            "async_training.trigger_parameter_sync_step=2",
            "async_training.require_batches=1",
        ],
    )
    assert config.runner.max_staleness == 2
    assert config.rollout.partial_rollout is True
    assert config.algorithm.rollout_correction.bypass_mode is True
    assert "async_training.staleness_threshold (verl) is runner.max_staleness here" in (
        capsys.readouterr().err
    )
    with pytest.raises(ConfigError) as refused:
        load_config(
            "reasoning/tiny_arith_ppo_async",
            [
                "async_training.staleness_threshold=0.1",  # (verl's default: a share of a batch)
                "async_training.trigger_parameter_sync_step=4",  # 4 x 1 x 64 = 256, not 128
                "async_training.checkpoint_engine.enable=true",
            ],
        )
    lines = str(refused.value).splitlines()
    assert lines[0].startswith("async_training.staleness_threshold: 0.1; runner.max_staleness")
    assert lines[1].startswith(
        "async_training.trigger_parameter_sync_step=4 x require_batches=1 x "
        "actor.ppo_mini_batch_size=64 = 256 prompts between weight syncs, but here the weights "
        "go to the rollout once a batch (data.train_batch_size=128); set data.train_batch_size=256"
    )
    assert lines[2].startswith("async_training.checkpoint_engine.enable: verl's key has no rlcore")
    assert len(lines) == 3


def test_a_value_replaced_later_on_the_command_line_is_never_checked(capsys):
    # verl's script names vllm; `bash run.sh actor_rollout_ref.rollout.name=hf` replaces it
    config = load_config(
        "reasoning/tiny_arith_ppo",
        ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.name=hf"],
    )
    assert config.rollout.backend == "hf"
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref.rollout.name: 'vllm'; the rollout"):
        load_config("reasoning/tiny_arith_ppo", ["actor_rollout_ref.rollout.name=vllm"])
    # a key the command line gave, then deleted: gone, wherever it was set
    config = load_config(
        "reasoning/tiny_arith_ppo",
        ["rollout.gpu_memory_utilization=0.6", "~rollout.gpu_memory_utilization"],
    )
    assert config.rollout.gpu_memory_utilization is None


def test_the_references_offload_gives_way_to_the_actors(capsys):
    # verl's GRPO examples offload the reference's parameters only; one switch for both here
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            "actor_rollout_ref.actor.fsdp_config.param_offload=False",
            "actor_rollout_ref.ref.fsdp_config.param_offload=True",
        ],
    )
    assert config.actor.fsdp.offload is False
    assert (
        "actor_rollout_ref.ref.fsdp_config.param_offload=True (verl) gives way to "
        "actor_rollout_ref.actor.fsdp_config.param_offload=False"
    ) in capsys.readouterr().err


def test_verls_fixed_choices_epochs_and_project_name(capsys):
    verl = [
        "data.filter_overlong_prompts=True",
        "data.truncation='error'",
        "data.return_raw_chat=True",
        "trainer.val_before_train=False",
        "trainer.project_name='verl_example'",
        "trainer.total_epochs=15",
    ]
    with pytest.raises(ConfigError) as refused:
        load_config("reasoning/tiny_arith_ppo", verl)
    assert str(refused.value).startswith(
        "trainer.total_epochs: verl's key has no rlcore counterpart; a run here is counted in "
        "iterations (one batch each): give trainer.total_training_steps"
    )
    config = load_config("reasoning/tiny_arith_ppo", [*verl, "trainer.total_training_steps=3"])
    assert config.runner.total_iterations == 3 and config.logger.project == "verl_example"
    err = capsys.readouterr().err
    assert "trainer.total_epochs=15 (verl): the run's length is its total_training_steps" in err
    assert "trainer.val_before_train=False (verl): a run validates before its first" in err
    for refused_value, line in [
        ("data.truncation=left", "data.truncation: 'left'; no prompt is cut here"),
        ("data.filter_overlong_prompts=False", "data.filter_overlong_prompts: False; a prompt"),
    ]:
        with pytest.raises(ConfigError, match=f"^{line}"):
            load_config("reasoning/tiny_arith_ppo", [refused_value])


@pytest.mark.parametrize(
    "order",
    [
        ["actor_rollout_ref.actor.clip_ratio_low=0.3", "actor_rollout_ref.actor.clip_ratio=0.2"],
        ["actor_rollout_ref.actor.clip_ratio=0.2", "actor_rollout_ref.actor.clip_ratio_low=0.3"],
    ],
)
def test_verls_specific_clip_bound_beats_its_shorthand_in_either_order(order):
    # verl: clip_ratio_low if set, else clip_ratio (its policy loss reads them so)
    config = load_config("reasoning/tiny_arith_ppo", order)
    assert (config.algorithm.clip_ratio_low, config.algorithm.clip_ratio_high) == (0.3, 0.2)
