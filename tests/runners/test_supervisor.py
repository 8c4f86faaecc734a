"""A run survives its workers: kill -9 a worker process mid-run (or mid-checkpoint) and the run
restarts its placement, resumes from the newest complete checkpoint and ends with the weights
of a run never broken. Without Ray: the supervisor's rules on a driver that fails on cue."""

import json
import os
import signal
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from safetensors.torch import load_file

from rlcore.config import ConfigError, load_config
from rlcore.data.sampler import PromptSampler
from rlcore.placement import plan_for_config
from rlcore.runners import supervisor
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.runners.loop import Schedule
from rlcore.runners.progress import Progress
from rlcore.runners.reasoning import ReasoningRunner
from rlcore.runners.supervisor import RunLost, Supervisor, build_runner
from rlcore.scheduler.errors import WorkerError, WorkerLost, is_collective_failure
from rlcore.scheduler.handles import RemoteHandle
from rlcore.scheduler.worker_group import death_cause
from tests.lm_fixtures import tiny_config
from tests.runners.test_reasoning import length_reward
from tests.runners.test_resume import LAYOUTS, SMALL

# every Ray run of this module joins one local Ray (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("local_ray")

# -- kill -9 on Ray -------------------------------------------------------------------------------


def kill(runner, component, rank=0, sig=signal.SIGKILL):
    """SIGKILL (or ``sig``) the process hosting ``component``'s ``rank`` (a process this test
    started)."""
    os.kill(runner.components.scheduler.info[(component, rank)]["pid"], sig)


def kill_once(monkeypatch, cls, method, iteration, component, kills=None, sig=signal.SIGKILL):
    """Kill ``component``'s process (rank 0) the first time the driver calls ``cls.method``
    with ``iteration`` iterations done, before the call runs; ``kills`` lists those made."""
    original, kills = getattr(cls, method), [] if kills is None else kills

    def wrapped(self, *args, **kwargs):
        if self.progress.iteration == iteration and (method, iteration) not in kills:
            kills.append((method, iteration))
            kill(self, component, sig=sig)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, wrapped)
    return kills


def embodied(tmp_path, name, *extra):
    return load_config(
        "embodied/cartpole_ppo",
        [*SMALL, f"runner.output_dir={tmp_path}", f"runner.run_name={name}", *extra],
    )


def final_actor(run_dir):
    return load_file(run_dir / "checkpoints" / "iter_000006" / "actor" / "model.safetensors")


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs from the unbroken run"


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    """The final actor of the SMALL run in one process (the env-apart and rollout-apart layouts
    compute the same numbers: tests/runners/test_resume.py)."""
    out = tmp_path_factory.mktemp("unbroken")
    config = embodied(out, "full")
    EmbodiedRunner(config, plan_for_config(config)).run()
    return final_actor(out / "full")


def test_env_apart_survives_a_stopped_then_a_killed_env_worker_even_mid_checkpoint(
    tmp_path, monkeypatch, unbroken
):
    """Stopped (SIGSTOP: it answers nothing, the rollout waiting on it) in iteration 5, when
    checkpoint 3 is the newest, then killed while checkpoint 6 is being written (the actor's
    and rollout's files are in, the env's not): the driver's deadline (cluster.worker_timeout_s)
    notices the first, Ray the second; both times the run resumes from checkpoint 3, and ends
    bit for bit where the unbroken run ends."""
    kills = kill_once(monkeypatch, EmbodiedRunner, "iterate", 4, "env", sig=signal.SIGSTOP)
    kill_once(monkeypatch, EmbodiedRunner, "checkpoint", 6, "env", kills)
    config = embodied(tmp_path, "killed", *LAYOUTS["env-apart"], "cluster.worker_timeout_s=4")
    summary = supervisor.run(config, plan_for_config(config))
    assert kills == [("iterate", 4), ("checkpoint", 6)]
    assert summary["iterations"] == 6 and summary["restarts"] == 2
    log = summary["restart_log"]
    assert [(r["components"], r["after_iteration"], r["resumed_from"]) for r in log] == [
        (["env"], 4, 3),
        (["env"], 6, 3),
    ]
    assert "the process is stopped" in log[0]["cause"]
    assert "the process died" in log[1]["cause"]
    assert_same(final_actor(tmp_path / "killed"), unbroken)
    checkpoints = sorted(p.name for p in (tmp_path / "killed" / "checkpoints").iterdir())
    assert checkpoints == ["iter_000003", "iter_000006"]  # the half-written one is gone


def test_rollout_apart_survives_a_killed_actor(tmp_path, monkeypatch, unbroken):
    """Only the lost process starts again: the next attempt adopts the one that survived
    (env+rollout, its components closed) and ends as the unbroken run."""
    kill_once(monkeypatch, EmbodiedRunner, "iterate", 4, "actor")
    attempts = []

    def build(config, plan, models=None, _build=supervisor.build_runner):
        runner = _build(config, plan, models)
        info = runner.components.scheduler.info
        attempts.append({name: i["pid"] for (name, _), i in info.items()})
        return runner

    monkeypatch.setattr(supervisor, "build_runner", build)
    config = embodied(tmp_path, "killed", *LAYOUTS["rollout-apart"])
    summary = supervisor.run(config, plan_for_config(config))
    assert summary["restarts"] == 1 and summary["restart_log"][0]["components"] == ["actor"]
    first, second = attempts
    assert second["rollout"] == first["rollout"] == second["env"]  # kept, with its peer
    assert second["actor"] != first["actor"]  # started again
    assert_same(final_actor(tmp_path / "killed"), unbroken)


def test_a_data_parallel_actor_survives_a_rank_killed_as_its_update_starts(tmp_path, monkeypatch):
    """Rank 1 dies as the update starts: rank 0 is left in an all-reduce with a dead peer (it
    fails at once, gloo sees the closed connection; a hung peer would time out after
    cluster.collective_timeout_s). The run resumes and ends as the unbroken one."""
    full = embodied(tmp_path, "full", *LAYOUTS["data-parallel"])
    EmbodiedRunner(full, plan_for_config(full)).run()

    original, state = RemoteHandle._call, {}

    def call(self, method, mode, args, kwargs):
        if method == "update" and state.get("armed"):
            state["armed"] = False
            kill(state["runner"], "actor", rank=1)
        return original(self, method, mode, args, kwargs)

    def iterate(self, iteration, _iterate=EmbodiedRunner.iterate):
        if iteration == 5 and "runner" not in state:
            state.update(runner=self, armed=True)
        return _iterate(self, iteration)

    monkeypatch.setattr(RemoteHandle, "_call", call)
    monkeypatch.setattr(EmbodiedRunner, "iterate", iterate)
    config = embodied(tmp_path, "killed", *LAYOUTS["data-parallel"])
    summary = supervisor.run(config, plan_for_config(config))
    (restart,) = summary["restart_log"]
    assert restart["rank"] == 1 and "actor" in restart["components"]
    assert (restart["after_iteration"], restart["resumed_from"]) == (4, 3)
    assert_same(final_actor(tmp_path / "killed"), final_actor(tmp_path / "full"))


def test_reasoning_survives_a_killed_rollout_process(tiny_lm, tmp_path, monkeypatch):
    _, dirs = tiny_lm
    common = (
        f"runner.output_dir={tmp_path}",
        "runner.checkpoint_every=1",
        "runner.total_iterations=3",
        *length_reward(tmp_path),
        "cluster.devices_per_node=2",
        "cluster.component_placement={actor:0,critic:0,ref:0,rollout:1,reward:1}",
    )
    cache = dirs.actor.parent
    full = tiny_config(cache, tmp_path, *common, "runner.run_name=full")
    build_runner(full, plan_for_config(full)).run()
    kill_once(monkeypatch, ReasoningRunner, "iterate", 2, "rollout")
    config = tiny_config(cache, tmp_path, *common, "runner.run_name=killed")
    summary = supervisor.run(config, plan_for_config(config))
    (restart,) = summary["restart_log"]
    assert restart["components"] == ["rollout", "reward"]
    assert (restart["after_iteration"], restart["resumed_from"]) == (2, 2)
    for name in ("actor", "critic"):
        a, b = (
            load_file(tmp_path / run / "checkpoints/iter_000003" / name / "model.safetensors")
            for run in ("full", "killed")
        )
        assert_same(a, b)


def test_an_asynchronous_run_survives_a_killed_rollout_and_regenerates_what_was_in_flight(
    tiny_lm, tmp_path, monkeypatch
):
    """runner.max_staleness=2, the rollout apart: the rollout generates two batches ahead, each
    with the weights it holds (a version its every call checks), and the trainer takes a batch
    at most two updates old. Killed after iteration 3, the run resumes from checkpoint 2, whose
    prompt sampler stands before the two batches then in flight: it draws and generates them
    again, and ends. The batches are partial rollouts of 3-token segments, so a weight update
    may reach one mid-generation: its tokens are then newer than the batch, never older."""
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        *length_reward(tmp_path),
        "runner.max_staleness=2",
        "runner.checkpoint_every=2",
        "runner.total_iterations=5",
        "runner.run_name=async",
        "cluster.devices_per_node=2",
        "cluster.component_placement={actor:0,critic:1,rollout:1,reward:1}",
        "algorithm.rollout_correction.rollout_is=token",
        "rollout.partial_rollout=true",
        "rollout.partial_rollout_tokens=3",
    )
    kill_once(monkeypatch, ReasoningRunner, "iterate", 3, "rollout")
    summary = supervisor.run(config, plan_for_config(config))
    (restart,) = summary["restart_log"]
    assert (restart["after_iteration"], restart["resumed_from"]) == (3, 2)
    assert summary["iterations"] == 5
    # since the resume: iterations 3, 4, 5 took batches 0, 1 and 2 updates old
    tokens = summary["async"]
    assert {"token_staleness_mean", "interrupted_share"} <= set(tokens)
    assert 0 <= tokens.pop("token_staleness_mean") <= 1.0
    assert 0 <= tokens.pop("interrupted_share") <= 1
    assert tokens == {
        "max_staleness": 2,
        "staleness_mean": 1.0,
        "staleness_max": 2,
        "regenerated_on_resume": 2,
    }
    # each component's share of the iterations spent in calls: the rollout generates, the
    # actor and critic train, the reward scores
    assert set(summary["busy_share"]) == {"actor", "critic", "rollout", "reward"}
    assert all(0 < share < 2 for share in summary["busy_share"].values())
    driver = json.loads((tmp_path / "async/checkpoints/iter_000002/driver.json").read_text())
    sampler = PromptSampler(
        config.data.synthetic.num_train, config.runner.seed, config.data.shuffle
    )
    sampler.next(2 * config.data.train_batch_size)  # the two batches trained on, no more
    assert driver["state"]["in_flight"] == 2
    assert driver["state"]["sampler"] == json.loads(json.dumps(sampler.state_dict()))


# -- the supervisor's rules, without Ray ---------------------------------------------------------


class FailingDriver:
    """A driver whose iteration ``k`` loses a worker while ``FAILS`` still lists ``k``; it
    checkpoints nothing, so every restart starts from the beginning."""

    FAILS: ClassVar[list[int]] = []
    BUILT: ClassVar[list] = []

    def __init__(self, config, plan):
        self.config, self.run_dir = config, Path(config.runner.output_dir) / config.runner.run_name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.progress, self.restarts = Progress(), []
        self.schedule = Schedule(
            iterations=5,
            samples_per_iteration=1,
            eval_every=0,
            eval_first=False,
            eval_metric="eval",
            checkpoint_every=0,
            threshold=None,
            stop_at_threshold=False,
            show_progress=False,
            log_by_samples=False,
            postfix={},
        )
        self.components = self
        FailingDriver.BUILT.append(config)

    def iterate(self, iteration):
        if iteration in self.FAILS:
            self.FAILS.remove(iteration)
            raise WorkerLost("env", 0, 0, "the worker process died: SYSTEM_ERROR: killed")
        return {}

    def evaluate(self, iteration):
        return {"eval": float(iteration)}

    def checkpoint(self):
        raise AssertionError("checkpoint_every is 0")

    def summary(self, wall_s, means):
        return {"iterations": self.progress.iteration}

    def busy_seconds(self):
        return {}

    def dead_processes(self):
        return []

    def close(self, wait_s=10.0, keep_warm=False):
        pass

    def close_after_loss(self, wait_s):
        pass


def supervise(tmp_path, fails, max_restarts=3):
    FailingDriver.FAILS, FailingDriver.BUILT = list(fails), []
    config = embodied(
        tmp_path, "run", f"runner.max_restarts={max_restarts}", "logger.tensorboard=false"
    )
    return Supervisor(FailingDriver, config, plan_for_config(config)).run()


def test_each_loss_restarts_the_run_in_its_own_folder_and_is_counted(tmp_path, capsys):
    summary = supervise(tmp_path, [2, 3])
    assert summary["iterations"] == 5 and summary["restarts"] == 2
    assert [r["after_iteration"] for r in summary["restart_log"]] == [1, 2]
    assert [r["resumed_from"] for r in summary["restart_log"]] == [0, 0]
    first, *again = FailingDriver.BUILT
    assert first.runner.resume == "never"
    for config in again:  # the same folder, resumed from its newest checkpoint if any
        assert (config.runner.run_name, config.runner.resume) == ("run", "auto")
        assert config.runner.output_dir == str(tmp_path)
    err = capsys.readouterr().err
    assert "restart 1 of 3: env rank 0 on node 0: the worker process died: SYSTEM_ERROR" in err
    assert "it died after iteration 1; resuming from the start" in err


def test_a_run_that_dies_twice_after_the_same_iteration_stops_with_the_story(tmp_path):
    with pytest.raises(RunLost) as lost:
        supervise(tmp_path, [3, 3, 3])
    story = str(lost.value)
    assert "lost a worker twice after iteration 2" in story
    assert "loss 1: env rank 0 on node 0" in story and "loss 2:" in story
    assert isinstance(lost.value.__cause__, WorkerLost)


def test_losses_past_max_restarts_end_the_run(tmp_path):
    with pytest.raises(RunLost, match=r"lost a worker 3 times, more than runner.max_restarts=2"):
        supervise(tmp_path, [2, 3, 4], max_restarts=2)


def test_with_max_restarts_0_a_loss_ends_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    """Supervised still (a lost worker is told apart from a bug), restarted never: the loss in
    one line, which the entry point prints without a traceback (status 1)."""
    with pytest.raises(RunLost) as lost:
        supervise(tmp_path, [2], max_restarts=0)
    assert str(lost.value) == (
        "the run lost a worker, and runner.max_restarts=0 allows no restart: env rank 0 on node "
        "0: the worker process died: SYSTEM_ERROR: killed (after iteration 1); no checkpoint was "
        "written yet: run it again (runner.max_restarts restarts it)"
    )
    assert len(FailingDriver.BUILT) == 1
    from rlcore import cli

    monkeypatch.setattr(supervisor, "run", lambda *a: (_ for _ in ()).throw(lost.value))
    config = embodied(tmp_path, "cli", "runner.max_restarts=0")
    assert cli._run(config, plan_for_config(config)) == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"rlcore: error: {lost.value}"


def test_a_loss_the_cluster_left_cannot_host_stops_in_one_line_naming_the_checkpoint(
    tmp_path, monkeypatch
):
    """A lost node can leave too few for the plan (here: two nodes asked, this worker's local
    Ray has one): no restart is tried; one line names the loss and the checkpoint to resume
    from once the cluster has its nodes again."""
    checkpoint = tmp_path / "run" / "checkpoints" / "iter_000003"
    monkeypatch.setattr(supervisor, "newest_complete", lambda run_dir: checkpoint)
    FailingDriver.FAILS, FailingDriver.BUILT = [2], []
    config = embodied(
        tmp_path,
        "run",
        "cluster.num_nodes=2",
        "cluster.devices_per_node=1",
        "logger.tensorboard=false",
    )
    with pytest.raises(RunLost) as lost:
        Supervisor(FailingDriver, config, plan_for_config(config)).run()
    assert len(FailingDriver.BUILT) == 1
    story = str(lost.value)
    assert "\n" not in story
    assert story.startswith(
        "the run lost a worker, and the cluster left cannot hold the plan (cluster.num_nodes/"
        "devices_per_node: the plan needs 2 node(s) with 1 CPU each, but the Ray cluster's 1 "
        "node(s) have CPU: 4; change the cluster keys or add nodes): env rank 0 on node 0"
    )
    assert story.endswith(
        f"env rank 0 on node 0: the worker process died: SYSTEM_ERROR: killed (after iteration "
        f"1); resume with runner.resume_dir={checkpoint} (or set runner.max_restarts to restart "
        "on a loss)"
    )


def test_a_worker_killed_while_the_run_starts_ends_it_in_one_line(tmp_path, monkeypatch, capsys):
    """Killed while the groups are set up (a first start has nothing to resume): the loss is
    named in one line, which the entry point prints without a traceback (status 1)."""
    from rlcore import cli
    from rlcore.scheduler.scheduler import Scheduler

    def init_groups(self, _init=Scheduler._init_groups):
        os.kill(self.info[("env", 0)]["pid"], signal.SIGKILL)
        return _init(self)

    monkeypatch.setattr(Scheduler, "_init_groups", init_groups)
    config = embodied(tmp_path, "killed", *LAYOUTS["env-apart"])
    assert cli._run(config, plan_for_config(config)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("rlcore:")]
    assert line.startswith(
        "rlcore: error: the run lost a worker while starting: env rank 0 on node 0: the process "
        "died while starting: "
    )
    assert line.endswith("; nothing was trained yet: start it again")


def test_a_bug_in_a_component_is_not_a_loss(tmp_path):
    class Buggy(FailingDriver):
        def iterate(self, iteration):
            raise WorkerError("actor", 0, 0, "ValueError: a bug")

    FailingDriver.BUILT = []
    config = embodied(tmp_path, "run", "logger.tensorboard=false")
    with pytest.raises(WorkerError, match="a bug"):
        Supervisor(Buggy, config, plan_for_config(config)).run()
    assert len(FailingDriver.BUILT) == 1  # not restarted
    with pytest.raises(ConfigError):  # nor is a config error
        Supervisor(_raising(ConfigError("x")), config, plan_for_config(config)).run()


def _raising(error):
    def build(config, plan):
        raise error

    return build


def test_what_counts_as_a_collective_failure_and_a_death_cause():
    gloo = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:27334: Connection reset by peer. This is typically caused by a remote "
        "worker hanging"
    )
    assert is_collective_failure(WorkerError("actor", 0, 0, gloo))
    assert is_collective_failure(WorkerError("actor", 0, 0, "DistBackendError: NCCL error"))
    assert not is_collective_failure(WorkerError("actor", 0, 0, "ValueError: bad shape"))
    ray_text = (
        "The actor died unexpectedly before finishing this task.\n\tclass_name: "
        "WorkerProcess\nThe actor is dead because its worker process has died. Worker "
        "exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
        "connection error code 2. End of file. Some common causes include: (1) the OOM "
        "killer"
    )
    assert death_cause(RuntimeError(ray_text)) == (
        "SYSTEM_ERROR: Worker unexpectedly exits with a connection error code 2"
    )


def test_max_restarts_is_a_validated_key(tmp_path):
    with pytest.raises(ConfigError, match=r"runner.max_restarts"):
        embodied(tmp_path, "run", "runner.max_restarts=-1")
    with pytest.raises(ConfigError, match=r"cluster.collective_timeout_s"):
        embodied(tmp_path, "run", "cluster.collective_timeout_s=0")


def test_a_bad_input_met_in_a_worker_process_is_one_line_and_not_a_loss(
    tmp_path, capsys, monkeypatch
):
    """An EnvError raised in a worker process (here: the guard every worker call runs under)
    reaches the entry point as the one line it would be in the driver, naming where."""
    from rlcore.cli import run_entry_point
    from rlcore.envs.registry import EnvError
    from rlcore.scheduler.worker import ProcessIdentity, WorkerProcess

    process = WorkerProcess(ProcessIdentity(("env",), 1, 2, 1, 0, (1,), "cpu", {}))

    def step():
        raise EnvError("env.id: env 'Bad' rank 1, step 3 failed: ValueError: shape")

    with pytest.raises(WorkerError) as raised:
        process._guard("env", step)
    assert raised.value.user_error.startswith("env.id: env 'Bad' rank 1, step 3 failed")
    config = embodied(tmp_path, "run", "logger.tensorboard=false")
    assert (
        Supervisor(_raising(raised.value), config, plan_for_config(config))._loss(
            None, raised.value
        )
        is None
    )

    def run(config, plan, models=None):
        raise raised.value

    monkeypatch.setattr(supervisor, "run", run)
    with pytest.raises(SystemExit) as stopped:
        run_entry_point("embodied/cartpole_ppo", [f"runner.output_dir={tmp_path}"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "rlcore: config error: env.id: env 'Bad' rank 1, step 3 failed: "
        "ValueError: shape (env rank 1 on node 0)\n"
    )
