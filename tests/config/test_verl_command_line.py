"""verl's command-line semantics (issue 50, point 2): a key given again takes its last value
(Hydra's rule: ``bash run_x.sh key=value`` appends to the script's own overrides), saying so."""

from rlcore.config import load_config


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
