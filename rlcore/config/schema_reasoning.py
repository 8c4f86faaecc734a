"""The reasoning-mode schema: PPO on a causal language model with rule rewards.

Names follow verl where verl has the knob (``max_prompt_length``, ``ppo_mini_batch_size``,
``critic_warmup``, ``kl_ctrl``); verl's ``rollout.n`` is ``algorithm.group_size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlcore.config.derived import Derived, derived_section
from rlcore.config.fields import REQUIRED, key, section
from rlcore.config.sections import (
    REASONING_ACTOR_OPTIM,
    REASONING_CRITIC_OPTIM,
    REASONING_RUNNER_DEFAULTS,
    ActorKeys,
    AlgorithmConfig,
    ClusterConfig,
    GroupKeys,
    LoggerConfig,
    OptimConfig,
    RunnerConfig,
    SyncConfig,
    TrainedKeys,
    UpdateConfig,
)

GSM8K_SUFFIX = ' Let\'s think step by step and output the final answer after "####".'


@dataclass(kw_only=True, frozen=True)
class SyntheticConfig:
    num_train: int = key(20_000, doc="training problems generated", range=">= 1")
    num_val: int = key(
        200, doc="validation problems generated (disjoint from the training set)", range=">= 1"
    )
    digits: int = key(2, doc="digits of each operand (1 to 6)", range="[1, 6]")
    operations: list[str] = key(factory=lambda: ["+"], doc="operators drawn from: + - *")
    seed: int = key(
        0, doc="the generator's seed: the same seed gives the same problems", range=">= 0"
    )
    images: bool = key(
        False,
        doc="the visual task: two one-digit numbers drawn into a 16-pixel image, the question "
        "naming only the operation (rlcore/data/visual_arith.py); the tiny model is then a "
        "vision-language model (digits must be 1)",
    )


@dataclass(kw_only=True, frozen=True)
class DataConfig:
    train_files: list[str] = key(
        factory=list,
        doc="parquet or jsonl files of training prompts (one path: a list of one, as verl "
        "writes it); empty = the synthetic task",
        path=True,
    )
    val_files: list[str] = key(
        factory=list,
        doc="parquet or jsonl files of validation prompts (one path: a list of one, as verl "
        "writes it); empty = the synthetic task",
        path=True,
    )
    prompt_key: str = key("question", doc="the field that holds the prompt text")
    answer_key: str = key("answer", doc="the field that holds the reference answer")
    answer_format: Literal["gsm8k", "plain"] = key(
        "gsm8k", doc="gsm8k: the answer is the number after '####' (commas removed); plain: as is"
    )
    max_prompt_length: int = key(
        64,
        doc="prompts longer than this many tokens are dropped (and counted), never truncated",
        range=">= 1",
    )
    max_response_length: int = key(16, doc="tokens generated per response at most", range=">= 1")
    train_batch_size: int = key(
        REQUIRED, doc="prompts per iteration, global across ranks", range=">= 1"
    )
    val_max_samples: int | None = key(
        None, doc="validate on at most this many prompts; null = all", range=">= 1"
    )
    chat_template: bool | None = key(
        None,
        doc="wrap prompts in the tokenizer's chat template: true = every prompt (text as a "
        "user turn); false = none (a chat prompt's last user turn is its text); null = chat "
        "prompts (verl's files) only, text as written",
    )
    prompt_suffix: str = key(
        GSM8K_SUFFIX,
        doc="appended to every text prompt (GSM8K's convention); not to chat prompts, which "
        "verl's preprocessing writes with their instruction",
    )
    shuffle: bool = key(True, doc="shuffle the training prompts each epoch (seeded)")
    synthetic: SyntheticConfig = section(SyntheticConfig, doc="the shipped arithmetic task")


@dataclass(kw_only=True, frozen=True)
class TinyLMConfig:
    hidden_size: int = key(128, doc="width of the tiny Qwen2-architecture model", range=">= 1")
    num_layers: int = key(2, doc="decoder layers", range=">= 1")
    num_heads: int = key(4, doc="attention heads (2 key/value heads when divisible)", range=">= 1")
    intermediate_size: int = key(512, doc="MLP width", range=">= 1")


@dataclass(kw_only=True, frozen=True)
class TinyPolicyConfig(TinyLMConfig):
    """The reasoning mode's tiny model: the dense shape, or a mixture of experts."""

    num_experts: int = key(
        0,
        doc="0 = a dense model; more: a mixture-of-experts model (Qwen3-MoE architecture) with "
        "this many experts in every layer's MLP (docs/moe.md)",
        range=">= 0",
    )
    experts_per_token: int = key(
        2,
        doc="with num_experts: the experts each token is routed to (transformers' "
        "num_experts_per_tok)",
        range=">= 1",
    )
    expert_intermediate_size: int | None = key(
        None,
        doc="with num_experts: one expert's MLP width; null = intermediate_size / "
        "experts_per_token (a token's MLP compute as the dense model's)",
        range=">= 1",
    )


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(kw_only=True, frozen=True)
class LoraConfig:
    rank: int = key(
        0,
        doc="LoRA (peft): the rank of the adapters trained on the actor and the critic while "
        "their base weights stay frozen; the rollout gets only the adapters and the reference "
        "is the base with them off (no copy); 0 = every weight trained (verl's lora_rank)",
        range=">= 0",
    )
    alpha: float = key(
        16.0, doc="the adapters' output is scaled by alpha / rank (verl's lora_alpha)", range="> 0"
    )
    target_modules: list[str] = key(
        factory=lambda: list(LORA_TARGETS),
        doc="the linear layers that get adapters, by name (verl's target_modules)",
    )


@dataclass(kw_only=True, frozen=True)
class LMConfig:
    path: str | None = key(
        None,
        doc="a local Hugging Face model directory, or a hub id (Qwen/Qwen2.5-0.5B-Instruct: "
        "from the local HF cache, else downloaded into it); null = the tiny model built (and "
        "cached)",
        path=True,
    )
    dtype: Literal["float32", "bfloat16"] = key("float32", doc="parameter dtype")
    gradient_checkpointing: bool = key(
        False,
        doc="the actor and critic recompute each decoder layer's activations in the backward "
        "pass instead of keeping them: less memory for another forward pass per layer",
    )
    use_remove_padding: bool = key(
        False,
        doc="pack the sequences of each actor, critic and reference forward and backward pass "
        "end to end (positions restarting, attention kept within each sequence) so no padding "
        "token is computed; the same log-probs, values and gradients (verl's key). Checked on "
        "the model when it loads. Pays off on GPUs (one row under flash attention); on CPU the "
        "padding is already cut to each micro-batch's longest sequence",
    )
    share_group_prompts: bool = key(
        False,
        doc="with algorithm.group_size > 1, compute a prompt once for the responses to it: in "
        "the hf rollout engine's prefill (each group's), and in each forward and backward "
        "micro-batch of the actor and reference (each distinct prompt's keys and values kept, "
        "with their gradient, and its responses passed on top of them); the same samples, "
        "log-probs and gradients for fewer positions, the mini-batches unchanged (64 prompts x "
        "4 responses of the default task on CPU: a generate call 0.167 -> 0.111 s, an update "
        "pass of whole groups 0.17 -> 0.10 s). The critic's passes are unchanged",
    )
    use_fused_kernels: bool = key(
        False,
        doc="compute the response tokens' log-probs and entropies inside the model's forward "
        "from its last hidden states and LM head, actor.entropy_from_logits_chunk_size "
        "positions at a time, forward and backward (the backward computes each chunk's logits "
        "again), in the actor's update and old log-probs and the reference's pass: no float32 "
        "logits of the whole vocabulary kept for every position; the same values and gradients "
        "(verl's key). Reasoning only; torch and fsdp2 backends; the model's LM head must be a "
        "plain linear layer whose logits its forward returns unchanged (checked when it loads)",
    )
    freeze_vision_tower: bool = key(
        True,
        doc="a vision-language model: its vision encoder's weights stay as loaded (no gradient, "
        "no optimiser state) while the projection into the language model and the language "
        "model train, in the actor and the critic; false = the encoder trains too. With LoRA "
        "the adapters go into the language model only, either way. A text model has no "
        "encoder to freeze (verl's actor.freeze_vision_tower)",
    )
    tiny: TinyPolicyConfig = section(
        TinyPolicyConfig, doc="the tiny model's shape (when path is null)"
    )
    lora: LoraConfig = section(LoraConfig, doc="low-rank adapters instead of full fine-tuning")


ENTROPY_CHUNK_SIZE = 2048  # verl's entropy_from_logits_chunk_size, which its configs always carry


@dataclass(kw_only=True, frozen=True)
class ReasoningActorConfig(UpdateConfig, ActorKeys):
    model: LMConfig = section(LMConfig, doc="the policy model (the reference starts as a copy)")
    optim: OptimConfig = section(
        OptimConfig, doc="the actor's optimiser and its schedule", defaults=REASONING_ACTOR_OPTIM
    )
    max_tokens_per_micro_batch: int | None = key(
        None,
        doc="form the micro-batches of the update and of the forward passes (old and reference "
        "log-probs) by tokens: each holds at most this many token positions, rows of like "
        "lengths together, padding cut (verl's ppo_max_token_len_per_gpu); the gradient is the "
        "same. null = ppo_micro_batch_size / log_prob_micro_batch_size rows each, which it "
        "replaces (leave those null)",
        range=">= 1",
    )
    recompute_log_probs: bool = key(
        False,
        doc="recompute the old log-probs in a forward pass of the actor; false = take those the "
        "rollout recorded while sampling when it generated with the actor's own module (fused "
        "and not sharded: the same weights at the same precision), else recompute",
    )
    entropy_from_logits_with_chunking: bool = key(
        False,
        doc="compute the log-probs and entropies from the logits in chunks of "
        "actor.entropy_from_logits_chunk_size token positions, in every pass of the actor's "
        "and the reference's model: one chunk's float32 temporaries at a time instead of the "
        "micro-batch's (verl's key, which chunks the entropy); the same values",
    )
    entropy_from_logits_chunk_size: int = key(
        ENTROPY_CHUNK_SIZE,
        doc="with actor.entropy_from_logits_with_chunking or actor.model.use_fused_kernels: "
        "token positions a chunk",
        range=">= 1",
    )
    entropy_checkpointing: bool = key(
        False,
        doc="in the update, recompute the log-probs' and entropies' float32 intermediates from "
        "the logits in the backward pass instead of keeping them (verl's key, which recomputes "
        "the entropy): less memory for one more softmax a step; the same gradient",
    )
    use_torch_compile: bool = key(
        False,
        doc="compile each decoder layer of the actor's and the reference's model with "
        "torch.compile (regional: one layer's code, shapes dynamic), fusing the small "
        "operations between the matmuls of every pass, and with actor.model.use_fused_kernels "
        "each chunk's softmax, entropy and their gradient in the fused log-probs; the first "
        "passes compile (minutes on a GPU for a 0.5B model). torch and fsdp2 backends (verl's "
        "key)",
    )
    ulysses_sequence_parallel_size: int = key(
        1,
        doc="Ulysses sequence parallelism: the actor's ranks in groups of this many, each group "
        "computing on the same rows, each rank on a slice of every packed sequence, attention "
        "by two all-to-alls (one rank's activations of a long response divided by it; "
        "docs/backends.md). Divides the actor's ranks and the model's attention heads; needs "
        "actor.model.use_remove_padding; the torch or fsdp2 backend (verl's key; the reference "
        "computes whole)",
        range=">= 1",
    )
    router_aux_loss_coef: float | None = key(
        None,
        doc="a mixture-of-experts policy: the weight of its routers' load-balancing loss in the "
        "actor's loss (logged as actor/aux_loss); null = the model config's "
        "router_aux_loss_coef (0 if it has none); a dense model has none to weigh",
        range=">= 0",
    )


@dataclass(kw_only=True, frozen=True)
class CriticConfig(TrainedKeys):
    use_torch_compile: bool = key(
        False,
        doc="as actor.use_torch_compile, for the critic's model (verl's key)",
    )
    use_critic_model: bool | None = key(
        None,
        doc="train a separate critic model; null = derived from algorithm.adv_type (true for an "
        "estimator that reads values, such as gae)",
    )
    model_path: str | None = key(
        None,
        doc="the critic's own model directory or hub id (as actor.model.path); null = start "
        "from the actor's weights",
        path=True,
    )
    ulysses_sequence_parallel_size: int = key(
        1,
        doc="as actor.ulysses_sequence_parallel_size, for the critic's ranks (verl's key)",
        range=">= 1",
    )
    ppo_epochs: int | None = key(
        None, doc="critic passes per batch; null = actor.ppo_epochs", range=">= 1"
    )
    ppo_mini_batch_size: int | None = key(
        None,
        doc="prompts per critic optimiser step; null = actor.ppo_mini_batch_size",
        range=">= 1",
    )
    ppo_micro_batch_size: int | None = key(
        None,
        doc="responses per critic forward/backward; null = actor.ppo_micro_batch_size",
        range=">= 1",
    )
    max_tokens_per_micro_batch: int | None = key(
        None,
        doc="token budget of the critic's micro-batches (update and values), as "
        "actor.max_tokens_per_micro_batch; null = the actor's, unless ppo_micro_batch_size is "
        "set here",
        range=">= 1",
    )
    optim: OptimConfig = section(
        OptimConfig,
        doc="the critic's optimiser and its schedule",
        defaults=REASONING_CRITIC_OPTIM,
    )
    critic_warmup: int = key(
        0,
        doc="iterations that train only the critic before the actor starts updating",
        range=">= 0",
    )


# The sglang release rollout.backend=sglang is written and checked against (the gpu extra pins it).
SGLANG_VERSION = "0.5.21"
# The megatron-core release training_backend=megatron is written and tested against (the megatron
# and gpu extras pin it).
MEGATRON_VERSION = "0.16.1"


@dataclass(kw_only=True, frozen=True)
class HFRolloutConfig:
    static_cache: bool = key(
        False,
        doc="the hf engine decodes with rlcore's own loop over a static key-value cache "
        "(transformers' StaticCache; rlcore/workers/reasoning/static_decode.py) instead of "
        "transformers' generate: sampling and the stop check stay on the device, no host sync "
        "per token, the same distribution (temperature, top-k, top-p as generate applies them); "
        "5.8x generate's tokens/s for the 0.5B model on an H200 (docs/backends.md). "
        "Single-turn batches: refused with rollout.tools, rollout.partial_rollout and "
        "actor.model.share_group_prompts (it prefills every row)",
    )
    cuda_graph: bool = key(
        True,
        doc="with rollout.hf.static_cache on a CUDA device: capture one decode step of each "
        "(batch, length) bucket in a CUDA graph and replay it per token (a weight sync copies "
        "into the captured weights, so the graphs stay valid); CPU devices run the same step "
        "uncaptured",
    )
    compile: bool = key(
        False,
        doc="with rollout.hf.static_cache: compile the decode step with torch.compile "
        "(inductor: the small per-layer operations fused into fewer kernels) before it is "
        "captured; each (batch, length) bucket compiles once (28 s for the 0.5B model on an "
        "H200, where it decoded 1.5x faster than the graph alone), and a collocated engine keeps "
        "its compiled buckets while the actor trains instead of giving them back",
    )
    batch_bucket: int = key(
        32,
        doc="with rollout.hf.static_cache: rows of a call rounded up to a multiple of this (the "
        "extra rows repeat the first and are dropped), so batches of near sizes share a cache "
        "and a captured graph",
        range=">= 1",
    )
    length_bucket: int = key(
        64,
        doc="with rollout.hf.static_cache: the cache's length (prompt width plus "
        "data.max_response_length) rounded up to a multiple of this",
        range=">= 1",
    )
    max_buckets: int = key(
        2,
        doc="with rollout.hf.static_cache: (batch, length) buckets kept at once, each with its "
        "cache and graph (device memory); the least recently used is dropped beyond it",
        range=">= 1",
    )


@dataclass(kw_only=True, frozen=True)
class RolloutConfig(GroupKeys):
    backend: Literal["hf", "sglang"] = key(
        "hf",
        doc="generation engine: hf (transformers generate, any device) or sglang (SGLang 0.5.21's "
        "offline engine, GPUs only, the gpu extra; not yet run on hardware by this project)",
    )
    hf: HFRolloutConfig = section(
        HFRolloutConfig, doc="the hf engine's decoding (a static cache, CUDA graphs)"
    )
    temperature: float = key(1.0, doc="sampling temperature while training", range="> 0")
    calculate_log_probs: bool = key(
        False,
        doc="the rollout records each sampled token's log-prob, and the run logs how far they "
        "are from the actor's (rollout_corr/kl, ...); on by itself where they are read (the "
        "rollout correction, a rollout sampling with the actor's own module)",
    )
    top_p: float = key(
        1.0, doc="nucleus sampling: keep the smallest set with this much mass", range="(0, 1]"
    )
    top_k: int = key(0, doc="sample from the k most likely tokens; 0 = no limit", range=">= 0")
    val_temperature: float = key(
        1.0,
        doc="sampling temperature of the runner.val_n validation samples per prompt (verl's "
        "val_kwargs.temperature)",
        range="> 0",
    )
    val_top_p: float = key(
        1.0,
        doc="nucleus sampling of the runner.val_n validation samples (verl's val_kwargs.top_p); "
        "the training's rollout.top_p does not apply to them",
        range="(0, 1]",
    )
    val_top_k: int = key(
        0,
        doc="top-k of the runner.val_n validation samples, 0 = no limit (verl's "
        "val_kwargs.top_k); the training's rollout.top_k does not apply to them",
        range=">= 0",
    )
    micro_batch_size: int | None = key(
        None,
        doc="sequences per generate call on one rank (RLinf's rollout_micro_batch_size); null = "
        "all of the rank's at once. With actor.model.share_group_prompts, rounded down to whole "
        "groups of algorithm.group_size (when larger than one), so each is prefilled once",
        range=">= 1",
    )
    partial_rollout: bool = key(
        False,
        doc="asynchronous runs (runner.max_staleness >= 1): generate each batch in segments of "
        "rollout.partial_rollout_tokens tokens a row, so a weight update that arrives "
        "mid-generation is taken between two segments and the rows go on with the new weights "
        "from where they stopped, each token recording the version that sampled it (verl's "
        "async_training.partial_rollout; docs/async.md); hf engine, single-turn",
    )
    partial_rollout_tokens: int | None = key(
        None,
        doc="with rollout.partial_rollout: the most tokens a row gets per segment (each segment "
        "prefills the prompts and responses so far anew); null = 16",
        range=">= 1",
    )
    tensor_parallel_size: int = key(
        1,
        doc="GPUs one rollout engine spans (verl's tensor_model_parallel_size): the hf engine "
        "runs on one; an sglang engine is tensor parallel over this many, which must be the GPUs "
        "each rollout process gets in cluster.component_placement (DEVICES:PROCESSES)",
        range=">= 1",
    )
    gpu_memory_utilization: float | None = key(
        None,
        doc="the share of each GPU an sglang engine takes for its weights and KV cache "
        "(verl's rollout.gpu_memory_utilization, SGLang's mem_fraction_static); null = "
        "SGLang's own choice; sglang only",
        range="(0, 1]",
    )
    tools: list[str] = key(
        factory=list,
        doc="tools the model may call in a multi-turn rollout (docs/agents.md): each "
        "'module:Class', 'path/to/file.py:Class' or a built-in (calculator, python); a class "
        "built with no arguments with name, description, parameters (a JSON schema) and "
        "call(self, arguments: dict) -> str. Empty: one turn, no tools",
    )
    max_turns: int = key(
        4,
        doc="with rollout.tools or rollout.interaction: the most model turns in a trajectory "
        "(a turn ends at the model's end-of-turn token); a tool call in the last one is not "
        "run, and counts as hitting the limit (verl's multi_turn.max_assistant_turns)",
        range=">= 1",
    )
    tool_call_regex: str | None = key(
        None,
        doc="how tool calls are found in a model turn: null = the Hermes/Qwen format of chat "
        'templates that have one (<tool_call>{"name": ..., "arguments": {...}}</tool_call>); '
        "else a regex with named groups name and arguments (a JSON object), for other models",
    )
    tool_timeout_s: float = key(
        10.0,
        doc="wall-clock deadline of one tool call (or interaction reply), in its process: past "
        "it the process is killed and the model reads an error (counted in tools/timeouts)",
        range="> 0",
    )
    tool_processes: int = key(
        2,
        doc="processes running tool calls side by side (each a Python process; each python "
        "tool call adds a sandbox of its own)",
        range="[1, 64]",
    )
    routing_replay: bool = key(
        False,
        doc="a mixture-of-experts policy: the rollout records the experts each token was routed "
        "to in every MoE layer, and the actor's, the reference's and the old log-probs' passes "
        "route each token to those instead of their routers' own choice (rollout routing "
        "replay, verl's enable_rollout_routing_replay; docs/moe.md)",
    )
    interaction: str | None = key(
        None,
        doc="verl's interaction: 'module:Class' or 'file.py:Class' playing the user, with "
        "respond(self, messages: list[dict], answer: str) -> str | None, asked after each model "
        "turn without a tool call (its text goes back as the user's message; None ends)",
    )

    @property
    def multi_turn(self) -> bool:
        """Trajectories of several turns (tools or an interaction): the agent loop
        (rlcore/workers/reasoning/agent_loop.py) generates them."""
        return bool(self.tools) or self.interaction is not None


@dataclass(kw_only=True, frozen=True)
class OverlongBufferConfig:
    enable: bool = key(
        False,
        doc="DAPO's overlong reward shaping: a response reaching into the last `len` tokens "
        "before data.max_response_length loses up to penalty_factor, linearly in how far it "
        "reaches (verl's reward_model.overlong_buffer)",
    )
    len: int = key(
        0,
        doc="the buffer: tokens before data.max_response_length where shaping applies",
        range=">= 0",
    )
    penalty_factor: float = key(
        1.0, doc="the penalty of a response that fills the whole buffer", range=">= 0"
    )


@dataclass(kw_only=True, frozen=True)
class RewardRulesConfig:
    """The rules (kinds gsm8k, math and custom), which also give the verdicts of the rows a
    reward model or judge scores (``reward.model.rule``)."""

    gsm8k_mode: Literal["strict", "flexible"] = key(
        "strict", doc="strict: '#### N' is required; flexible: the last number in the response"
    )
    correct_score: float = key(1.0, doc="reward of a correct answer", range="any")
    format_score: float = key(0.0, doc="reward of a well-formed but wrong answer", range="any")
    custom_fn: str | None = key(
        None,
        doc="kind custom: 'path/to/file.py:function' taking (response, answer) (or verl's "
        "compute_score, or TRL's f(completions, **kwargs) returning a list: docs/rewards.md) "
        "and returning {'score': number, 'correct': bool} (the verdict the accuracy counts; "
        "verl's 'acc' too), or a bare finite number (a reward with no verdict: no accuracy is "
        "reported)",
        path=True,
    )
    timeout_s: float = key(
        2.0,
        doc="seconds scoring one response may take (kinds math and custom): Python-level work "
        "is stopped in its scoring process at 0.8 of it, code stuck in C by killing and "
        "replacing the process at the whole; the response scores 0 (counted in "
        "reward/timeouts)",
        range="> 0",
    )
    num_processes: int = key(
        2,
        doc="scoring processes per reward rank for the kinds math and custom (gsm8k's bounded "
        "regex runs in the reward worker itself)",
        range=">= 1",
    )
    max_timeout_share: float = key(
        0.5,
        doc="the run ends, naming the reward and the data, when more than this share of a "
        "batch's responses (and at least 2) time out: a reward that times out on everything "
        "would take minutes per batch with no end in sight; 1 = never",
        range="[0, 1]",
    )
    batch_timeout_s: float | None = key(
        60.0,
        doc="seconds scoring one batch may take on a reward rank (kinds math and custom); past "
        "it, the responses not yet scored score 0 and count as timed out (one warning line; "
        "reward.rules.max_timeout_share applies to them), so a reward that keeps timing out costs "
        "this, not a killed and restarted process per response; at least reward.rules.timeout_s; "
        "null = no limit but each response's",
        range="> 0",
    )


@dataclass(kw_only=True, frozen=True)
class RewardModelConfig:
    """The model that scores (kind model: a reward model; kind judge: a causal LM grading by
    ``reward.judge``) and how its score combines with the rule's."""

    path: str | None = key(
        None,
        doc="kind model: a folder holding a sequence-classification model with one label (its "
        "logit is the score), its trained score head and its tokenizer; kind judge: a causal LM "
        "and its tokenizer (either: safetensors weights, no custom code)",
        path=True,
    )
    micro_batch_size: int = key(
        64, doc="kinds model and judge: rows per pass of the model", range=">= 1"
    )
    backend: Literal["torch", "fsdp2"] = key(
        "torch",
        doc="kind model: torch = every reward rank holds the whole reward model; fsdp2 = its "
        "weights sharded over the reward ranks by FSDP2 (the training backend's fully_shard, "
        "forward only: a layer's weights gathered for its pass), for reward models larger than "
        "one device's memory; either way each rank scores its own rows",
    )
    score_normalize: bool = key(
        False,
        doc="kinds model and judge: the model's score standardised by the running mean and std "
        "of every score it gave in training so far (kept in checkpoints); validation unchanged",
    )
    score_clip: float | None = key(
        None, doc="kind model: scores clipped to [-c, c]; null = not clipped", range="> 0"
    )
    rule: Literal["auto", "gsm8k", "math", "custom"] = key(
        "auto",
        doc="kind model: the rule that gives each response's verdict (the accuracy metrics) "
        "and its rule score for reward.model.combine; as reward.kind reads these names",
    )
    combine: Literal["rule_only_for_accuracy", "sum", "weighted"] = key(
        "rule_only_for_accuracy",
        doc="kind model: the reward is the model's score (rule_only_for_accuracy: the rule "
        "only gives the verdicts), the model's plus the rule's (sum), or model_weight x model "
        "+ rule_weight x rule (weighted)",
    )
    model_weight: float = key(
        1.0, doc="kind model, combine weighted: the model score's weight", range="any"
    )
    rule_weight: float = key(
        1.0, doc="kind model, combine weighted: the rule score's weight", range="any"
    )


@dataclass(kw_only=True, frozen=True)
class RewardJudgeConfig:
    """Kind judge: the judge's prompt, how its answer is read, and its engine (the judge's
    folder is ``reward.model.path``)."""

    template: str | None = key(
        None,
        doc="kind judge: a text file (at most 64 KiB), the judge's prompt, with {response} and "
        "optionally {prompt} and {answer} filled in as they are (no format spec; a literal "
        "brace written twice)",
        path=True,
    )
    parser: str = key(
        "(-?\\d+(?:\\.\\d+)?)",
        doc="kind judge: a regular expression whose first group, at its first match in the "
        "judge's answer, is the score (none: the score is 0, counted in reward/judge_unparsed)",
    )
    max_new_tokens: int = key(
        16, doc="kind judge: tokens the judge may answer with (greedy)", range=">= 1"
    )
    backend: Literal["hf", "sglang"] = key(
        "hf",
        doc="kind judge: the engine the judge generates with: hf (transformers' generate, any "
        "device) or sglang (an SGLang engine on the reward component's GPUs, tensor parallel "
        "over a process's GPUs; the gpu extra), as rollout.backend",
    )


@dataclass(kw_only=True, frozen=True)
class RewardRemoteConfig:
    """Kind remote: the reward service and how it is asked (docs/rewards.md)."""

    url: str | None = key(
        None,
        doc="kind remote: the service's address (http:// or https://); each request POSTs "
        "{'items': [{'prompt', 'response', 'answer', 'data_source'}]} and reads {'scores': [...]} "
        "(and optionally 'correct': [...]) in the same order",
    )
    batch_size: int = key(64, doc="kind remote: items per request", range=">= 1")
    concurrency: int = key(
        4, doc="kind remote: requests in flight at once, per reward rank", range=">= 1"
    )
    timeout_s: float = key(
        30.0, doc="kind remote: seconds a request may take before it is tried again", range="> 0"
    )
    retries: int = key(
        3,
        doc="kind remote: tries after the first for a request that got no answer, timed out or "
        "got a 5xx or 429 status (waiting 0.5 s, 1 s, 2 s ...); a 4xx status or a malformed "
        "answer is not tried again",
        range=">= 0",
    )
    on_error: Literal["raise", "zero"] = key(
        "raise",
        doc="kind remote: a request that still fails ends the run (raise, naming the URL and "
        "why), or its items score 0 (zero: counted in reward/remote_failures, said on stderr)",
    )


@dataclass(kw_only=True, frozen=True)
class RewardConfig(GroupKeys):
    kind: Literal["auto", "gsm8k", "math", "custom", "remote", "model", "judge"] = key(
        "auto",
        doc="gsm8k: the number after '####'; math: \\boxed{} via math-verify; custom; remote: an "
        "HTTP service at reward.remote.url; model: a reward model at reward.model.path; judge: a "
        "causal LM at reward.model.path grading by reward.judge.template (docs/rewards.md); auto = "
        "each row's data_source picks the rule as verl's default scorer does (openai/gsm8k: "
        "gsm8k; lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, HuggingFaceH4/MATH-500: "
        "math), gsm8k for rows without one (rlcore's own files, the synthetic task)",
    )
    score_range: list[float] = key(
        factory=lambda: [-1e4, 1e4],
        doc="[low, high]: every reward (each kind, custom functions, reward models, judges, "
        "services; the score after reward.model.combine and the overlong penalty) must be a finite "
        "number within it, else the run ends naming the reward and the value: NaN, infinities "
        "or 1e308 would make every optimiser step non-finite, and be skipped without a word",
        range="any",
    )
    sources: dict[str, Literal["gsm8k", "math", "custom", "remote", "model", "judge"]] = key(
        factory=dict,
        doc="the reward kind of the rows of each data source (verl's data_source column), e.g. "
        "{openai/gsm8k: gsm8k, my/chat: model}, so one batch mixes rules, a service and a "
        "reward model; rows of other sources (and without one) take reward.kind",
    )
    rules: RewardRulesConfig = section(
        RewardRulesConfig, doc="the rules: gsm8k, math (math-verify) and a custom function"
    )
    model: RewardModelConfig = section(
        RewardModelConfig, doc="kinds model and judge: the model that scores"
    )
    judge: RewardJudgeConfig = section(RewardJudgeConfig, doc="kind judge: its prompt and engine")
    remote: RewardRemoteConfig = section(RewardRemoteConfig, doc="kind remote: the service")
    overlong_buffer: OverlongBufferConfig = section(
        OverlongBufferConfig, doc="DAPO's soft penalty on responses near the length limit"
    )


@dataclass(kw_only=True, frozen=True)
class WarmupConfig:
    steps: int = key(
        0,
        doc="supervised steps on the synthetic task before PPO (at most, with stop_at_accuracy); "
        "0 = none",
        range=">= 0",
    )
    stop_at_accuracy: float | None = key(
        None,
        doc="end the warm-up at the first check whose greedy validation accuracy reaches this, so "
        "PPO starts from a known accuracy on any machine; null = run all the steps",
        range="(0, 1]",
    )
    check_every: int = key(
        25, doc="warm-up steps between accuracy checks (with stop_at_accuracy)", range=">= 1"
    )
    lr: float = key(1e-3, doc="AdamW learning rate of the warm-up", range="> 0")
    batch_size: int = key(64, doc="examples per warm-up step", range=">= 1")
    examples: int | None = key(
        None,
        doc="the warm-up learns from the first this many training problems; null = all. With "
        "rollout.tools (the calculator), each is a trajectory: the call with the question's "
        "expression, the calculator's answer, then '#### N' (docs/agents.md)",
        range=">= 1",
    )
    cache_dir: str = key(
        ".cache/rlcore",
        doc="the tiny model, tokenizer and warmed-up weights are cached here",
        path=True,
    )


@dataclass(kw_only=True, frozen=True)
class ReasoningConfig:
    mode: Literal["reasoning"] = key(REQUIRED, doc="reasoning: an LLM trained on rule rewards")
    algorithm: AlgorithmConfig = section(AlgorithmConfig, doc="RL algorithm (both modes)")
    actor: ReasoningActorConfig = section(ReasoningActorConfig, doc="policy training")
    critic: CriticConfig = section(CriticConfig, doc="the separate value model")
    rollout: RolloutConfig = section(RolloutConfig, doc="response generation")
    reward: RewardConfig = section(RewardConfig, doc="rule-based scoring")
    data: DataConfig = section(DataConfig, doc="prompts")
    warmup: WarmupConfig = section(WarmupConfig, doc="supervised warm-up of the tiny model")
    runner: RunnerConfig = section(
        RunnerConfig, doc="the training loop", defaults=REASONING_RUNNER_DEFAULTS
    )
    logger: LoggerConfig = section(LoggerConfig, doc="where metrics go")
    cluster: ClusterConfig = section(ClusterConfig, doc="machines and component placement")
    sync: SyncConfig = section(SyncConfig, doc="weight sync from the actor to the rollout")
    derived: Derived | None = derived_section()
