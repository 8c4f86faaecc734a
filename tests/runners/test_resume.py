"""A run resumed from a checkpoint ends exactly where the uninterrupted one ends, in any layout."""

import json
import re
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from rlcore.config import ConfigError, load_config
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.runners.preflight import preflight

# every Ray run of this module joins one local Ray (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("local_ray")

SMALL = [
    "env.num_envs=4",
    "runner.rollout_steps=16",
    "runner.total_env_steps=384",
    "actor.ppo_mini_batch_size=32",
    "actor.ppo_epochs=2",
    "runner.checkpoint_every=3",
    "runner.eval_every=2",
    "runner.eval_episodes=2",
    "runner.progress=false",
    "logger.tensorboard=false",
    "env.solved_threshold=null",
    "env.checkpoint_state=pickle",  # the envs themselves: bit-exact resumes
]
REPO = Path(__file__).resolve().parents[2]
PLACEMENTS = {
    "one-process": None,
    "env-apart": "{env:0,rollout:1,actor:1}",
    "rollout-apart": "{env:0,rollout:0,actor:1}",
    "data-parallel": "{env:all,rollout:all,actor:all}",
}
LAYOUTS = {
    name: [] if p is None else ["cluster.devices_per_node=2", f"cluster.component_placement={p}"]
    for name, p in PLACEMENTS.items()
}


def config(tmp_path, *extra):
    return load_config("embodied/cartpole_ppo", [*SMALL, f"runner.output_dir={tmp_path}", *extra])


def run(cfg):
    return EmbodiedRunner(cfg, plan_for_config(cfg)).run()


def final_weights(run_dir):
    return load_file(run_dir / "checkpoints" / "iter_000006" / "actor" / "model.safetensors")


def resume_matches(tmp_path, *extra):
    full = run(config(tmp_path, *extra, "runner.run_name=full"))
    assert full["iterations"] == 6
    # Stop after iteration 3: a run folder holding only the iteration-3 checkpoint.
    stopped = tmp_path / "stopped" / "checkpoints"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "iter_000003", stopped / "iter_000003")
    resumed = run(config(tmp_path, *extra, f"runner.resume_dir={stopped.parent}"))
    a, b = final_weights(tmp_path / "full"), final_weights(stopped.parent)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), f"{key} differs after resuming"
    assert resumed["env_steps"] == full["env_steps"] == 384
    assert resumed["eval_return_mean"] == full["eval_return_mean"]


def test_a_run_resumes_bit_for_bit(tmp_path):
    """In one process. The other layouts resume the same way after a killed worker, bit for bit
    (tests/runners/test_supervisor.py), and across layouts below."""
    resume_matches(tmp_path)


def test_a_user_policy_class_resumes_bit_for_bit(tmp_path):
    """actor.model.cls: its sampling draws from the rollout's generator (checkpointed)."""
    resume_matches(tmp_path, f"actor.model.cls={REPO}/tests/models/user_policies.py:SharedMLP")


def test_an_lm_policy_run_resumes_bit_for_bit(tmp_path):
    """actor.model.type=lm on the language-conditioned task: its weights, the rollout's
    generator and the pickled envs (instructions included) carry over."""
    resume_matches(
        tmp_path,
        "env.id=color_reach",
        "actor.model.type=lm",
        "actor.model.lm.action_bins=4",
        "actor.model.lm.tiny.hidden_size=32",
        "actor.model.lm.tiny.intermediate_size=64",
    )


def test_an_embodied_grpo_run_resumes_bit_for_bit_with_reseeded_envs(tmp_path):
    """algorithm.group_size > 1: every collection resets its envs from seeds of the rank and the
    step count, so a resume needs no pickled envs to be exact, and says so."""
    resume_matches(
        tmp_path,
        "env.id=color_reach",
        "env.checkpoint_state=reseed",
        "algorithm.adv_type=grpo",
        "algorithm.group_size=2",
        "algorithm.value_coef=0",
    )
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert summary["resume_bit_exact"] is True


def test_normalised_continuous_runs_resume_bit_for_bit(tmp_path):
    resume_matches(
        tmp_path,
        "env.id=Pendulum-v1",
        "env.vector_mode=sync",
        "env.normalize_obs=true",
        "env.normalize_reward=true",
    )


def test_resuming_with_another_config_names_the_changed_keys(tmp_path):
    run(config(tmp_path, "runner.run_name=a", "runner.total_env_steps=192"))
    with pytest.raises(ConfigError, match=r"other values of algorithm\.gamma"):
        run(config(tmp_path, f"runner.resume_dir={tmp_path / 'a'}", "algorithm.gamma=0.9"))


def test_resuming_a_run_that_is_already_at_its_target_is_refused(tmp_path):
    run(config(tmp_path, "runner.run_name=a", "runner.total_env_steps=192"))  # 3 iterations
    for steps in (128, 192):  # fewer than done, and exactly as many
        with pytest.raises(
            ConfigError,
            match=r"runner.total_env_steps: .* has already trained 3 "
            r"iterations, and this config stops at",
        ):
            run(
                config(
                    tmp_path,
                    f"runner.resume_dir={tmp_path / 'a'}",
                    f"runner.total_env_steps={steps}",
                )
            )
    # A job scheduler re-launching the finished run (resume=auto) finds nothing left to do.
    again = run(
        config(tmp_path, "runner.run_name=a", "runner.resume=auto", "runner.total_env_steps=192")
    )
    assert again["iterations"] == 3


def test_a_run_resumes_bit_for_bit_in_another_layout_with_as_many_ranks(tmp_path):
    """Each rank's state is its own: one process saved it, three processes carry on."""
    run(config(tmp_path, "runner.run_name=full"))
    stopped = tmp_path / "stopped" / "checkpoints"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "iter_000003", stopped / "iter_000003")
    run(config(tmp_path, f"runner.resume_dir={stopped.parent}", *LAYOUTS["env-apart"]))
    a, b = final_weights(tmp_path / "full"), final_weights(stopped.parent)
    assert all(a[key].equal(b[key]) for key in a)


def test_resuming_with_another_number_of_ranks_is_refused(tmp_path):
    run(config(tmp_path, "runner.run_name=a", "runner.total_env_steps=192"))
    with pytest.raises(ConfigError, match=r"resume with as many ranks of each"):
        run(config(tmp_path, f"runner.resume_dir={tmp_path / 'a'}", *LAYOUTS["data-parallel"]))


def test_resume_from_a_folder_without_checkpoints_says_what_to_give(tmp_path):
    with pytest.raises(ConfigError, match=r"runner\.resume_dir: no complete checkpoint at"):
        run(config(tmp_path, f"runner.resume_dir={tmp_path}"))


def test_envs_that_cannot_be_pickled_are_refused_before_training(tmp_path):
    unpicklable = "env.id=tests.runners.corridor:LockedCartPole"
    with pytest.raises(
        ConfigError, match=r"runner.checkpoint_every: the envs of .* cannot be saved"
    ):
        run(config(tmp_path, unpicklable, "env.vector_mode=sync"))
    assert (
        run(config(tmp_path, unpicklable, "env.vector_mode=sync", "runner.checkpoint_every=0"))[
            "iterations"
        ]
        == 6
    )
    # Without pickling the envs, they need not be picklable.
    assert (
        run(config(tmp_path, unpicklable, "env.vector_mode=sync", "env.checkpoint_state=reseed"))[
            "iterations"
        ]
        == 6
    )


def test_by_default_a_checkpoint_runs_no_code_on_load_and_resume_says_it_is_not_exact(
    tmp_path, capsys
):
    reseed = "env.checkpoint_state=reseed"
    full = run(config(tmp_path, reseed, "runner.run_name=full"))
    assert full["resume_bit_exact"] is None  # not resumed
    checkpoint = tmp_path / "full" / "checkpoints" / "iter_000003"
    assert not list(checkpoint.rglob("*.pkl"))
    stopped = tmp_path / "stopped" / "checkpoints"
    shutil.copytree(checkpoint, stopped / "iter_000003")
    capsys.readouterr()
    resumed = run(config(tmp_path, reseed, f"runner.resume_dir={stopped.parent}"))
    assert resumed["iterations"] == 6 and resumed["resume_bit_exact"] is False
    assert "not bit-exact with one never stopped" in capsys.readouterr().err
    # Asking for the pickled envs of a checkpoint that has none is refused, naming the fix, by
    # the run and by the dry run.
    pickle = config(tmp_path, f"runner.resume_dir={stopped / 'iter_000003'}")
    with pytest.raises(ConfigError, match=r"holds no pickled envs .* env.checkpoint_state=reseed"):
        run(pickle)
    with pytest.raises(ConfigError, match=r"holds no pickled envs"):
        preflight(pickle, plan_for_config(pickle))


def test_nothing_but_the_opt_in_env_path_unpickles():
    """Checkpoints are safetensors, JSON and weights_only torch files, except the envs of
    env.checkpoint_state=pickle."""
    found = []
    for path in sorted((REPO / "rlcore").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"weights_only=False|pickle\.load|cloudpickle\.load", line):
                found.append(f"{path.relative_to(REPO)}:{number}")
    assert len(found) == 1 and found[0].startswith("rlcore/workers/embodied/env_worker.py"), found


def test_a_damaged_checkpoint_is_skipped_or_named_never_loaded(tmp_path, capsys):
    run(config(tmp_path, "runner.run_name=full"))
    newest = tmp_path / "full" / "checkpoints" / "iter_000006"
    manifest = json.loads((newest / "manifest.json").read_text())["files"]
    assert "actor/model.safetensors" in manifest and "driver.json" in manifest
    weights = newest / "actor" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # truncated, as by a crash or a bad copy
    capsys.readouterr()
    # A run folder: the newest complete checkpoint (iteration 3) is used, the broken one named.
    resumed = run(config(tmp_path, f"runner.resume_dir={tmp_path / 'full'}"))
    assert resumed["iterations"] == 6
    err = capsys.readouterr().err
    assert f"skipped checkpoint iter_000006: {weights} has" in err
    assert "the manifest says" in err
    # The broken checkpoint itself, by name: refused, naming the file.
    run(config(tmp_path, "runner.run_name=again"))
    edited = tmp_path / "again" / "checkpoints" / "iter_000006" / "driver.json"
    edited.write_text(edited.read_text().replace('"iteration": 6', '"iteration": 5'))
    with pytest.raises(ConfigError, match=r"cannot be resumed: .*driver.json differs"):
        run(config(tmp_path, f"runner.resume_dir={edited.parent}"))


def test_keep_checkpoints_removes_the_oldest_once_a_newer_one_is_complete(tmp_path):
    run(
        config(
            tmp_path,
            "runner.run_name=kept",
            "runner.checkpoint_every=1",
            "runner.keep_checkpoints=2",
        )
    )
    left = sorted(p.name for p in (tmp_path / "kept" / "checkpoints").iterdir())
    assert left == ["iter_000005", "iter_000006"]


def test_resume_auto_relaunches_the_same_command_where_it_stopped(tmp_path, capsys):
    full = run(config(tmp_path, "runner.run_name=full"))
    same = ("runner.run_name=job", "runner.resume=auto")
    assert run(config(tmp_path, *same))["iterations"] == 6  # nothing to resume: a fresh start
    # Killed after iteration 3: the iteration-6 checkpoint was never finished.
    shutil.rmtree(tmp_path / "job" / "checkpoints" / "iter_000006")
    resumed = run(config(tmp_path, *same))
    assert "resumed from" in capsys.readouterr().err
    a, b = final_weights(tmp_path / "full"), final_weights(tmp_path / "job")
    assert all(a[k].equal(b[k]) for k in a)
    assert resumed["eval_return_mean"] == full["eval_return_mean"]
    with pytest.raises(ConfigError, match=r"runner\.resume: auto .* needs a fixed"):
        config(tmp_path, "runner.resume=auto")


def test_an_asynchronous_run_resumes_and_collects_again_what_was_in_flight(tmp_path):
    """runner.max_staleness=1 with the env, the rollout and the actor each in a process, the
    envs in 2 pipeline stages: the rollout collects the next batch while the actor trains
    (every batch but the first one update old), and a run resumed from iteration 3 collects
    anew the batch then in flight."""
    apart = [
        "cluster.devices_per_node=2",
        "cluster.component_placement={env:0,rollout:1,actor:1}",
        "cluster.fuse_collocated=false",
        "runner.max_staleness=1",
        "rollout.pipeline_stage_num=2",
    ]
    full = run(config(tmp_path, *apart, "runner.run_name=full"))
    assert (full["iterations"], full["env_steps"]) == (6, 384)
    assert full["async"] == {
        "max_staleness": 1,
        "staleness_mean": round(5 / 6, 4),  # 0, then 1 five times
        "staleness_max": 1,
        "regenerated_on_resume": 0,
    }
    assert set(full["busy_share"]) == {"env", "rollout", "actor"}
    stopped = tmp_path / "stopped" / "checkpoints"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "iter_000003", stopped / "iter_000003")
    resumed = run(config(tmp_path, *apart, f"runner.resume_dir={stopped.parent}"))
    assert (resumed["iterations"], resumed["env_steps"]) == (6, 384)
    assert resumed["async"]["regenerated_on_resume"] == 1
    assert resumed["resume_bit_exact"] is False  # the envs stepped on through that batch


def test_a_batch_older_than_the_bound_never_reaches_the_trainer():
    from rlcore.runners.pipeline import Ahead, InFlight, StalenessError
    from rlcore.scheduler.handles import Pending

    ahead = Ahead(bound=1)
    made = iter(range(10))
    ahead.top_up(5, lambda: InFlight(None, Pending(lambda: "batch"), next(made)))
    assert len(ahead.queue) == 1  # never more ahead than the bound
    _, answer, staleness = ahead.take(version=1)
    assert (answer, staleness) == ("batch", 1)
    ahead.top_up(5, lambda: InFlight(None, Pending(lambda: "batch"), 1))
    with pytest.raises(StalenessError, match=r"3 > runner\.max_staleness=1"):
        ahead.take(version=4)  # a trainer three updates on: refused, not trained on
