"""Components the scheduler tests start inside workers (sent to Ray by value)."""

import itertools
import os

import gymnasium as gym
import numpy as np
import ray
import torch
import torch.distributed as dist


class Probe:
    """Reports, from inside the worker, where it runs."""

    def __init__(self, ctx):
        self.ctx = ctx

    def where(self):
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "rank": int(os.environ["RANK"]),
            "world_size": int(os.environ["WORLD_SIZE"]),
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "pid": os.getpid(),
        }

    def fail(self, message):
        raise ValueError(message)


class Model:
    """A component that owns weights, for weight sync."""

    def __init__(self, ctx, seed, width=8):
        self.ctx = ctx
        self.net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 2))
        # LLM weights are bf16, and models carry 0-dim buffers: sync must move both exactly.
        self.net.register_buffer("scale", torch.zeros(3, dtype=torch.bfloat16))
        self.net.register_buffer("step", torch.zeros((), dtype=torch.int64))
        self.reseed(seed)

    def reseed(self, seed):
        """Overwrite every weight with draws from ``seed``, as a training step changes them."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
            self.net.scale.copy_(torch.randn(3, generator=gen))
            self.net.step.fill_(seed)

    def weights(self):
        return self.net.state_dict()

    def snapshot(self):
        return {k: v.clone() for k, v in self.net.state_dict().items()}

    def dist_env(self):
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
        return {k: os.environ.get(k) for k in keys}

    def echo(self, shard, tag=""):
        return (self.ctx.rank, shard, tag)

    def rank_sum(self):
        value = torch.tensor([float(self.ctx.rank)])
        dist.all_reduce(value, group=self.ctx.group)
        return value.item()


class PushedModel(Model):
    """A receiver whose weights live elsewhere (as an SGLang engine's do): it describes them and
    takes each bucket as named tensors, which it stores apart from its own tensors."""

    pushes_weights = True

    def __init__(self, ctx, seed, width=8):
        super().__init__(ctx, seed, width)
        self.engine = type("Engine", (), {"device": torch.device("cpu")})()
        self.buckets = 0

    def weight_layout(self):
        from rlcore.scheduler.weight_buckets import layout

        return layout(self.net.state_dict())

    def load_bucket(self, bucket):
        self.buckets += 1
        with torch.no_grad():
            for name, tensor in bucket.items():
                self.net.state_dict()[name].copy_(tensor)

    def weights(self):
        raise AssertionError("a pushed receiver's tensors are never copied into directly")

    def snapshot(self):
        return {k: v.clone() for k, v in self.net.state_dict().items()}

    def buckets_loaded(self):
        return self.buckets


class StuckInC(gym.Env):
    """A one-number env whose 3rd step spins in C code that holds the GIL (a builtin ``sum``
    over 10^13 ones, about an hour): no timer signal reaches Python until it returns."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.calls = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.calls += 1
        if self.calls == 3:
            sum(itertools.repeat(1, 10**13))
        return np.zeros(1, np.float32), 0.0, False, False, {}


class EnvStepper:
    """Steps a ``StuckInC`` vector env in the worker's own process, as an env worker does."""

    def __init__(self, ctx):
        self.ctx = ctx

    def step_stuck_env(self, timeout_s, grace_s):
        from rlcore.envs.vector import reset_within, step_within
        from rlcore.scheduler import last_words

        last_words.WATCHDOG_GRACE_S = grace_s
        envs = gym.vector.SyncVectorEnv([StuckInC])
        reset_within(envs, 0, timeout_s, "reset")
        for step in range(5):
            step_within(envs, np.zeros(1, np.int64), timeout_s, f"step {step}")
