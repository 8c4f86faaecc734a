"""The config sections both modes share: the algorithm (RLinf names, verl's KL options), the
cluster, the loop's common keys, PPO update sizes and the loggers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlcore.algorithms.aggregation import AggMode
from rlcore.algorithms.kl import KLKind
from rlcore.algorithms.loss import PPOLossSettings
from rlcore.algorithms.policy_loss import get_policy_loss_fn
from rlcore.config.fields import REQUIRED, key, section


@dataclass(kw_only=True, frozen=True)
class KLCtrlConfig:
    type: Literal["fixed", "adaptive"] = key(
        "fixed", doc="in-reward KL coefficient controller: fixed, or adaptive (Ziegler et al.)"
    )
    kl_coef: float = key(
        0.001, doc="(initial) coefficient of the in-reward KL penalty", range=">= 0"
    )
    horizon: int = key(
        10000, doc="adaptive controller: samples over which the coefficient adapts", range=">= 1"
    )
    target_kl: float = key(
        0.1, doc="adaptive controller: the per-token KL it steers towards", range="> 0"
    )


@dataclass(kw_only=True, frozen=True)
class PolicyLossOptions:
    """The options of the policy losses that read them, under verl's names (its
    ``actor.policy_loss.*``, and ``actor.tau_pos`` / ``tau_neg``). A loss reads those named by
    its signature; a value other than the default for a loss that does not read it is refused."""

    clip_cov_ratio: float = key(
        0.0002,
        doc="clip_cov: share of valid tokens whose gradient is cut (at least one)",
        range="(0, 1]",
    )
    clip_cov_lb: float = key(
        1.0, doc="clip_cov: a token can be cut when its covariance is above this", range="any"
    )
    clip_cov_ub: float = key(
        5.0, doc="clip_cov: a token can be cut when its covariance is below this", range="any"
    )
    kl_cov_ratio: float = key(
        0.0002,
        doc="kl_cov: share of valid tokens (largest covariance first, at least one) penalised",
        range="(0, 1]",
    )
    ppo_kl_coef: float = key(
        0.1, doc="kl_cov: weight of the |log_prob - old_log_prob| penalty", range=">= 0"
    )
    tau_pos: float = key(1.0, doc="sapo: gate temperature where the advantage is > 0", range="> 0")
    tau_neg: float = key(
        1.05, doc="sapo: gate temperature where the advantage is <= 0", range="> 0"
    )
    dro_beta: float | None = key(
        None,
        doc="dro: weight β of the β/2 (log_prob - old_log_prob)² penalty; dro needs it set",
        range="> 0",
    )


@dataclass(kw_only=True, frozen=True)
class FilterGroupsConfig:
    enable: bool = key(
        False,
        doc="drop each group whose responses all score alike (no signal for a group baseline) "
        "and generate more prompts until data.train_batch_size groups are kept (DAPO)",
    )
    metric: Literal["acc", "score"] = key(
        "acc", doc="what must differ within a kept group: acc = the verdicts, score = the rewards"
    )
    max_num_gen_batches: int = key(
        10,
        doc="generation batches one iteration may take before the run stops, naming the data "
        "as too easy or too hard; 0 = no limit",
        range=">= 0",
    )


@dataclass(kw_only=True, frozen=True)
class RolloutCorrectionConfig:
    """verl's ``algorithm.rollout_correction``: the gap between the policy that sampled a batch
    (the rollout's recorded log-probs) and the trainer's when it consumes it
    (``rlcore/algorithms/rollout_correction.py``, docs/async.md)."""

    rollout_is: Literal["token", "sequence"] | None = key(
        None,
        doc="importance weights exp(old_log_prob - rollout_log_prob) on the policy loss: per "
        "token (decoupled PPO), per sequence (their product), or null (none)",
    )
    rollout_is_threshold: float | str = key(
        2.0,
        doc="the weights' truncation (TIS: capped at this number), or 'lower_upper' (IcePop: "
        "zeroed outside [lower, upper])",
        range="> 0",
    )
    rollout_is_batch_normalize: bool = key(
        False, doc="divide the weights by their batch mean (after truncation)"
    )
    rollout_rs: str | None = key(
        None,
        doc="rejection: tokens or responses leave the mask when a divergence passes "
        "rollout_rs_threshold; comma-separated options of token_k1/k2/k3, seq_sum_k1/k2/k3, "
        "seq_mean_k1/k2/k3, seq_max_k2/k3 (all must pass); null = none",
    )
    rollout_rs_threshold: float | str | None = key(
        None,
        doc="rollout_rs's threshold, one for all options or one per option (comma-separated); "
        "a k1 option takes a ratio u for [1/u, u] or 'lower_upper'",
        range="> 0",
    )
    bypass_mode: bool | None = key(
        None,
        doc="true: the rollout's recorded log-probs are the old ones (no recompute pass; PPO's "
        "ratio is taken against the policy that sampled); false: the actor recomputes them and "
        "the rollout_is / rollout_rs corrections apply (decoupled); null: true in an "
        "asynchronous reasoning run (runner.max_staleness >= 1) that sets none of rollout_is, "
        "rollout_rs and actor.recompute_log_probs and whose estimator needs no recompute pass "
        "(the correction measured best in docs/async.md), false otherwise",
    )
    loss_type: Literal["ppo_clip", "reinforce"] = key(
        "ppo_clip",
        doc="bypass mode's policy loss: ppo_clip (algorithm.policy_loss against the rollout's "
        "log-probs); verl's reinforce is not built and refused",
    )

    @property
    def corrects(self) -> bool:
        """Weights or rejection apply (decoupled mode)."""
        return self.rollout_is is not None or self.rollout_rs is not None


@dataclass(kw_only=True, frozen=True)
class AlgorithmConfig:
    adv_type: str = key(
        "gae",
        doc="advantage estimator: gae, grpo, rloo, reinforce_plus_plus, "
        "reinforce_plus_plus_baseline, and verl's grpo_passk, opo, gpg, remax, grpo_vectorized, "
        "rloo_vectorized, optimal_token_baseline, tir_optimal_token_baseline, gdpo (reasoning; see "
        "docs/algorithms.md), or one added with register_advantage",
    )
    policy_loss: str = key(
        "ppo",
        doc="policy loss: ppo (= vanilla; clipped surrogate, dual-clip), gspo, gpg, clip_cov, "
        "kl_cov, cispo, sapo, geo_mean, dppo_tv, dppo_kl, dro (docs/algorithms.md), or one added "
        "with register_policy_loss",
    )
    policy_loss_options: PolicyLossOptions = section(
        PolicyLossOptions,
        doc="the policy losses' own options, verl's names; set only those the chosen loss reads",
    )
    loss_agg_func: AggMode = key(
        "token-mean", doc="how per-token losses become a scalar (see docs/algorithms.md)"
    )
    normalize_advantages: bool = key(
        True, doc="whiten advantages over the batch (valid steps) before the policy loss"
    )
    norm_adv_by_std: bool = key(
        True,
        doc="grpo: divide by the group std; false gives s - mean (Dr. GRPO)",
        modes=("reasoning",),
    )
    gdpo_reward_keys: list[str] = key(
        factory=list,
        doc="gdpo: the reward's components, each normalised within its group apart (kinds gsm8k "
        "and math give score, correct and format; a custom function, each number in the dict "
        "it returns; overlong_penalty with reward.overlong_buffer)",
        modes=("reasoning",),
    )
    gdpo_reward_weights: list[float] | None = key(
        None,
        doc="gdpo: the weight of each gdpo_reward_keys component in the sum; null = 1 each",
        range="any",
        modes=("reasoning",),
    )
    group_size: int = key(
        1,
        doc="reasoning: responses sampled per prompt (verl's rollout.n); embodied: envs reset "
        "from one seed, each collection one episode per env (RLinf's embodied GRPO); compared "
        "by group-based estimators",
        range=">= 1",
    )
    gamma: float = key(1.0, doc="discount factor γ", range="[0, 1]")
    gae_lambda: float = key(
        1.0, doc="GAE λ: 0 is one-step TD, 1 is Monte Carlo minus the value", range="[0, 1]"
    )
    bootstrap_type: Literal["standard", "always"] = key(
        "standard",
        doc="where V(s_final) bootstraps an episode's last step (RLinf's key): standard where "
        "a time limit cut it; always where it terminated too (ManiSkill's and RLinf's PPO on "
        "tasks that end on success, whose dense reward would otherwise make success cost the "
        "rewards after it)",
        modes=("embodied",),
    )
    clip_ratio_low: float = key(
        0.2, doc="PPO clip: the ratio is kept >= 1 - clip_ratio_low", range="[0, 1)"
    )
    clip_ratio_high: float = key(
        0.2, doc="PPO clip: the ratio is kept <= 1 + clip_ratio_high", range=">= 0"
    )
    clip_ratio_c: float | None = key(
        None,
        doc="dual-clip bound c > 1 on negative-advantage tokens; null turns dual-clip off "
        "(loss_mode dppo_tv and dppo_kl: the importance weight's truncation; null = 3, as verl)",
        range="> 1",
    )
    value_clip: float | None = key(
        0.2,
        doc="value predictions are clipped to old ± value_clip; null turns clipping off",
        range="> 0",
    )
    huber_delta: float | None = key(
        None, doc="Huber δ for the value loss; null gives squared error", range="> 0"
    )
    value_coef: float = key(
        0.5,
        doc="weight of the value loss in the actor-critic's one backward pass (embodied)",
        range=">= 0",
        modes=("embodied",),
    )
    entropy_bonus: float = key(
        0.0, doc="weight of the entropy bonus subtracted from the loss", range=">= 0"
    )
    use_kl_in_reward: bool = key(
        False,
        doc="subtract kl_ctrl coefficient * KL(policy || reference) from the reward",
        modes=("reasoning",),
    )
    kl_penalty: KLKind = key(
        "kl", doc="KL estimator for the in-reward penalty", modes=("reasoning",)
    )
    kl_ctrl: KLCtrlConfig = section(
        KLCtrlConfig, doc="in-reward KL coefficient controller", modes=("reasoning",)
    )
    use_kl_loss: bool = key(
        False,
        doc="add kl_loss_coef * KL(policy || reference) to the actor loss",
        modes=("reasoning",),
    )
    kl_loss_coef: float = key(
        0.001, doc="coefficient of the KL loss", range=">= 0", modes=("reasoning",)
    )
    kl_loss_type: KLKind = key(
        "low_var_kl", doc="KL estimator for the KL loss", modes=("reasoning",)
    )
    filter_groups: FilterGroupsConfig = section(
        FilterGroupsConfig,
        doc="DAPO's dynamic sampling: train on groups whose responses differ only",
        modes=("reasoning",),
    )
    rollout_correction: RolloutCorrectionConfig = section(
        RolloutCorrectionConfig,
        doc="off-policy correction between the rollout's policy and the trainer's (verl's "
        "names): importance weights, rejection, or the rollout's log-probs as the old ones "
        "(embodied: token-level weights only)",
    )

    @property
    def kl_loss_on(self) -> bool:
        """The actor's loss has a reference-KL term that is not 0."""
        return self.use_kl_loss and self.kl_loss_coef > 0

    @property
    def kl_reward_on(self) -> bool:
        """The reward has a reference-KL penalty that is not 0 (the adaptive controller scales
        its coefficient, so one that starts at 0 stays 0)."""
        return self.use_kl_in_reward and self.kl_ctrl.kl_coef > 0

    def ppo_loss_settings(self) -> PPOLossSettings:
        """The PPO loss's settings from these keys, bound once by each actor (both modes)."""
        return PPOLossSettings(
            policy_loss=get_policy_loss_fn(self.policy_loss, vars(self.policy_loss_options)),
            clip_ratio_low=self.clip_ratio_low,
            clip_ratio_high=self.clip_ratio_high,
            clip_ratio_c=self.clip_ratio_c,
            loss_agg_func=self.loss_agg_func,
            entropy_bonus=self.entropy_bonus,
            use_kl_loss=self.kl_loss_on,
            kl_loss_coef=self.kl_loss_coef,
            kl_loss_type=self.kl_loss_type,
            value_coef=self.value_coef,
            value_clip=self.value_clip,
            huber_delta=self.huber_delta,
        )


@dataclass(kw_only=True, frozen=True)
class ClusterConfig:
    num_nodes: int = key(1, doc="machines in the Ray cluster", range=">= 1")
    devices_per_node: int | None = key(
        None,
        doc="device slots per node; null = detected (GPUs per node, or CPU cores without GPUs)",
        range=">= 1",
    )
    device: Literal["auto", "cuda", "cpu"] = key(
        "auto", doc="what a device slot is: auto = cuda when a GPU is visible, else cpu"
    )
    address: str | None = key(
        None,
        doc="null = start a local Ray; 'auto' or 'host:port' = join a cluster started with "
        "`ray start`",
    )
    network_interface: str | None = key(
        None,
        doc="a cluster run (cluster.address set): the network interface (e.g. eth0) that the "
        "torch.distributed stores, gloo and NCCL bind to on every node; null = the address each "
        "node's Ray uses (`ray start --node-ip-address`). A local run binds all of them, and "
        "Ray, to 127.0.0.1, and refuses this key",
    )
    component_placement: dict[str, str | int] | Literal["auto"] | None = key(
        None,
        doc="components -> device ranks (docs/placement.md); null = every component the "
        "config needs in one process on slot 0, as the shipped configs run; auto = the "
        "placement advisor's pick for this cluster at the config's runner.max_staleness (its "
        "fusion, env stages and torch threads too), from the config's kept profile, measured "
        "first where there is none (rlcore placement --advise)",
    )
    fuse_collocated: bool = key(
        True, doc="components placed on the same slots share one process per rank"
    )
    collective_timeout_s: float = key(
        600.0,
        doc="seconds a rank waits in a collective (an all-reduce, a weight broadcast) for its "
        "peers before failing, so a dead or hung peer never hangs the others (verl's "
        "nccl_timeout)",
        range="> 0",
    )
    worker_timeout_s: float = key(
        1800.0,
        doc="the driver waits at least this long for a worker's answer (10x the slowest such "
        "call before, if longer; a method's first call at least 600 s); past it the worker is "
        "stopped or hung and is restarted from the newest checkpoint as a dead one is "
        "(runner.max_restarts)",
        range="> 0",
    )


@dataclass(kw_only=True, frozen=True)
class SyncConfig:
    bucket_mb: float = key(
        512.0,
        doc="the actor's weights go to the rollout in buckets of this many MiB: a sharded "
        "(fsdp2) model is gathered a bucket at a time, so no process holds a second whole copy, "
        "and a sync between processes sends one message per bucket (verl's "
        "update_weights_bucket_megabytes); a tensor larger than a bucket goes alone",
        range="> 0",
    )

    @property
    def bucket_bytes(self) -> int:
        return max(1, int(self.bucket_mb * (1 << 20)))


@dataclass(kw_only=True, frozen=True)
class RunnerConfig:
    """The training loop, one section for both modes: a mode's own keys say so (``modes``), and
    each mode's top level gives its own defaults where they differ (``section(defaults=)``)."""

    dry_run: bool = key(
        False, doc="validate the config, print the placement plan and exit without starting"
    )
    seed: int = key(
        1,
        doc="seeds torch, the envs or the data order, and the sampling (at most 2^31 - 1: each "
        "rank's and stream's seed adds an offset, and numpy's and torch's seeds are bounded)",
        range="[0, 2147483647]",
    )
    output_dir: str = key("outputs", doc="runs are written to OUTPUT_DIR/RUN_NAME/", path=True)
    run_name: str | None = key(
        None,
        doc="the run's folder name; null = NAME-SEED-TIMESTAMP, NAME the env id (embodied) or the "
        "first training file's (reasoning; 'arith' for the synthetic task)",
    )
    resume: Literal["never", "auto"] = key(
        "never",
        doc="auto: continue from the newest complete checkpoint of OUTPUT_DIR/RUN_NAME when it "
        "has one, else start there (so a job scheduler can re-launch the same command); needs "
        "runner.run_name",
    )
    resume_dir: str | None = key(
        None,
        doc="continue from a checkpoint (RUN/checkpoints/iter_K) or a run folder's newest one",
        path=True,
    )
    resume_changed_data: bool = key(
        False,
        doc="resume although a data file changed since the checkpoint (refused by default, "
        "naming the file; the summary lists them)",
        modes=("reasoning",),
    )
    checkpoint_every: int = key(
        50,
        doc="iterations between checkpoints (and one at the end, so a finished run keeps its "
        "trained weights); 0 = none",
        range=">= 0",
    )
    keep_checkpoints: int | None = key(
        3,
        doc="checkpoints kept in the run folder: the oldest is removed once a newer one is "
        "complete; null = keep all",
        range=">= 1",
    )
    torch_threads: int = key(
        1,
        doc="torch CPU threads per process, set once per process (embodied: 1 is fastest for "
        "small MLPs here; reasoning: 2 on 2 cores for one process, 1 for several)",
        range=">= 1",
    )
    progress: bool = key(True, doc="show a progress bar on stderr")
    max_skipped_steps: int = key(
        5,
        doc="optimiser steps in a row that may have a NaN or infinite gradient (each is skipped, "
        "counted in the summary's skipped_steps); one more ends the run, naming the component",
        range=">= 0",
    )
    max_restarts: int = key(
        3,
        doc="when a worker process dies (killed, out of memory, its node lost) or a collective "
        "times out, stop every worker, start them again and resume from the newest complete "
        "checkpoint (from the start when there is none), at most this many times; 0 = the run "
        "ends with the error. Components in the driver's own process are not restarted",
        range=">= 0",
    )
    max_staleness: int = key(
        0,
        doc="asynchronous training: the rollout generates (reasoning) or collects (embodied) the "
        "next batches with the weights it has while the actor (and critic) train, and a batch is "
        "trained on only while its weights are at most this many actor updates old (AReaL's "
        "max_head_offpolicyness); 0 = every stage in lockstep. Needs the rollout in a process "
        "apart from the actor's. PPO's ratio is then taken against the log-probs of the policy "
        "that sampled (reasoning: algorithm.rollout_correction.bypass_mode null means bypass "
        "here, unless a correction is set); docs/async.md",
        range=">= 0",
    )
    # embodied
    rollout_steps: int = key(
        128, doc="steps taken in each env per iteration", range=">= 1", modes=("embodied",)
    )
    total_env_steps: int = key(
        100_000,
        doc="env steps to train for, summed over envs",
        range=">= 1",
        modes=("embodied",),
    )
    eval_every: int = key(
        10,
        doc="iterations between deterministic evaluations (0 = at the end)",
        range=">= 0",
        modes=("embodied",),
    )
    eval_episodes: int = key(10, doc="episodes per evaluation", range=">= 1", modes=("embodied",))
    eval_max_steps: int = key(
        27_000,
        doc="steps after which an evaluation stops the episodes still running, counting their "
        "returns so far, with a line (27000: Atari's usual cap)",
        range=">= 1",
        modes=("embodied",),
    )
    stop_at_threshold: bool = key(
        False,
        doc="end the run at the first evaluation whose mean reaches env.solved_threshold "
        "(never, when no threshold is set); the learning-rate schedule still spans "
        "total_env_steps",
        modes=("embodied",),
    )
    # reasoning
    total_iterations: int = key(
        20,
        doc="PPO iterations (one batch of prompts each)",
        range=">= 1",
        modes=("reasoning",),
    )
    val_every: int = key(
        0,
        doc="iterations between greedy validations (0 = before and after)",
        range=">= 0",
        modes=("reasoning",),
    )
    val_n: int = key(
        0,
        doc="besides the greedy answer, responses sampled per validation prompt (at "
        "rollout.val_temperature, val_top_p, val_top_k), for val/mean@n and val/pass@k "
        "(k = 1 and n, unbiased); 0 = greedy accuracy only (verl's val_kwargs.n)",
        range=">= 0",
        modes=("reasoning",),
    )
    log_val_generations: int = key(
        16,
        doc="validation prompts whose generations (prompt, response, score, verdict) are "
        "written to RUN/validation/iter_NNNNNN.jsonl at each validation; 0 = none",
        range=">= 0",
        modes=("reasoning",),
    )


# The reasoning mode's runner defaults, where they differ from the embodied ones above.
REASONING_RUNNER_DEFAULTS = {"torch_threads": 2, "checkpoint_every": 10}


@dataclass(kw_only=True, frozen=True)
class OptimConfig:
    """The optimiser and its learning-rate schedule, one section for every trained component
    (``actor.optim``, ``critic.optim``); each use gives its own defaults
    (``EMBODIED_OPTIM`` and the reasoning ones below). The schedule: a linear warm-up over
    ``warmup_steps`` optimiser steps, times the ``decay`` over the run's updates (one per
    iteration, as SB3, CleanRL and verl anneal): ``torch.optim.lr_scheduler.LambdaLR``."""

    name: Literal["adam", "adamw"] = key(
        "adamw",
        doc="adam: torch.optim.Adam (its weight_decay is an L2 term in the gradient); adamw: "
        "AdamW (decoupled weight decay)",
    )
    lr: float = key(1e-6, doc="learning rate (the peak, after warm-up)", range="> 0")
    eps: float = key(1e-8, doc="the optimiser's epsilon", range="> 0")
    weight_decay: float = key(0.0, doc="weight decay", range=">= 0")
    warmup_steps: int = key(
        0,
        doc="optimiser steps over which the learning rate rises linearly to lr (the k-th step "
        "at lr x k / warmup_steps); 0 = none",
        range=">= 0",
    )
    decay: Literal["constant", "linear", "cosine"] = key(
        "constant",
        doc="the learning rate over the run, after warm-up: constant; linear: to 0 at the end; "
        "cosine: half a cosine to 0 at the end. It moves once per update (iteration)",
    )
    max_grad_norm: float | None = key(
        1.0, doc="clip the gradient norm to this; null = no clip", range="> 0"
    )


EMBODIED_OPTIM = {"name": "adam", "lr": 3e-4, "eps": 1e-5, "max_grad_norm": 0.5}
REASONING_ACTOR_OPTIM = {"lr": 1e-6}  # verl's actor default
REASONING_CRITIC_OPTIM = {"lr": 1e-5}  # verl's critic default


GROUP_NAME_DOC = (
    "the name of this component's worker group, as RLinf's group_name: it names the Ray "
    "processes, the placement table and errors; null = the component's name"
)


@dataclass(kw_only=True, frozen=True)
class GroupKeys:
    """The keys of every component's section."""

    group_name: str | None = key(None, doc=GROUP_NAME_DOC)


@dataclass(kw_only=True, frozen=True)
class FsdpConfig:
    """FSDP2's options (verl's ``fsdp_config``): read with ``training_backend: fsdp2`` only."""

    param_dtype: Literal["float32", "bfloat16", "float16"] | None = key(
        None,
        doc="mixed precision: the dtype the parameters are cast to for the forward and backward "
        "passes, while the sharded copy the optimiser updates keeps the model's dtype (verl: "
        "bf16 params, fp32 reduce); the actor's also sets the reference model's dtype; null = "
        "no cast",
    )
    reduce_dtype: Literal["float32", "bfloat16"] = key(
        "float32", doc="mixed precision: the dtype gradients are reduce-scattered in"
    )
    offload: bool = key(
        False,
        doc="keep the sharded parameters, gradients and optimiser state in CPU memory, moved to "
        "the GPU for each use (CPUOffloadPolicy: less GPU memory, slower; CUDA only)",
    )


@dataclass(kw_only=True, frozen=True)
class MegatronConfig:
    """Megatron-core's options (verl's ``megatron`` section): read with ``training_backend:
    megatron`` only."""

    tensor_parallel_size: int = key(
        1,
        doc="ranks each weight matrix is split over (verl's tensor_model_parallel_size); the "
        "component's other ranks split the batch (data parallel), so it must divide the "
        "component's processes in cluster.component_placement, and the model's key/value heads",
        range=">= 1",
    )
    pipeline_parallel_size: int = key(
        1,
        doc="pipeline stages the model's layers are split into, each on its own ranks (verl's "
        "pipeline_model_parallel_size), run by Megatron's 1F1B schedule over a mini-batch's "
        "micro-batches; tensor_parallel_size x this must divide the component's processes, and "
        "this the model's layers",
        range=">= 1",
    )


@dataclass(kw_only=True, frozen=True)
class TrainedKeys(GroupKeys):
    """The keys of a trained component's section (actor, critic)."""

    training_backend: Literal["torch", "fsdp2", "megatron"] = key(
        "torch",
        doc="torch: one process, or DistributedDataParallel over the component's ranks; fsdp2: "
        "parameters, gradients and optimiser state sharded over them (FSDP2, fully_shard per "
        "decoder layer; on one rank the same arithmetic as torch, with the fsdp options); "
        "megatron: the reasoning actor and critic as Megatron-core GPT models (Qwen2 / Llama "
        "weights converted), tensor and pipeline parallel over megatron.tensor_parallel_size x "
        "megatron.pipeline_parallel_size ranks, on GPUs (the megatron extra)",
    )
    fsdp: FsdpConfig = section(FsdpConfig, doc="FSDP2 options (training_backend: fsdp2)")
    megatron: MegatronConfig = section(
        MegatronConfig, doc="Megatron-core options (training_backend: megatron)"
    )


@dataclass(kw_only=True, frozen=True)
class ActorKeys(TrainedKeys):
    """The keys of the actor's section in both modes, beside its update sizes."""

    log_prob_micro_batch_size: int | None = key(
        None,
        doc="samples per forward-only pass on one rank (RLinf's logprob_forward_micro_batch_size, "
        "verl's log_prob_micro_batch_size_per_gpu). reasoning: the old and reference log-probs, "
        "null = ppo_micro_batch_size; embodied: set, the actor recomputes the rollout's "
        "log-probs and values with its own weights before updating, null = it uses the "
        "rollout's",
        range=">= 1",
    )


@dataclass(kw_only=True, frozen=True)
class UpdateConfig:
    ppo_epochs: int = key(1, doc="passes over each batch of experience", range=">= 1")
    ppo_mini_batch_size: int = key(
        REQUIRED,
        doc="samples per optimiser step, global across ranks (embodied: transitions; "
        "reasoning: prompts, each with its group_size responses, as in verl)",
        range=">= 1",
    )
    ppo_micro_batch_size: int | None = key(
        None,
        doc="samples per forward/backward pass on one rank (transitions or responses), for "
        "memory only: gradients accumulate to the mini-batch's; null = the whole mini-batch",
        range=">= 1",
    )
    shuffle: bool = key(
        True,
        doc="shuffle the samples between mini-batches each epoch (seeded); false: mini-batches "
        "of consecutive samples, the same each epoch, as verl's actor.shuffle false does (in "
        "reasoning mode each mini-batch then holds whole groups, and each micro-batch as many "
        "as fit, which actor.model.share_group_prompts computes a prompt once for)",
    )


@dataclass(kw_only=True, frozen=True)
class LoggerConfig:
    console: bool = key(
        False, doc="print each iteration's metrics as one line on stderr (verl's 'console')"
    )
    tensorboard: bool = key(True, doc="write tensorboard events to the run folder")
    wandb: bool = key(
        False,
        doc="log to Weights & Biases: online when WANDB_API_KEY is set and the server answers "
        "within 3 s, else offline in the run folder (said on stderr)",
    )
    project: str = key(
        "rlcore",
        doc="the Weights & Biases project a run logs to (verl's trainer.project_name); the run's "
        "name is runner.run_name",
    )
