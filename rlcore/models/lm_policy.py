"""``LMPolicy``: a causal language model acting in a simulator (``actor.model.type: lm``), the
shape of RLinf's VLA policies on a CPU-sized model.

What the model sees, for one observation (``envs.language``: the instruction's characters, an
image's pixels when the env has a camera, then the state): the instruction's tokens, the image's
tokens (the model's vision encoder and projection, LLaVA's ``get_image_features``), then one
*state token*, the state through a learned projection into the embedding space, then for an
action of D dimensions the action tokens of dimensions 0..D-2. Each action dimension is one
token among the vocabulary's last ``actor.model.lm.action_bins`` (RT-2/OpenVLA), predicted at
the position before it: a Discrete space's action ``k`` is token ``k``; a Box dimension's bin
``k`` of ``bins`` equal bins over ``[low, high]`` is token ``k``, sent to the env as the bin's
centre. An action's log-probability is the sum over its dimensions (decoded autoregressively
when acting, teacher-forced when training), its entropy the sum of the dimensions' conditional
entropies. The value head reads the last hidden state of the state token: the card's
shared-backbone actor-critic, trained by the Huber value loss with value clipping
(``loss_type: actor_critic``).

The backbone is a Hugging Face causal LM folder (``actor.model.lm.path``; its tokenizer reads the
instruction; with an image, a LLaVA-style vision-language model), or a tiny Qwen2-architecture
model built here (a tiny LLaVA around it when the env has an image) whose vocabulary is the
instruction's character set (token = character code), padding and the action tokens; with
``actor.model.lm.lora.rank`` > 0 it trains through LoRA adapters (the LM side's ``with_lora``).
It exposes the interface of the built-in actor-critic (``act``, ``evaluate``, ``value``,
``forward``), so that the rollout, the PPO update, weight sync and checkpoints treat it as any
other policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlcore.algorithms import entropy_from_logits
from rlcore.config.errors import ConfigError
from rlcore.envs.language import decode_instructions
from rlcore.models.forward import cache_inputs, output_cache, token_log_probs

KEY = "actor.model.lm"


class _CharVocab:
    """The tiny model's vocabulary: 0 pads, 1..len(charset) the characters, then the actions."""

    def __init__(self, charset: str, bins: int) -> None:
        self.size = 1 + len(charset) + bins
        self.pad_token_id = self.eos_token_id = 0

    def __len__(self) -> int:
        return self.size


def action_dims(spec: Any, bins: int) -> tuple[int, ...]:
    """The number of action tokens each action dimension may take (``ConfigError`` when a
    discrete dimension has more actions than ``bins``, or a Box is unbounded)."""
    if spec.action_kind == "box":
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ConfigError(
                f"{KEY}: an LM policy bins each Box action dimension over [low, high], and this "
                "env's action space is unbounded; bound it (gymnasium's RescaleAction wrapper)"
            )
        return (bins,) * int(spec.action_dims[0])
    if spec.action_kind == "multi_binary":  # each bit a dimension of two actions
        sizes = (2,) * int(spec.action_dims[0])
    else:
        sizes = tuple(int(n) for n in spec.action_dims)
    if max(sizes) > bins:
        raise ConfigError(
            f"{KEY}.action_bins: {bins} action tokens, and the env's {spec.action_kind} action "
            f"space has {max(sizes)} actions in a dimension; raise {KEY}.action_bins to at "
            f"least {max(sizes)}"
        )
    return sizes


class LMPolicy(nn.Module):
    """See the module docstring. ``spec``: the env's ``SpaceSpec``; ``lm``: the
    ``actor.model.lm`` section. Its weights come from torch's global RNG (the caller seeds it)."""

    def __init__(self, spec: Any, lm: Any, backbone: tuple[Any, Any] | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.text_length, self.charset = spec.obs_text or (0, "")
        self.image_shape = spec.obs_image
        pixels = 0 if self.image_shape is None else int(np.prod(self.image_shape))
        self.state_start = self.text_length + pixels  # where the state begins in a row
        bins = lm.action_bins
        self.dims = action_dims(spec, bins)
        if backbone is not None:  # (an export's model and tokenizer, None: characters)
            self.lm, self.tokenizer = backbone
            stats = _pixel_stats(backbone[0].name_or_path)
        elif lm.path is None:
            self.lm, self.tokenizer = _tiny_backbone(spec, lm), None  # characters are tokens
            stats = TINY_PIXEL_STATS
        else:
            from rlcore.models.hub import local_model_dir
            from rlcore.models.lm import load_causal_lm, load_tokenizer

            folder = local_model_dir(lm.path, f"{KEY}.path")
            self.lm, self.tokenizer = load_causal_lm(folder, "float32"), load_tokenizer(folder)
            stats = _pixel_stats(folder)
        if self.image_shape is not None:
            vision_problem(self.lm.config, lm.path)  # (checked before start too)
            self.register_buffer("pixel_mean", torch.tensor(stats[0])[:, None, None], False)
            self.register_buffer("pixel_std", torch.tensor(stats[1])[:, None, None], False)
        if lm.lora.rank:  # the adapters go into the LM's layers in place; its weights freeze
            from rlcore.models.lm import with_lora

            with_lora(self.lm, lm.lora, key=f"{KEY}.lora", language_only=False)
        self.lm.config.use_cache = False
        self.tokens_of: dict[str, list[int]] = {}  # an instruction's tokens (a tokenizer's)
        rows = self.lm.get_input_embeddings().weight.shape[0]
        hidden = self.lm.config.get_text_config().hidden_size
        state_dim = spec.obs_shape[0] - self.state_start
        self.state_proj = nn.Linear(state_dim, hidden)
        self.value_head = nn.Linear(hidden, 1)
        # the vocabulary's last ``bins`` rows are the action tokens; each dimension its first n
        self.register_buffer("action_ids", torch.arange(rows - bins, rows), persistent=False)
        allowed = torch.arange(bins)[None, :] < torch.tensor(self.dims)[:, None]  # [D, bins]
        self.register_buffer("allowed", allowed, persistent=False)
        if spec.action_kind == "box":
            low = torch.as_tensor(np.asarray(spec.action_low), dtype=torch.float32)
            high = torch.as_tensor(np.asarray(spec.action_high), dtype=torch.float32)
            self.register_buffer("low", low, persistent=False)
            self.register_buffer("width", (high - low) / bins, persistent=False)

    # actions <-> tokens ------------------------------------------------------------------------

    def action_tokens(self, actions: torch.Tensor) -> torch.Tensor:
        """``[B, D]`` token indices (0..bins-1) of env actions as ``act`` returns them."""
        if self.spec.action_kind == "box":
            bins = self.allowed.shape[1]
            index = torch.floor((actions.float() - self.low) / self.width)
            return index.clamp(0, bins - 1).long()
        return actions.long().reshape(actions.shape[0], len(self.dims))

    def env_actions(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, D]`` token indices -> the actions the env takes (a Box bin's centre)."""
        if self.spec.action_kind == "box":
            return self.low + (tokens.float() + 0.5) * self.width
        if self.spec.action_kind == "discrete":
            return tokens[:, 0]
        return tokens

    # the sequence ------------------------------------------------------------------------------

    def _prompt(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, P, H]`` embeddings (instruction tokens left-padded, the image's tokens, then
        the state token) and their ``[B, P]`` attention mask."""
        parts, masks = [], []
        if self.text_length:
            codes = obs[:, : self.text_length].round().long()
            tokenized = self._tokenized if self.tokenizer is not None else _left_packed
            ids, mask = tokenized(codes)
            parts.append(self.lm.get_input_embeddings()(ids))
            masks.append(mask)
        if self.image_shape is not None:
            parts.append(self.image_embeds(obs))
        parts.append(self.state_proj(obs[:, self.state_start :])[:, None])
        embeds = torch.cat(parts, dim=1)
        seen = embeds.shape[1] - sum(m.shape[1] for m in masks)  # the image and state tokens
        masks.append(torch.ones((obs.shape[0], seen), dtype=torch.long, device=obs.device))
        return embeds, torch.cat(masks, dim=1)

    def image_embeds(self, obs: torch.Tensor) -> torch.Tensor:
        """``[B, N, H]``: the image of each observation through the model's vision encoder and
        projection (LLaVA's ``get_image_features``): scaled to [0, 1], resized to the encoder's
        square side, normalised by its image processor's mean and std."""
        height, width, channels = self.image_shape
        pixels = obs[:, self.text_length : self.state_start].reshape(-1, height, width, channels)
        pixels = pixels.permute(0, 3, 1, 2) / 255.0
        config = self.lm.config
        side = config.vision_config.image_size
        if (height, width) != (side, side):
            pixels = F.interpolate(
                pixels, size=(side, side), mode="bilinear", align_corners=False, antialias=True
            )
        if channels == 1 and config.vision_config.num_channels == 3:
            pixels = pixels.expand(-1, 3, -1, -1)
        used = pixels.shape[1]  # (a one-channel tower: the first channel's statistics)
        features = self.lm.get_image_features(
            pixel_values=(pixels - self.pixel_mean[:used]) / self.pixel_std[:used],
            vision_feature_layer=config.vision_feature_layer,
            vision_feature_select_strategy=config.vision_feature_select_strategy,
        )
        features = getattr(features, "pooler_output", features)  # (a list: one per image)
        return torch.stack(list(features)) if isinstance(features, list | tuple) else features

    def _tokenized(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A tokenizer's ids of the instructions, left-padded, and their mask."""
        texts = decode_instructions(codes.cpu().numpy(), self.charset)
        for text in set(texts) - self.tokens_of.keys():
            self.tokens_of[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        rows = [self.tokens_of[text] for text in texts]
        padded = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt")  # (on the left)
        return padded["input_ids"].to(codes.device), padded["attention_mask"].to(codes.device)

    def _hidden(self, embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The backbone's last hidden states ``[B, S, H]``."""
        return self._run(embeds, mask).last_hidden_state

    def _run(
        self, embeds: torch.Tensor, mask: torch.Tensor, past: Any = None, cache: bool = False
    ) -> Any:
        """The backbone over ``embeds``, the sequence's last positions after those ``past``
        holds (its key-value cache; ``cache``: return one), ``mask`` over the whole sequence.
        Positions are counted from each row's first token, so a row's numbers do not depend on
        its padding."""
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, mask.shape[1] - embeds.shape[1] :]
        backbone = self.lm.get_decoder()  # (a vision-language model's language model)
        return backbone(
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=positions,
            **cache_inputs(backbone, past),  # (the keyword of this transformers version)
            use_cache=cache,
        )

    def _logits(self, hidden: torch.Tensor, dims: slice) -> torch.Tensor:
        """``[B, d, bins]`` action-token logits of dimensions ``dims`` from their positions'
        hidden states ``[B, d, H]`` (the LM head's action rows; a dimension's unused tokens
        masked out)."""
        head = self.lm.get_output_embeddings()
        bias = None if head.bias is None else head.bias[self.action_ids]
        logits = F.linear(hidden, head.weight[self.action_ids], bias)
        return logits.masked_fill(~self.allowed[dims], float("-inf"))

    def _action_embeds(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm.get_input_embeddings()(self.action_ids[tokens])

    # the actor-critic interface ----------------------------------------------------------------

    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Actions (decoded dimension by dimension, each after the key-value cache of what came
        before), their log-probs ``[B]`` and values ``[B]``."""
        embeds, mask = self._prompt(obs)
        ones = torch.ones_like(mask[:, :1])
        tokens, log_prob, value = [], torch.zeros(obs.shape[0], device=obs.device), None
        several = len(self.dims) > 1  # each later dimension reads the prefix's cached keys
        out = self._run(embeds, mask, cache=several)
        for d in range(len(self.dims)):
            last = out.last_hidden_state[:, -1]
            if value is None:
                value = self.value_head(last).squeeze(-1)
            logits = self._logits(last[:, None], slice(d, d + 1))[:, 0]
            if deterministic:
                pick = logits.argmax(-1)
            else:
                probs = torch.softmax(logits.float(), -1)
                pick = torch.multinomial(probs, 1, generator=generator)[:, 0]
            log_prob = log_prob + token_log_probs(logits, pick)
            tokens.append(pick)
            if d + 1 < len(self.dims):
                mask = torch.cat([mask, ones], dim=1)
                past = output_cache(out)
                out = self._run(self._action_embeds(pick)[:, None], mask, past, cache=True)
        return self.env_actions(torch.stack(tokens, dim=1)), log_prob, value

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs ``[B]``, entropies ``[B]`` and values ``[B]`` of ``actions``, teacher-forced
        in one pass."""
        tokens = self.action_tokens(actions)
        embeds, mask = self._prompt(obs)
        width, count = embeds.shape[1], len(self.dims)
        if count > 1:
            embeds = torch.cat([embeds, self._action_embeds(tokens[:, :-1])], dim=1)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], count - 1))], dim=1)
        hidden = self._hidden(embeds, mask)
        logits = self._logits(hidden[:, width - 1 :], slice(0, count))  # [B, D, bins]
        # the LM actor's own token log-prob and entropy, summed over the action's dimensions
        chosen = token_log_probs(logits, tokens).sum(1)
        entropy = entropy_from_logits(logits.float()).sum(1)
        return chosen, entropy, self.value_head(hidden[:, width - 1]).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        embeds, mask = self._prompt(obs)
        return self.value_head(self._hidden(embeds, mask)[:, -1]).squeeze(-1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor):
        """``evaluate``: training goes through ``forward`` so that DDP sees it."""
        return self.evaluate(obs, actions)


def _left_packed(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The tiny model's ids of instructions given as character codes (0 pads, anywhere after
    the text), left-padded, and their mask."""
    lengths = (codes > 0).sum(1)
    width = int(lengths.max())
    order = torch.arange(width, device=codes.device)[None, :]
    start = width - lengths[:, None]  # left padding: row i's text ends at ``width``
    gather = (order - start).clamp(min=0)
    ids = torch.where(order >= start, codes.gather(1, gather), 0)
    return ids, (order >= start).long()


TINY_PIXEL_STATS = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))  # the tiny vision tower's [-1, 1] input
CLIP_PIXEL_STATS = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))


def _pixel_stats(folder: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The per-channel mean and std a model folder's image processor normalises pixels by
    (``preprocessor_config.json``, read as JSON), CLIP's when it gives none."""
    described = Path(str(folder)) / "preprocessor_config.json"
    if not described.is_file():
        return CLIP_PIXEL_STATS
    stats = json.loads(described.read_text())
    mean, std = stats.get("image_mean", CLIP_PIXEL_STATS[0]), stats.get("image_std")
    return tuple(mean), tuple(std or CLIP_PIXEL_STATS[1])


def tiny_vision_side(spec: Any, lm: Any) -> int:
    """The tiny vision tower's square side (``ConfigError`` when its patch does not divide
    it)."""
    side = lm.vision.image_size or max(spec.obs_image[:2])
    if side % lm.vision.patch_size:
        raise ConfigError(
            f"{KEY}.vision.patch_size: {lm.vision.patch_size} does not divide the image side "
            f"{side} ({KEY}.vision.image_size, or the env image's larger side when null); pick "
            "a divisor"
        )
    return side


def _tiny_backbone(spec: Any, lm: Any) -> nn.Module:
    """The tiny LM (a tiny LLaVA when the env observes an image) over the instruction's
    character set, seeded from torch's global RNG."""
    from rlcore.models.lm import build_tiny_lm

    vocab = _CharVocab(spec.obs_text[1] if spec.obs_text else "", lm.action_bins)
    t = lm.tiny
    vision = None
    if spec.obs_image is not None:
        vision = (tiny_vision_side(spec, lm), lm.vision.patch_size, spec.obs_image[2])
    return build_tiny_lm(
        vocab,
        hidden_size=t.hidden_size,
        num_layers=t.num_layers,
        num_heads=t.num_heads,
        intermediate_size=t.intermediate_size,
        seed=int(torch.randint(2**31, (1,))),
        vision=vision,
    )


def vision_problem(config: Any, path: str | None) -> None:
    """``ConfigError`` unless a model (``config``) has a LLaVA-style vision encoder for an
    env's image entry: a ``vision_config`` of a fixed square image size and the feature
    selection ``get_image_features`` takes."""
    fits = hasattr(config, "vision_config") and hasattr(config, "vision_feature_layer")
    fits = fits and isinstance(getattr(config.vision_config, "image_size", None), int)
    if not fits:
        raise ConfigError(
            f"{KEY}.path: the env observes an image, and {path} is a "
            f"{getattr(config, 'model_type', '?')} model without a LLaVA-style vision encoder "
            "(a vision_config of fixed image size, get_image_features); give a vision-language "
            "model folder of that family, leave path out for the tiny one with a vision tower, "
            "or drop the env's image entry"
        )


def check_lm_policy(spec: Any, lm: Any, normalize_obs: bool) -> None:
    """What an LM policy refuses, before anything starts: a model folder that is not one (a hub
    id is fetched into the local cache here, once), a discrete dimension with more actions than
    ``action_bins``, an unbounded Box, images without an instruction, an image entry the model
    has no vision encoder for, normalised instructions."""
    if lm.path is not None:
        from rlcore.models.hub import local_model_dir
        from rlcore.models.lm import check_model_dir

        folder = local_model_dir(lm.path, f"{KEY}.path")
        check_model_dir(str(folder), f"{KEY}.path", tokenizer=True)
        if spec.obs_image is not None:
            from transformers import AutoConfig

            vision_problem(
                AutoConfig.from_pretrained(str(folder), trust_remote_code=False), lm.path
            )
    elif spec.obs_image is not None:
        tiny_vision_side(spec, lm)
    action_dims(spec, lm.action_bins)
    if len(spec.obs_shape) != 1:
        raise ConfigError(
            f"actor.model.type: lm reads an instruction and a state vector, and an image beside "
            f"them; this env observes {spec.obs_shape} images alone: give it a Dict observation "
            "with 'instruction', 'state' and 'image' entries (docs/embodied.md)"
        )
    if normalize_obs and spec.obs_text is not None:
        raise ConfigError(
            "env.normalize_obs: an LM policy reads the instruction's characters from the "
            "observation, and normalisation would change them; set env.normalize_obs=false"
        )
