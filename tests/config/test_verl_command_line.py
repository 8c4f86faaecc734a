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
                "trainer.project_name=demo",  # (verl's key, no counterpart)
                "algorithm.clip_ratio_hi=0.3",  # (a misspelt rlcore key)
                "rollout.temperature=0",  # (out of range)
            ],
        )
    lines = str(refused.value).splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "actor_rollout.ref.rollout.n=5",
        "trainer.logger",
        "trainer.project_name",
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
