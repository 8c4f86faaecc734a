"""``EnvWorker``: the ``env`` component of embodied runs. It owns this rank's share of the vector
envs (``env.num_envs / ranks``, seeded apart from the other ranks'), the eval envs (rank 0), what
the policy sees of them (running observation normalisation) and learns from (reward scaling), and
the episode statistics. The rollout steps it: directly when the two share a process, through Ray
otherwise (one round trip per step).

Vector envs autoreset on the next step: the step after an episode ends only resets its env, so it
is marked not ``valid``; the observation it starts from is the episode's final observation, whose
value the rollout computes as for any other (``V(s_final)`` bootstraps a truncated episode).

A *tensor env* (ManiSkill's GPU scene; ``rlcore.envs.vector.tensor_device``) is stepped in torch
on its own device: observations, rewards, flags, normalisation statistics and episode sums stay
there, actions go in as tensors, and the policy reads the observations where the simulator
wrote them. Other envs are stepped in numpy on the CPU. Either way what leaves this worker each
step is torch (``Transition``), on the env's device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import torch

from rlcore.config.errors import ConfigError
from rlcore.config.schema import EmbodiedConfig, EnvConfig
from rlcore.envs import SpaceSpec, check_output, make_vector_env, space_spec, tensor_device
from rlcore.envs.normalization import ALL, ObsNormalizer, RewardScaler, replaced
from rlcore.envs.vector import reset_within, step_within
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.workers.files.state_files import load_state, save_state


@dataclass
class Transition:
    """What one env step gives the rollout, ``[N]`` each (this rank's envs)."""

    rewards: torch.Tensor  # scaled when env.normalize_reward
    terminated: torch.Tensor
    truncated: torch.Tensor
    valid: torch.Tensor  # False on the reset step that follows an episode's end
    next_obs: torch.Tensor  # the observations after the step, as the policy sees them


def env_action(spec: SpaceSpec, action: torch.Tensor, numpy: bool = True) -> Any:
    """What the envs receive: Gaussian samples clipped to the space (the policy's log-probs stay
    those of the unclipped sample), indices shifted by the space's ``start``; a numpy array, or
    with ``numpy`` False (a tensor env) a tensor on the action's device."""
    if spec.action_kind == "box":
        low = torch.as_tensor(spec.action_low, device=action.device)
        high = torch.as_tensor(spec.action_high, device=action.device)
        action = torch.clamp(action, low, high)
    elif spec.action_kind == "multi_binary":  # (sampled as 0./1. floats: MultiBinary's int8)
        action = action.to(torch.int8)
    elif spec.action_start is not None:  # index i is the env's action start + i
        start = torch.tensor(spec.action_start, device=action.device, dtype=action.dtype)
        action = action + (start[0] if spec.action_kind == "discrete" else start)
    return action.numpy() if numpy else action


def check_envs_can_be_saved(envs: Any, env_id: str) -> None:
    """Fail before training, not at the first checkpoint, when the envs cannot be pickled
    (subprocess envs, simulators holding native handles such as SAPIEN's)."""
    try:
        cloudpickle.dumps(envs)
    except Exception as error:  # pickling raises whatever the object's reducer raises
        raise ConfigError(
            f"runner.checkpoint_every: the envs of {env_id} cannot be saved in a checkpoint "
            f"({type(error).__name__}: {str(error)[:120]}); use env.checkpoint_state=reseed "
            "(resume then starts fresh episodes), runner.checkpoint_every=0, or "
            "env.vector_mode=sync if the env itself can be pickled"
        ) from None


def check_pickled_envs(env_dir: Path, ranks: list[int]) -> None:
    """The checkpoint's env folder holds the pickled envs of every rank in ``ranks``."""
    if any(not (env_dir / f"envs_rank{r}.pkl").is_file() for r in ranks):
        raise ConfigError(
            f"env.checkpoint_state: pickle, but {env_dir} holds no pickled envs (it was saved "
            "with reseed); resume with env.checkpoint_state=reseed"
        )


# env.step_timeout_s left null, once the envs step outside the driver's own process
APART_STEP_TIMEOUT_S = 300.0


def step_deadline(env: EnvConfig, in_driver: bool) -> float | None:
    """Seconds one vector step may take: ``env.step_timeout_s``, or when it is null, no limit
    while the envs step in the driver's own process (Ctrl-C reaches a stuck env there) and
    ``APART_STEP_TIMEOUT_S`` once they step anywhere else (a Ray worker, or
    ``vector_mode=async`` subprocesses), where an env that blocks would hang the run for good."""
    if env.step_timeout_s is not None:
        return env.step_timeout_s
    return None if in_driver and env.vector_mode != "async" else APART_STEP_TIMEOUT_S


def open_envs(
    config: EmbodiedConfig, rank: int, per_stage: int
) -> tuple[list[Any], Any, torch.device | None]:
    """This rank's vector env of each of the ``rollout.pipeline_stage_num`` stages
    (``per_stage`` envs each), rank 0's eval envs (None on the other ranks), and their device:
    None for numpy envs on the CPU, else a tensor env's device, where everything stays. When one
    cannot be made, those already made are closed."""
    env = config.env
    grouped = config.algorithm.group_size > 1  # (a seed per env: no native vector env)
    stage_envs: list[Any] = []
    eval_envs = None
    try:
        for _ in range(config.rollout.pipeline_stage_num):
            stage_envs.append(
                make_vector_env(
                    env.id, per_stage, env.vector_mode, env.kwargs, seeds_per_env=grouped
                )
            )
        device = tensor_device(stage_envs[0])
        for envs in stage_envs if device is not None else ():
            envs.numpy = False
        if rank == 0:
            eval_envs = make_vector_env(
                env.id, config.runner.eval_episodes, env.vector_mode, env.kwargs
            )
            if device is not None:
                eval_envs.numpy = False
    except BaseException:
        for envs in stage_envs if eval_envs is None else [*stage_envs, eval_envs]:
            envs.close()
        raise
    return stage_envs, eval_envs, device


class EnvWorker:
    """See the module docstring."""

    def __init__(self, ctx: Any, config: EmbodiedConfig) -> None:
        env, run = config.env, config.runner
        self.rank = ctx.rank
        self.env_id = env.id
        self.step_timeout_s = step_deadline(env, ctx.in_driver)
        self.num_envs = env.num_envs // ctx.world_size
        # rollout.pipeline_stage_num: the rank's envs in stages, each a vector env of its own
        # stepped on its own (``step(..., stage=s)``) while the rollout acts on another
        stages = config.rollout.pipeline_stage_num
        per_stage = self.num_envs // stages
        self.parts = (
            [ALL]
            if stages == 1
            else [slice(s * per_stage, (s + 1) * per_stage) for s in range(stages)]
        )
        self.stage_envs, self.eval_envs, self.device = open_envs(config, self.rank, per_stage)
        try:
            self.spec = space_spec(self.stage_envs[0], env.id)
            self.pickled = env.checkpoint_state == "pickle"
            if run.checkpoint_every and self.pickled:
                check_envs_can_be_saved(self.stage_envs, env.id)
        except BaseException:
            self.close()
            raise
        self.obs_norm = (
            ObsNormalizer(self.spec.obs_shape, env.clip_obs, self.device)
            if env.normalize_obs
            else None
        )
        self.reward_scaler = (
            RewardScaler(self.num_envs, config.algorithm.gamma, env.clip_reward, self.device)
            if env.normalize_reward
            else None
        )
        self.seed = run.seed
        self.steps_taken = 0  # vector steps, for the seed of a reseeded resume
        # embodied GRPO (algorithm.group_size > 1): each collection of ``rollout_steps`` steps
        # is one episode per env, the envs of a group reset from one seed
        self.group_size = config.algorithm.group_size
        self.collect_steps = run.rollout_steps
        self.ended: Any = None  # in a collection of episodes: the envs whose episode ended
        self.reports_success = False  # the env's steps carry is_success / success
        self.obs = self._reset_all(run.seed + 1000 * self.rank, f"rank {self.rank}")
        self.prev_done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self.episode_return = self._zeros(self.num_envs)
        self.episode_length = self._zeros(self.num_envs, integer=True)
        self._clear_finished()

    @dispatch(Dispatch.RANK0)
    def space_spec(self) -> SpaceSpec:
        return self.spec

    # training episodes -------------------------------------------------------------------------

    def _reset(self, envs: Any, seed: int | list[int], who: str) -> torch.Tensor:
        """``envs`` reset under the step deadline, their observations checked like a step's."""
        obs, _ = reset_within(envs, seed, self.step_timeout_s, f"env '{self.env_id}' {who}, reset")
        check_output(self.env_id, "reset", obs, None, self.spec.obs_shape)
        return torch.as_tensor(obs, dtype=torch.float32)

    def _reset_all(self, seed: int | list[int], who: str) -> torch.Tensor:
        """Every stage's envs reset, each env with the seed it has without stages (gymnasium
        seeds a vector env's env i with ``seed + i``; a list gives each env its own)."""
        if len(self.stage_envs) == 1:
            return self._reset(self.stage_envs[0], seed, who)
        parts = []
        for envs, part in zip(self.stage_envs, self.parts, strict=True):
            seeds = seed[part] if isinstance(seed, list) else seed + part.start
            parts.append(self._reset(envs, seeds, f"{who}, stage {len(parts)}"))
        return torch.cat(parts)

    def _zeros(self, n: int, integer: bool = False) -> Any:
        """Per-env running sums: numpy on the CPU, or tensors on a tensor env's device."""
        if self.device is None:
            return np.zeros(n, dtype=np.int64 if integer else np.float64)
        return torch.zeros(n, dtype=torch.int64 if integer else torch.float64, device=self.device)

    def _own(self, saved: torch.Tensor) -> Any:
        """A checkpoint's CPU tensor as this worker keeps it (see ``_zeros``)."""
        return saved.numpy().copy() if self.device is None else saved.to(self.device, copy=True)

    def _policy_obs(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        return obs if self.obs_norm is None else self.obs_norm(obs, update)

    def observe(self) -> torch.Tensor:
        """The current observations ``[N, *obs_shape]`` as the policy sees them; normalisation
        statistics take them in (they are about to be acted on). With groups
        (``algorithm.group_size`` > 1) a collection starts here: every env starts an episode,
        the ``group_size`` envs of a group from one seed (``group_seeds``), and a step after an
        env's episode ended is not valid until the next collection."""
        if self.group_size > 1:
            collection = self.steps_taken // self.collect_steps
            seeds = group_seeds(self.seed, self.rank, collection, self.num_envs, self.group_size)
            self.obs = self._reset_all(seeds, f"rank {self.rank}, groups")
            self.ended = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            self.episode_return = self._zeros(self.num_envs)
            self.episode_length = self._zeros(self.num_envs, integer=True)
        return self._policy_obs(self.obs, update=True)

    def step(self, actions: torch.Tensor, last: bool = False, stage: int = 0) -> Transition:
        """Apply ``actions`` ``[N, ...]`` (with ``rollout.pipeline_stage_num`` > 1: to the envs
        of ``stage``, ``[N / stages, ...]``; the stages are stepped in turn, each once per
        step). ``last``: the rollout's final step, whose next observations only give V for
        bootstrapping (normalised without updating the statistics; the next rollout's first
        step takes them in)."""
        part, count = self.parts[stage], len(self.parts)
        which = f"step {self.steps_taken + 1}" + (f", stage {stage}" if count > 1 else "")
        next_obs, reward, term, trunc, info = step_within(
            self.stage_envs[stage],
            env_action(self.spec, actions, numpy=self.device is None),
            self.step_timeout_s,
            f"env '{self.env_id}' rank {self.rank}, {which}",
        )
        self.steps_taken += stage == count - 1  # (a step of every stage is one step)
        check_output(self.env_id, which, next_obs, reward, self.spec.obs_shape)
        terminated, truncated = torch.as_tensor(term), torch.as_tensor(trunc)
        done = terminated | truncated
        valid = ~self.prev_done[part] if self.ended is None else ~self.ended[part]
        if self.ended is not None:
            self.ended = replaced(self.ended, part, self.ended[part] | done.to(self.ended.device))
        rewards = torch.as_tensor(reward, dtype=torch.float32)
        if self.reward_scaler is not None:
            rewards = self.reward_scaler(rewards, done, valid, part)
        success = _success(info)  # (None when the env reports none)
        self.reports_success = self.reports_success or success is not None
        if self.device is None:
            self._track_episodes(reward, done.numpy(), valid.numpy(), part, success)
        else:
            self._track_episodes(reward, done, valid, part, success)
        self.prev_done = replaced(self.prev_done, part, done)
        seen = torch.as_tensor(next_obs, dtype=torch.float32)
        self.obs = replaced(self.obs, part, seen)
        return Transition(rewards, terminated, truncated, valid, self._policy_obs(seen, not last))

    def _track_episodes(
        self, reward: Any, done: Any, valid: Any, part: slice, success: Any = None
    ) -> None:
        """The same arithmetic on numpy arrays or on a tensor env's tensors, for the envs
        ``part`` (these sums never leave the worker: updated in place)."""
        episode_return, episode_length = self.episode_return[part], self.episode_length[part]
        episode_return += reward * valid
        episode_length += valid
        ended = done & valid
        self.finished_return[part] += episode_return * ended
        self.finished_length[part] += episode_length * ended
        self.finished_count[part] += ended
        if success is not None:
            self.finished_success[part] += ended & success
        episode_return[ended], episode_length[ended] = 0.0, 0

    def _clear_finished(self) -> None:
        self.finished_return = self._zeros(self.num_envs)
        self.finished_length = self._zeros(self.num_envs, integer=True)
        self.finished_count = self._zeros(self.num_envs, integer=True)
        self.finished_success = self._zeros(self.num_envs, integer=True)

    def finished_episodes(self) -> dict[str, torch.Tensor]:
        """Per env ``[N]``: summed return and length of the episodes that ended since the last
        call, and their count (sums, so that ranks and envs merge by adding); for an env that
        reports success (``info["is_success"]`` or ``["success"]``), how many of them succeeded."""
        stats = {
            "episode_return_sum": torch.as_tensor(self.finished_return),
            "episode_length_sum": torch.as_tensor(self.finished_length),
            "episode_count": torch.as_tensor(self.finished_count),
        }
        if self.reports_success:
            stats["episode_success_sum"] = torch.as_tensor(self.finished_success)
        self._clear_finished()
        return stats

    # evaluation (rank 0) -----------------------------------------------------------------------

    def eval_reset(self, seed: int) -> torch.Tensor:
        obs = self._reset(self.eval_envs, seed, "eval")
        n = self.eval_envs.num_envs
        self.eval_returns = self._zeros(n)
        self.eval_done = self._zeros(n, integer=True) > 0
        self.eval_success = None  # each episode's, when the env reports success
        return self._policy_obs(obs, update=False)

    def eval_step(self, actions: torch.Tensor) -> tuple[torch.Tensor, np.ndarray | None]:
        """One step of every eval env; the observations, and the returns once all episodes ended
        (each env's first episode; the steps after it ended do not count)."""
        obs, reward, term, trunc, info = step_within(
            self.eval_envs,
            env_action(self.spec, actions, numpy=self.device is None),
            self.step_timeout_s,
            f"eval env '{self.env_id}'",
        )
        check_output(self.env_id, "an eval step", obs, reward, self.spec.obs_shape)
        self.eval_returns += reward * ~self.eval_done
        success = _success(info)
        if success is not None:  # at the step each episode ends
            if self.eval_success is None:
                self.eval_success = self.eval_done & False
            ending = (term | trunc) & ~self.eval_done
            self.eval_success |= ending & success
        self.eval_done |= term | trunc
        seen = self._policy_obs(torch.as_tensor(obs, dtype=torch.float32), update=False)
        if not self.eval_done.all():
            return seen, None
        return seen, self._eval_returns()

    def eval_cut(self) -> tuple[np.ndarray, int]:
        """The returns so far of an evaluation stopped early, and how many episodes it cut."""
        return self._eval_returns(), int((~self.eval_done).sum())

    def eval_success_rate(self) -> float | None:
        """The share of the last evaluation's episodes that ended in success, when the env
        reports it (``info["is_success"]``, gymnasium-robotics' name, or ManiSkill's
        ``info["success"]``); None when it does not."""
        if self.eval_success is None:
            return None
        return float(self.eval_success.sum()) / len(self.eval_success)

    def _eval_returns(self) -> np.ndarray:
        returns = self.eval_returns
        return returns.copy() if self.device is None else returns.cpu().numpy()

    # checkpoints: each rank's carry-over, and its envs when env.checkpoint_state is pickle ------

    @dispatch(Dispatch.ALL)
    def save_checkpoint(self, directory: str) -> None:
        where = Path(directory)
        where.mkdir(parents=True, exist_ok=True)
        state = {
            "obs": self.obs.cpu(),
            "prev_done": self.prev_done.cpu(),
            "episode_return": _cpu(self.episode_return),
            "episode_length": _cpu(self.episode_length),
            "finished": {
                "return": _cpu(self.finished_return),
                "length": _cpu(self.finished_length),
                "count": _cpu(self.finished_count),
                "success": _cpu(self.finished_success),
            },
            "obs_norm": _state(self.obs_norm),
            "reward_scaler": _state(self.reward_scaler),
            "steps_taken": self.steps_taken,
        }
        save_state(state, where / f"rank{self.rank}.pt")
        if self.pickled:  # (one vector env, or with stages the list of them)
            envs = self.stage_envs[0] if len(self.stage_envs) == 1 else self.stage_envs
            (where / f"envs_rank{self.rank}.pkl").write_bytes(cloudpickle.dumps(envs))

    @dispatch(Dispatch.ALL)
    def load_checkpoint(self, directory: str) -> None:
        where = Path(directory)
        state = load_state(where / f"rank{self.rank}.pt")
        self.steps_taken = state["steps_taken"]
        pickled = where / f"envs_rank{self.rank}.pkl"
        if self.pickled:
            check_pickled_envs(where, [self.rank])
            # The only load in rlcore that runs pickled code: opted into with
            # env.checkpoint_state=pickle, for checkpoints from a trusted source.
            loaded = cloudpickle.loads(pickled.read_bytes())
            loaded = loaded if isinstance(loaded, list) else [loaded]
            if len(loaded) != len(self.stage_envs):
                raise ConfigError(
                    f"rollout.pipeline_stage_num: {pickled} holds the envs of "
                    f"{len(loaded)} stage(s), and this run has {len(self.stage_envs)}; resume "
                    f"with rollout.pipeline_stage_num={len(loaded)}, or with "
                    "env.checkpoint_state=reseed"
                )
            for envs in self.stage_envs:
                envs.close()
            self.stage_envs = loaded
            self.obs = state["obs"].to(self.device or "cpu")
            self.prev_done = state["prev_done"].to(self.device or "cpu")
            self.episode_return = self._own(state["episode_return"])
            self.episode_length = self._own(state["episode_length"])
        else:
            # Fresh episodes from a seed of this rank and point in the run: reproducible, but
            # not the episodes an unbroken run would have gone on with.
            reseed = self.seed + 1000 * self.rank + 7_919 * self.steps_taken
            self.obs = self._reset_all(reseed, f"rank {self.rank}")
            self.prev_done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            self.episode_return = self._zeros(self.num_envs)
            self.episode_length = self._zeros(self.num_envs, integer=True)
        self.finished_return = self._own(state["finished"]["return"])
        self.finished_length = self._own(state["finished"]["length"])
        self.finished_count = self._own(state["finished"]["count"])
        if "success" in state["finished"]:  # (checkpoints before success was counted: none)
            self.finished_success = self._own(state["finished"]["success"])
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(state["obs_norm"])
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])

    @dispatch(Dispatch.ALL)
    def close(self) -> None:
        for envs in self.stage_envs:
            envs.close()
        if self.eval_envs is not None:
            self.eval_envs.close()


def group_seeds(seed: int, rank: int, collection: int, num_envs: int, size: int) -> list[int]:
    """The reset seed of each of a rank's ``num_envs`` envs for its ``collection``-th collection
    of episodes: one per group of ``size`` consecutive envs, distinct over groups, ranks and
    collections (``numpy.random.SeedSequence`` of the three)."""
    drawn = np.random.SeedSequence([seed, rank, collection]).generate_state(num_envs // size)
    return [int(s) for s in np.repeat(drawn, size)]


def _success(info: dict) -> Any:
    """Per env, whether its step reported success, as booleans of the info's kind (numpy, or a
    tensor env's tensors); None when the env reports none."""
    for name in ("is_success", "success"):
        if name in info:
            values, given = info[name], info.get(f"_{name}")
            values = values.bool() if isinstance(values, torch.Tensor) else values.astype(bool)
            return values if given is None else values & given
    return None


def _state(stats: Any) -> dict | None:
    return None if stats is None else stats.state_dict()


def _cpu(values: Any) -> torch.Tensor:
    """A running sum (numpy, or a tensor on any device) as a CPU tensor for a checkpoint."""
    return values.cpu() if isinstance(values, torch.Tensor) else torch.from_numpy(values)
