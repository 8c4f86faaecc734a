"""The placement profiler: the tracer's accounting against a hand-set clock, a calibration of
the CartPole config in one process, and the link probe on the session's Ray."""

import dataclasses
import json
import math

import pytest
import torch

from rlcore.config import load_config
from rlcore.placement.cost import Candidate, Link, predict
from rlcore.runners import profiling
from rlcore.scheduler import tracing


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_tracer_counts_own_seconds_callers_and_bytes(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(tracing.time, "perf_counter", clock)
    tracer = tracing.Tracer()

    class Env:
        def step(self, action):
            clock.now += 2.0
            return torch.zeros(5)  # 20 bytes back

    class Rollout:
        def __init__(self, env):
            self.env = env

        def collect(self):
            clock.now += 1.0
            for _ in range(2):
                self.env.step(torch.zeros(10))  # 40 bytes each way in
            clock.now += 0.5
            return {"obs": torch.zeros(3, 2)}  # 24 bytes

    env = tracing.Traced(Env(), "env", tracer)
    rollout = tracing.Traced(Rollout(env), "rollout", tracer)
    with tracing.in_stage("collect"):
        rollout.collect()
    rollout.collect()  # outside any stage
    got = {k: (t.seconds, t.calls, t.bytes) for k, t in tracer.tallies.items()}
    assert got[("collect", "rollout", "driver")] == (1.5, 1, 24)
    assert got[("collect", "env", "rollout")] == (4.0, 2, 120)
    assert got[("other", "rollout", "driver")] == (1.5, 1, 24)
    assert rollout.env is env  # attributes pass through unwrapped


def test_settings_take_turns_iteration_by_iteration():
    # two settings (thread counts, say) alternate from the first warm-up on, so whatever else the
    # machine does falls on both; each is averaged over its own measured iterations only
    seen = []

    class Runner:
        def iterate(self, i):
            seen.append((i, turn[0]))
            return {"time/update_s": 0.001 * (1 if turn[0] == "a" else 3)}

    turn = [None]
    turns = [lambda: turn.__setitem__(0, "a"), lambda: turn.__setitem__(0, "b")]
    quick = profiling.Measure(iterations=3, warmup=2, min_seconds=0)
    (a, na), (b, nb) = profiling._iterate_turns(Runner(), quick, turns)
    assert [who for _, who in seen] == ["a", "b"] * 5  # 2 warm-up rounds, 3 measured
    assert [i for i, _ in seen] == list(range(1, 11))
    assert (na, nb) == (3, 3)
    assert a["update"] == pytest.approx(0.001) and b["update"] == pytest.approx(0.003)
    assert 0.0 <= a["other"] < 0.01  # what the call took beyond its stages


CARTPOLE = ["cluster.devices_per_node=2"]
QUICK = profiling.Measure(iterations=2, warmup=1, min_seconds=0)  # (the suite's time)


@pytest.fixture(scope="module")
def cartpole_profile():
    """The CartPole config's one-process profile (1 warm-up, 2 measured iterations)."""
    config = load_config("embodied/cartpole_ppo", CARTPOLE)
    return config, profiling.calibrate(config, (1,), Link(1e-3, 1e9), QUICK)[1]


def test_cartpole_calibration_in_one_process(cartpole_profile):
    config, p = cartpole_profile
    assert set(p.stages) >= {"sync", "collect", "advantages", "update", "other"}
    assert p.stages["other"] >= 0.0  # the iteration's seconds outside the stopwatch's stages
    collect = p.work["collect"]
    assert collect["rollout"].caller == "driver" and collect["env"].caller == "rollout"
    # the parts' own seconds fit inside the stage that timed them
    assert collect["rollout"].seconds + collect["env"].seconds <= p.stages["collect"]
    steps, envs = config.runner.rollout_steps, config.env.num_envs
    assert collect["env"].calls >= steps  # a step call at least per step
    # the update carries at least the batch's observations (4 float32 each in CartPole)
    assert p.work["update"]["actor"].bytes >= steps * envs * 4 * 4
    batch = steps * envs
    assert p.grad_steps == {
        "actor": config.actor.ppo_epochs * batch // config.actor.ppo_mini_batch_size
    }
    assert config.actor.model.shared_backbone  # one trunk under two names: counted once
    params = 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2 + 64 + 1  # the MLP's float32 weights
    assert p.weight_bytes == pytest.approx(4 * params, rel=0.05)
    # one process: the prediction is the measured iteration
    one = predict(Candidate(((("actor", "rollout", "env"), (0,)),)), p)
    assert one.iteration_s == pytest.approx(sum(p.stages.values()))


def test_profile_round_trip_and_fingerprint(tmp_path, cartpole_profile):
    config, p = cartpole_profile
    other = load_config("embodied/cartpole_ppo", ["algorithm.gamma=0.9"])
    layout = load_config("embodied/cartpole_ppo", ["runner.max_staleness=0", "runner.seed=7"])
    assert profiling.fingerprint(config) != profiling.fingerprint(other)
    assert profiling.fingerprint(config) != profiling.fingerprint(layout)  # the seed counts
    facts = profiling.machine()  # the fingerprint's machine: what changes kernels and seconds
    assert set(facts) == {"cpus", "cpu", "simd", "gpu", "torch"}
    assert set(facts["simd"]) <= set(profiling.SIMD)
    spread = load_config("embodied/cartpole_ppo", ["cluster.devices_per_node=1"])
    assert profiling.fingerprint(config) == profiling.fingerprint(spread)  # the cluster not
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profiling.to_json({1: p}, config)))
    assert profiling.load_profile(path, config) == {1: p}
    assert profiling.load_profile(path, other) is None  # another config: measured anew


def test_link_probe(local_ray):
    config = load_config("embodied/cartpole_ppo", ["cluster.devices_per_node=2"])
    link = profiling.measure_link(config, payload_mib=4, calls=6)
    assert 0 < link.latency_s < 1.0 and link.bytes_per_s > 1e6


def test_calls_between_processes_measured_with_this_configs_batches(local_ray, cartpole_profile):
    config, one = cartpole_profile
    assert profiling.apart_layout(config) == {"actor": "0", "rollout": "1", "env": "0"}
    transit, call_cpu = profiling.calibrate_apart(config, one, QUICK)
    # every stage whose calls cross adds time to it (how much depends on the machine's load:
    # only that it is there, and finite)
    assert {"collect", "update"} <= set(transit)
    assert 0.0 < transit["collect"] < math.inf  # the rollout calls the env in another process
    assert 0.0 <= transit["update"] < math.inf
    assert {"env", "rollout", "actor", "driver"} <= set(call_cpu)
    assert all(0.0 <= cpu < math.inf for cpu in call_cpu.values())
    # every component on both slots: what data parallelism adds, per stage, on 2 ranks
    measured = dataclasses.replace(one, transit=transit, call_cpu=call_cpu, cores=2)
    parallel, ranks = profiling.calibrate_parallel(config, measured, QUICK)
    assert ranks == 2 and {"collect", "update"} <= set(parallel)
    assert all(0.0 <= extra < math.inf for extra in parallel.values())
