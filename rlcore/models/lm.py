"""Causal language models for reasoning runs: loading a local Hugging Face directory, and the tiny
Qwen2-architecture model with a tokenizer trained here (model hubs are unreachable on CPU CI).

The driver resolves every model to a local directory before any worker starts (``prepare``
in ``rlcore.prepare``), so a bad path fails first, naming its key.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rlcore.config.errors import ConfigError
from rlcore.models import compiling
from rlcore.models.folder_safety import check_no_custom_code, check_weight_format

SPECIALS = ("<|endoftext|>", "<|user|>", "<|assistant|>")
# The tiny tokenizer's chat template: one user turn, then the assistant's reply.
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}"
    "{% else %}<|assistant|>{{ m['content'] }}<|endoftext|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# With tools (rollout.tools): Hermes-style call and response tags, and tool messages rendered
# as a user turn holding the tool's answer.
TOOL_SPECIALS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
TOOL_CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}"
    "{% elif m['role'] == 'tool' %}<|user|><tool_response>{{ m['content'] }}</tool_response>"
    "{% else %}<|assistant|>{{ m['content'] }}<|endoftext|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# safetensors only: pickle weights run code (rlcore.models.folder_safety)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
# A folder holding none of these has no tokenizer: transformers then builds an empty one that
# encodes every prompt to nothing, and generation fails far from the cause.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


TINY_POSITIONS = 512  # the tiny model's max_position_embeddings


@contextmanager
def evaluating(model: Any) -> Iterator[Any]:
    """``model`` in eval mode (no dropout) for generation, back in the mode it was in after,
    even when generation raises."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def check_positions(directory: Path | None, data: Any, setting: str) -> None:
    """``ConfigError`` when a prompt and its response (``data.max_prompt_length`` +
    ``data.max_response_length``) can be longer than the model's positions (its config's
    ``max_position_embeddings``; ``directory`` None: the tiny model's), which transformers
    would run past in silence."""
    positions = TINY_POSITIONS
    if directory is not None:
        try:
            described = json.loads((Path(directory) / "config.json").read_text())
            positions = described.get("max_position_embeddings") or described.get("n_positions")
        except (OSError, ValueError, AttributeError):
            return  # not a model folder: check_model_dir says so
        if not isinstance(positions, int):
            return  # the model names no limit
    longest = data.max_prompt_length + data.max_response_length
    if longest > positions:
        where = "the tiny model" if directory is None else f"{setting} {directory}"
        raise ConfigError(
            f"data.max_prompt_length + data.max_response_length: {data.max_prompt_length} + "
            f"{data.max_response_length} = {longest} tokens, more than the {positions} "
            f"positions of {where} (max_position_embeddings); lower them to fit"
        )


def check_model_dir(path: str, setting: str, tokenizer: bool = False) -> Path:
    """``path`` as a directory holding a Hugging Face model (its config, readable weight files
    and, with ``tokenizer``, a tokenizer), or a ConfigError naming ``setting``. Weight files are
    checked by their headers (safetensors) or archive index (torch), not loaded."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ConfigError(
            f"{setting}: {path} is not a directory; give a local Hugging Face model folder, or "
            "a hub id (org/name: from the local cache, or downloaded)"
        )
    if not (directory / "config.json").is_file():
        raise ConfigError(f"{setting}: {path} has no config.json, so it is not a model folder")
    try:
        described = json.loads((directory / "config.json").read_text())
    except (ValueError, OSError) as error:
        raise ConfigError(
            f"{setting}: {directory / 'config.json'} is not readable JSON "
            f"({error}); the model folder is damaged"
        ) from None
    if not isinstance(described, dict) or "model_type" not in described:
        raise ConfigError(
            f"{setting}: {directory / 'config.json'} names no model_type, so "
            "transformers cannot build the model"
        )
    check_no_custom_code(directory, setting)
    check_weight_format(directory, setting)
    _check_weights(directory, setting)
    if tokenizer and not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"{setting}: {directory} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
            "copy the tokenizer files of the model into the folder"
        )
    if tokenizer:
        try:
            load_tokenizer(directory)
        except ConfigError as error:
            raise ConfigError(f"{setting}: {error}") from None
    return directory


def _check_weights(directory: Path, setting: str) -> None:
    present = [name for name in WEIGHT_FILES if (directory / name).is_file()]
    if not present:
        raise ConfigError(
            f"{setting}: {directory} holds no weights (none of {', '.join(WEIGHT_FILES)}); "
            "the model folder is incomplete"
        )
    name = present[0]
    files = [directory / name]
    if name.endswith(".index.json"):
        try:
            shards = sorted(set(json.loads(files[0].read_text())["weight_map"].values()))
        except (ValueError, OSError, KeyError, TypeError, AttributeError) as error:
            raise ConfigError(
                f"{setting}: {files[0]} is not a readable weight index "
                f"({type(error).__name__}: {error}); the model folder is damaged"
            ) from None
        files = [directory / shard for shard in shards]
    for file in files:
        if not file.is_file():
            raise ConfigError(
                f"{setting}: {file} is named by {name} but missing; the model folder is incomplete"
            )
        _check_weight_file(file, setting)


def _check_weight_file(file: Path, setting: str) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            handle.keys()
    except (SafetensorError, OSError) as error:
        raise ConfigError(
            f"{setting}: {file} is not a readable safetensors file "
            f"({error}); the model folder is damaged"
        ) from None


def _quiet_transformers() -> None:
    """Load reports and shard progress bars say nothing a run needs; errors still show."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """PPO compares the same forward pass before and after an update (the ratio starts at 1,
    old values are the values being clipped against), so no module may be random. The token
    classification head ships with dropout 0.1 when the config names none."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def load_tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    _quiet_transformers()
    check_no_custom_code(Path(path))
    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
        raise ConfigError(
            f"{path}: its tokenizer has neither an eos token nor a pad token; rlcore ends "
            "responses at eos and pads with pad (or eos): set eos_token in its "
            "tokenizer_config.json"
        )
    if tokenizer.pad_token_id is None:  # many causal LMs ship none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute each decoder layer's activations in backward (torch.utils.checkpoint, the
    non-reentrant kind, which FSDP2 and frozen inputs work with)."""
    kwargs = {"use_reentrant": False}
    if hasattr(
        model, "activation_checkpointing_enable"
    ):  # the newer name (5.x); the older one warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def decoder_layers(model: Any) -> Any:
    """The transformers model's decoder layers (``model.layers`` of its base model), under a
    peft or data-parallel wrapper or not; None for a model without them."""
    from rlcore.models.forward import inner_model

    inner = inner_model(model)
    base = getattr(inner, "model", inner)
    base = getattr(base, "language_model", base)  # (a vision-language model's)
    return getattr(base, "layers", None)


def compile_layers(model: Any) -> int:
    """Compile each decoder layer in place (``nn.Module.compile``: regional compilation, the
    layers' code compiled once and shared, shapes dynamic so micro-batches of other lengths do
    not recompile), the small operations between the matmuls fused (verl's
    ``use_torch_compile``). Before the model is wrapped for data parallelism or sharded. The
    number of layers compiled."""
    layers = decoder_layers(model)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no decoder layers to compile")
    compiling.room_for_every_pass()
    for layer in layers:
        layer.compile(backend=compiling.COMPILE_BACKEND, dynamic=True)
    return len(layers)


def load_causal_lm(path: str | Path, dtype: str) -> torch.nn.Module:
    """A model folder as a causal LM: a vision-language model (its config has a
    ``vision_config``) through ``AutoModelForImageTextToText``, which reads a batch's
    ``pixel_values`` at its image placeholders."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    _quiet_transformers()
    check_no_custom_code(Path(path))
    described = json.loads((Path(path) / "config.json").read_text())
    auto = AutoModelForImageTextToText if "vision_config" in described else AutoModelForCausalLM
    model = auto.from_pretrained(
        str(path), dtype=DTYPES[dtype], trust_remote_code=False, use_safetensors=True
    )
    model.config.use_cache = True
    return _no_dropout(model)


VISION_TOWERS = ("vision_tower", "visual")  # LLaVA's, Qwen2-VL's (its merger inside)


def vision_tower(model: Any) -> tuple[str, torch.nn.Module] | None:
    """A vision-language model's vision encoder (the outermost module named as transformers'
    LLaVA and Qwen2-VL families name it) and its qualified name; None for a text model."""
    for name, module in model.named_modules():
        if name.rpartition(".")[2] in VISION_TOWERS:
            return name, module
    return None


def freeze_vision(model: torch.nn.Module, freeze: bool) -> torch.nn.Module:
    """``model`` with its vision encoder's weights out of training when ``freeze`` (no gradient
    and so no optimiser state: ``actor.model.freeze_vision_tower``); the projection into the
    language model and the language model train."""
    tower = vision_tower(model)
    if freeze and tower is not None:
        tower[1].requires_grad_(False)
    return model


def with_lora(
    model: torch.nn.Module,
    lora: Any,
    value_head: bool = False,
    key: str = "actor.model.lora",
    language_only: bool = True,
) -> torch.nn.Module:
    """``model`` with peft's LoRA adapters on ``lora.target_modules`` (rank ``lora.rank``, scale
    ``alpha / rank``, no dropout): only the adapters train, and for a value model its head too;
    ``model`` itself unchanged when ``lora.rank`` is 0. ``language_only``: in a vision-language
    model the adapters go into the language model only (its vision encoder's layers bear the
    same names; the reasoning mode's rule), else into every layer so named (the embodied LM
    policy's).
    ``key``: the config section ``lora`` is, named when a target is not in the model
    (``check_lora_targets``)."""
    if not lora.rank:
        return model
    from peft import LoraConfig, get_peft_model

    tower = vision_tower(model) if language_only else None
    check_lora_targets(model, lora.target_modules, f"{key}.target_modules", tower)
    # peft's rule: a module is excluded when its name is one of these or ends in "." + one
    excluded = [f"{tower[0]}.{n}" for n, _ in tower[1].named_modules() if n] if tower else None

    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        target_modules=list(lora.target_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="TOKEN_CLS" if value_head else "CAUSAL_LM",
        modules_to_save=["score"] if value_head else None,
        exclude_modules=excluded,
    )
    with warnings.catch_warnings():  # peft asks transformers a question it has renamed
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated")
        return get_peft_model(model, config)


def check_lora_targets(
    model: torch.nn.Module, targets: Any, key: str, tower: tuple[str, Any] | None = None
) -> None:
    """Every name of ``targets`` ends the name of one of ``model``'s modules (peft's rule),
    outside its vision encoder ``tower`` (``vision_tower``) where it has one; ``ConfigError``
    naming ``key``, the names missing and some the model has, if not. peft refuses only when no
    name matches, and otherwise trains fewer layers than were named."""
    inside = f"{tower[0]}." if tower else None
    modules = [
        (n, m) for n, m in model.named_modules() if not (inside and (n + ".").startswith(inside))
    ]
    names = [n for n, _ in modules]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        kinds = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d)
        adaptable = (n for n, m in modules if isinstance(m, kinds) or type(m).__name__ == "Conv1D")
        have = sorted({n.rsplit(".", 1)[-1] for n in adaptable})
        more = ", ..." if len(have) > 12 else ""
        raise ConfigError(
            f"{key}: {', '.join(missing)} not in the model ({type(model).__name__}), whose "
            f"layers LoRA can adapt are named {', '.join(have[:12])}{more}; name those to adapt"
        )


def is_adapter(name: str) -> bool:
    """A LoRA adapter's tensor (what a rollout holding the base model is synced)."""
    return ".lora_" in name


def load_value_model(path: str | Path, dtype: str) -> torch.nn.Module:
    """The critic: the causal LM's trunk with a scalar head per token (``num_labels=1``); a
    vision-language folder's trunk, vision encoder included (``VisionValueModel``)."""
    from transformers import AutoModelForTokenClassification

    _quiet_transformers()
    check_no_custom_code(Path(path))
    if "vision_config" in json.loads((Path(path) / "config.json").read_text()):
        from rlcore.models.vision_value import VisionValueModel

        model = VisionValueModel(load_causal_lm(path, dtype))  # (transformers has no class)
    else:
        model = AutoModelForTokenClassification.from_pretrained(
            str(path),
            num_labels=1,
            dtype=DTYPES[dtype],
            trust_remote_code=False,
            use_safetensors=True,
        )
    # A zero head starts every value at 0: the first advantages are the returns themselves,
    # not returns minus noise from a random projection.
    head = model.score if hasattr(model, "score") else model.classifier
    torch.nn.init.zeros_(head.weight)
    if getattr(head, "bias", None) is not None:
        torch.nn.init.zeros_(head.bias)
    return _no_dropout(model)


def train_tiny_tokenizer(
    corpus: list[str], vocab_size: int = 512, tools: bool = False, images: bool = False
) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, digits split one per token (so numbers
    are read digit by digit), with an end-of-text token that also pads; ``tools``: the tool
    tags as special tokens and a chat template that renders tool messages; ``images``: the
    image placeholder ``<image>`` as a special token."""
    specials = SPECIALS + (TOOL_SPECIALS if tools else ()) + (("<image>",) if images else ())
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=SPECIALS[0],
        pad_token=SPECIALS[0],
        additional_special_tokens=list(specials[1:]),
    )
    fast.chat_template = TOOL_CHAT_TEMPLATE if tools else CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_kv_heads(num_heads: int) -> int:
    """The tiny model's key/value heads: 2 when they divide the attention heads, else as many."""
    return 2 if num_heads % 2 == 0 else num_heads


def build_tiny_lm(
    tokenizer: Any,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    seed: int,
    vision: tuple[int, int, int] | None = None,
    image_token: int | None = None,
    experts: int = 0,
    experts_per_token: int = 2,
    expert_intermediate_size: int | None = None,
) -> torch.nn.Module:
    """A randomly initialised Qwen2-architecture causal LM sized for a CPU. With ``experts``: a
    Qwen3-MoE-architecture one instead, every layer's MLP ``experts`` experts of width
    ``expert_intermediate_size`` (default ``intermediate_size / experts_per_token``), each token
    routed to ``experts_per_token`` of them (weights renormalised over those). With ``vision``
    (image side, patch side, channels): a LLaVA-architecture vision-language model around it, a
    CLIP vision tower of the LM's width, heads and layers over ``patch``-pixel patches of a
    ``side``-pixel square image, whose last layer's patch features (class token dropped) a
    two-layer projection maps into the LM's embedding space; ``image_token`` its placeholder
    (None: the pad token, for an LM policy that passes images as embeddings, never as ids)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _quiet_transformers()
    if hidden_size % num_heads:
        raise ConfigError(
            f"actor.model.tiny.num_heads: {num_heads} does not divide hidden_size {hidden_size}"
        )
    text = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=tiny_kv_heads(num_heads),
        max_position_embeddings=TINY_POSITIONS,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    if experts:
        return _tiny_moe(text, experts, experts_per_token, expert_intermediate_size)
    if vision is None:
        return Qwen2ForCausalLM(text)
    return _tiny_llava(text, vision, image_token)


def _tiny_llava(
    text: Any, vision: tuple[int, int, int], image_token: int | None = None
) -> torch.nn.Module:
    """``build_tiny_lm``'s vision-language model around the language model of ``text``."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    side, patch, channels = vision
    tower = CLIPVisionConfig(
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=text.num_hidden_layers,
        num_attention_heads=text.num_attention_heads,
        image_size=side,
        patch_size=patch,
        num_channels=channels,
        projection_dim=text.hidden_size,
    )
    config = LlavaConfig(
        vision_config=tower,
        text_config=text,
        image_token_id=text.pad_token_id if image_token is None else image_token,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
    )
    return _no_dropout(LlavaForConditionalGeneration(config))


def _tiny_moe(dense: Any, experts: int, per_token: int, width: int | None) -> torch.nn.Module:
    """``build_tiny_lm``'s mixture-of-experts model: the dense config's sizes and tokens."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    if per_token > experts:
        raise ConfigError(
            f"actor.model.tiny.experts_per_token: {per_token}, more than num_experts {experts}"
        )
    config = Qwen3MoeConfig(
        vocab_size=dense.vocab_size,
        hidden_size=dense.hidden_size,
        intermediate_size=dense.intermediate_size,
        moe_intermediate_size=width or max(1, dense.intermediate_size // per_token),
        num_hidden_layers=dense.num_hidden_layers,
        num_attention_heads=dense.num_attention_heads,
        num_key_value_heads=dense.num_key_value_heads,
        max_position_embeddings=dense.max_position_embeddings,
        tie_word_embeddings=True,
        num_experts=experts,
        num_experts_per_tok=per_token,
        norm_topk_prob=True,
        pad_token_id=dense.pad_token_id,
        eos_token_id=dense.eos_token_id,
        bos_token_id=dense.bos_token_id,
    )
    return Qwen3MoeForCausalLM(config)
