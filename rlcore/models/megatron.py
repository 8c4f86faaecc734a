"""Hugging Face Qwen2 / Llama causal LMs (and their token-classification value models) as
Megatron-core ``GPTModel``s, and back: the shape of one from the other's config, and the weights
of each tensor-parallel rank of each pipeline stage from the Hugging Face state dict (and the
state dict from all of theirs), name by name.

What the conversion has to get right (megatron-core 0.16.1, its local layer spec: no Transformer
Engine):

- ``linear_qkv`` holds the query, key and value projections of each query group together: for
  group g, its ``heads / groups`` query heads, then its key head, then its value head. Tensor
  parallel ranks take whole groups.
- ``linear_fc1`` holds the gate and up projections: each rank's gate shard, then its up shard
  (the gated unit splits its output in two halves).
- Column-parallel layers split their output dimension over the ranks, row-parallel ones
  (``linear_proj``, ``linear_fc2``) their input dimension; the norms are whole on every rank.
- The vocabulary is split over the ranks too, so it is padded to a multiple of their number
  (``padded_vocab``); the padded rows are zero and the logits of those entries are cut off
  (``full_logits``).
- Rotary embeddings: Megatron computes positions from the column (0 to S - 1), not from
  position ids, so each sequence must start at column 0 (``MegatronLM`` in
  ``rlcore/workers/training/megatron_strategy.py`` rotates left-padded rows so).
- A value model is the GPT with its output layer replaced by a scalar head (``ValueHead``), whole
  on every rank, as transformers' ``score`` layer is.
- Pipeline stages split the layers evenly (``stage_layers``); each numbers its own from 0. The
  first holds the embedding, the last the final norm and the output layer; a tied model's last
  stage holds a copy of the embedding as its output layer.
"""

from __future__ import annotations

from typing import Any

import torch

from rlcore.config.errors import ConfigError

# The architectures converted: both are pre-norm decoders with RMSNorm, rotary embeddings, a
# gated SiLU MLP and grouped-query attention (Qwen2 with biases on q, k and v).
ARCHITECTURES = ("qwen2", "llama")


def check_convertible(hf_config: Any, setting: str) -> None:
    """A ConfigError naming ``setting`` unless ``hf_config`` is an architecture converted here,
    in a form the conversion covers."""
    kind = getattr(hf_config, "model_type", None)
    if kind not in ARCHITECTURES:
        raise ConfigError(
            f"{setting}: megatron trains {' and '.join(ARCHITECTURES)} models; this one is "
            f"{kind!r}. Use training_backend fsdp2 or torch for it"
        )
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ConfigError(
            f"{setting}: megatron converts SiLU-gated MLPs; this model's "
            f"hidden_act is {hf_config.hidden_act!r}"
        )
    rope = _rope(hf_config)
    if rope.get("rope_type", "default") != "default":
        raise ConfigError(
            f"{setting}: megatron converts plain rotary embeddings; this model's "
            f"rope_type is {rope['rope_type']!r}"
        )
    if getattr(hf_config, "use_sliding_window", False):
        raise ConfigError(
            f"{setting}: megatron converts full attention; this model uses a sliding window"
        )


def check_tensor_parallel(hf_config: Any, tp_size: int, setting: str) -> None:
    """A ConfigError naming ``setting`` unless ``tp_size`` ranks can split ``hf_config``'s
    attention: each takes whole key/value heads (query groups)."""
    _, groups, _, _ = _shape(hf_config)
    if groups % tp_size:
        raise ConfigError(
            f"{setting}: {tp_size} does not divide the model's {groups} key/value heads (each "
            "rank takes whole query groups); pick a divisor of "
            f"{groups}"
        )


def check_pipeline_parallel(hf_config: Any, pp_size: int, setting: str) -> None:
    """A ConfigError naming ``setting`` unless ``pp_size`` stages split ``hf_config``'s layers
    evenly (Megatron builds ``layers / pp_size`` on each)."""
    layers = _shape(hf_config)[3]
    if layers % pp_size:
        raise ConfigError(
            f"{setting}: {pp_size} does not divide the model's {layers} layers (each pipeline "
            f"stage holds as many); pick a divisor of {layers}"
        )


def stage_layers(hf_config: Any, stage: int, stages: int) -> range:
    """The (global) indices of the decoder layers pipeline stage ``stage`` of ``stages`` holds."""
    per_stage = _shape(hf_config)[3] // stages
    return range(stage * per_stage, (stage + 1) * per_stage)


def _rope(hf_config: Any) -> dict:
    rope = getattr(hf_config, "rope_parameters", None) or {}
    if "rope_theta" not in rope:  # transformers before 5 kept it on the config itself
        rope = {**rope, "rope_theta": getattr(hf_config, "rope_theta", 10000.0)}
    return rope


def _shape(hf_config: Any) -> tuple[int, int, int, int]:
    """(attention heads, query groups, head size, layers)."""
    heads = hf_config.num_attention_heads
    groups = getattr(hf_config, "num_key_value_heads", None) or heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return heads, groups, head_dim, hf_config.num_hidden_layers


def padded_vocab(vocab_size: int, tp_size: int) -> int:
    """The vocabulary rounded up to a multiple of the tensor-parallel size."""
    return -(-vocab_size // tp_size) * tp_size


def transformer_config(hf_config: Any, tp_size: int, dtype: torch.dtype, pp_size: int = 1) -> Any:
    """Megatron's ``TransformerConfig`` for ``hf_config``'s decoder, on ``tp_size`` ranks a
    stage and ``pp_size`` pipeline stages.

    For the pipeline schedule: micro-batches may differ in length and rows (their padding is cut
    per micro-batch), so stages send each other the activations' shapes first
    (``variable_seq_lengths``); a loss is taken as it comes, not divided by the micro-batch count
    (``calculate_per_token_loss``; rlcore's losses are already shares of the mini-batch's)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    heads, groups, head_dim, layers = _shape(hf_config)
    check_tensor_parallel(hf_config, tp_size, "megatron.tensor_parallel_size")
    check_pipeline_parallel(hf_config, pp_size, "megatron.pipeline_parallel_size")
    return TransformerConfig(
        num_layers=layers,
        hidden_size=hf_config.hidden_size,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=head_dim,
        ffn_hidden_size=hf_config.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        add_qkv_bias=bool(getattr(hf_config, "attention_bias", hf_config.model_type == "qwen2")),
        tensor_model_parallel_size=tp_size,
        params_dtype=dtype,
        pipeline_model_parallel_size=pp_size,
        pipeline_dtype=dtype,
        variable_seq_lengths=True,
        calculate_per_token_loss=True,
        # no experts here; the default (allgather) dispatcher refuses variable_seq_lengths
        moe_token_dispatcher_type="alltoall",
        bf16=dtype == torch.bfloat16,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        # the fused kernels need CUDA extensions; the plain ones compute the same
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        bias_dropout_fusion=False,
    )


class ValueHead(torch.nn.Module):
    """A value model's output layer: one scalar per position, whole on every rank, called as
    Megatron calls its output layer (returns ``(output, bias)``)."""

    def __init__(self, hidden_size: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1, hidden_size, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(1, dtype=dtype))

    def forward(self, hidden: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None):
        return torch.nn.functional.linear(hidden, self.weight, self.bias), None


def build_gpt(
    hf_config: Any, tp_size: int, dtype: torch.dtype, value_head: bool = False, pp_size: int = 1
) -> Any:
    """An (uninitialised) ``GPTModel`` of ``hf_config``'s shape for this tensor-parallel rank
    and pipeline stage (the embedding on the first, the final norm and output layer on the last,
    ``stage_layers`` in between); with ``value_head`` a value model. Megatron's model-parallel
    state must be initialised with these sizes (building a tied model's last stage is a
    collective of the first and last stages: Megatron copies the embedding over)."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    tied = bool(getattr(hf_config, "tie_word_embeddings", False)) and not value_head
    model = GPTModel(
        transformer_config(hf_config, tp_size, dtype, pp_size),
        get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=padded_vocab(hf_config.vocab_size, tp_size),
        max_sequence_length=hf_config.max_position_embeddings,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=tied,
        position_embedding_type="rope",
        rotary_base=int(_rope(hf_config)["rope_theta"]),
    )
    if value_head and model.post_process:
        model.output_layer = ValueHead(hf_config.hidden_size, dtype)
    return model


# the conversion ----------------------------------------------------------------------------


def to_megatron(
    hf: dict[str, torch.Tensor],
    hf_config: Any,
    tp_rank: int,
    tp_size: int,
    value_head: bool = False,
    stage: int = 0,
    stages: int = 1,
) -> dict[str, torch.Tensor]:
    """Tensor-parallel rank ``tp_rank``'s Megatron state dict of pipeline stage ``stage`` (of
    ``stages``) from a Hugging Face state dict (a causal LM's, or with ``value_head`` a
    token-classification model's). A stage numbers its layers from 0; a tied model's last stage
    (when not also the first) holds its own copy of the embedding as its output layer."""
    heads, groups, head_dim, _ = _shape(hf_config)
    first, last = stage == 0, stage == stages - 1
    per_group = heads // groups
    vocab = padded_vocab(hf_config.vocab_size, tp_size)

    def split(tensor: torch.Tensor, dim: int) -> torch.Tensor:
        return tensor.chunk(tp_size, dim)[tp_rank].clone()

    def vocab_rows(tensor: torch.Tensor) -> torch.Tensor:
        padded = tensor.new_zeros((vocab, *tensor.shape[1:]))
        padded[: len(tensor)] = tensor
        return split(padded, 0)

    out = {}
    if first:
        out["embedding.word_embeddings.weight"] = vocab_rows(hf["model.embed_tokens.weight"])
    if last:
        out["decoder.final_layernorm.weight"] = hf["model.norm.weight"].clone()
    for local, i in enumerate(stage_layers(hf_config, stage, stages)):
        src, dst = f"model.layers.{i}.", f"decoder.layers.{local}."
        for kind in ("weight", "bias"):
            if f"{src}self_attn.q_proj.{kind}" not in hf:
                continue
            q, k, v = (hf[f"{src}self_attn.{n}_proj.{kind}"] for n in "qkv")
            q = q.reshape(groups, per_group * head_dim, *q.shape[1:])
            k = k.reshape(groups, head_dim, *k.shape[1:])
            v = v.reshape(groups, head_dim, *v.shape[1:])
            qkv = torch.cat([q, k, v], dim=1)  # [groups, (per_group + 2) * head_dim, ...]
            out[f"{dst}self_attention.linear_qkv.{kind}"] = split(qkv, 0).flatten(0, 1)
        out[f"{dst}self_attention.linear_proj.weight"] = split(
            hf[f"{src}self_attn.o_proj.weight"], 1
        )
        gate, up = hf[f"{src}mlp.gate_proj.weight"], hf[f"{src}mlp.up_proj.weight"]
        out[f"{dst}mlp.linear_fc1.weight"] = torch.cat([split(gate, 0), split(up, 0)])
        out[f"{dst}mlp.linear_fc2.weight"] = split(hf[f"{src}mlp.down_proj.weight"], 1)
        out[f"{dst}input_layernorm.weight"] = hf[f"{src}input_layernorm.weight"].clone()
        out[f"{dst}pre_mlp_layernorm.weight"] = hf[f"{src}post_attention_layernorm.weight"].clone()
    if not last:
        pass
    elif value_head:
        out["output_layer.weight"] = hf["score.weight"].clone()
        out["output_layer.bias"] = hf["score.bias"].clone()
    elif not getattr(hf_config, "tie_word_embeddings", False):
        out["output_layer.weight"] = vocab_rows(hf["lm_head.weight"])
    elif not first:  # tied, on a stage apart from the embedding's
        out["output_layer.weight"] = vocab_rows(hf["model.embed_tokens.weight"])
    return out


def to_hf(
    shards: list[dict[str, torch.Tensor]],
    hf_config: Any,
    value_head: bool = False,
    stage: int = 0,
    stages: int = 1,
) -> dict[str, torch.Tensor]:
    """The Hugging Face tensors of pipeline stage ``stage`` (of ``stages``) from every
    tensor-parallel rank's Megatron state dict of that stage (in rank order): the inverse of
    ``to_megatron``. With one stage, the whole state dict; else ``merge_stages`` joins the
    stages'."""
    heads, groups, head_dim, _ = _shape(hf_config)
    per_group = heads // groups
    first, last = stage == 0, stage == stages - 1

    def join(name: str, dim: int) -> torch.Tensor:
        return torch.cat([shard[name] for shard in shards], dim)

    out = {}
    if first:
        out["model.embed_tokens.weight"] = join("embedding.word_embeddings.weight", 0)[
            : hf_config.vocab_size
        ]
    if last:
        out["model.norm.weight"] = shards[0]["decoder.final_layernorm.weight"]
    for local, i in enumerate(stage_layers(hf_config, stage, stages)):
        src, dst = f"decoder.layers.{local}.", f"model.layers.{i}."
        for kind in ("weight", "bias"):
            name = f"{src}self_attention.linear_qkv.{kind}"
            if name not in shards[0]:
                continue
            qkv = join(name, 0)
            qkv = qkv.reshape(groups, (per_group + 2) * head_dim, *qkv.shape[1:])
            q, k, v = qkv.split([per_group * head_dim, head_dim, head_dim], dim=1)
            for letter, part in zip("qkv", (q, k, v), strict=True):
                out[f"{dst}self_attn.{letter}_proj.{kind}"] = part.flatten(0, 1)
        out[f"{dst}self_attn.o_proj.weight"] = join(f"{src}self_attention.linear_proj.weight", 1)
        halves = [shard[f"{src}mlp.linear_fc1.weight"].chunk(2) for shard in shards]
        out[f"{dst}mlp.gate_proj.weight"] = torch.cat([gate for gate, _ in halves])
        out[f"{dst}mlp.up_proj.weight"] = torch.cat([up for _, up in halves])
        out[f"{dst}mlp.down_proj.weight"] = join(f"{src}mlp.linear_fc2.weight", 1)
        out[f"{dst}input_layernorm.weight"] = shards[0][f"{src}input_layernorm.weight"]
        out[f"{dst}post_attention_layernorm.weight"] = shards[0][f"{src}pre_mlp_layernorm.weight"]
    tied = bool(getattr(hf_config, "tie_word_embeddings", False)) and not value_head
    if not last:
        pass
    elif value_head:
        out["score.weight"] = shards[0]["output_layer.weight"]
        out["score.bias"] = shards[0]["output_layer.bias"]
    elif not tied:
        out["lm_head.weight"] = join("output_layer.weight", 0)[: hf_config.vocab_size]
    return merge_stages([out], hf_config, value_head) if stages == 1 else out


def merge_stages(
    parts: list[dict[str, torch.Tensor]], hf_config: Any, value_head: bool = False
) -> dict[str, torch.Tensor]:
    """The whole Hugging Face state dict from every pipeline stage's ``to_hf`` tensors. A tied
    model's output weight is the first stage's embedding (the last stage's copy is the same
    tensor after every step: their gradients are summed); transformers lists it under both
    names."""
    out = {name: tensor for part in parts for name, tensor in part.items()}
    if bool(getattr(hf_config, "tie_word_embeddings", False)) and not value_head:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def full_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """A causal LM's ``[B, S, V]`` logits from its tensor-parallel rank's vocabulary shard
    ``[B, S, V_padded / tp]`` (gathered over the ranks; differentiable, the gradient goes back
    to each rank's shard), the padded entries cut off."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

    if parallel_state.get_tensor_model_parallel_world_size() > 1:
        logits = gather_from_tensor_model_parallel_region(logits)
    return logits[..., :vocab_size]
