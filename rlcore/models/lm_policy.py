"""``LMPolicy``: a causal language model acting in a simulator (``actor.model.type: lm``), the
shape of RLinf's VLA policies on a CPU-sized model.

What the model sees, for one observation (``envs.language``: the instruction's characters, then
the state): the instruction's tokens, then one *state token*, the state through a learned
projection into the embedding space, then for an action of D dimensions the action tokens of
dimensions 0..D-2. Each action dimension is one token among the vocabulary's last
``actor.model.lm.action_bins`` (RT-2/OpenVLA), predicted at the position before it: a Discrete
space's action ``k`` is token ``k``; a Box dimension's bin ``k`` of ``bins`` equal bins over
``[low, high]`` is token ``k``, sent to the env as the bin's centre. An action's log-probability
is the sum over its dimensions (decoded autoregressively when acting, teacher-forced when
training), its entropy the sum of the dimensions' conditional entropies. The value head reads the
last hidden state of the state token: the card's shared-backbone actor-critic, trained by the
Huber value loss with value clipping (``loss_type: actor_critic``).

The backbone is a Hugging Face causal LM folder (``actor.model.lm.path``; its tokenizer reads the
instruction), or a tiny Qwen2-architecture model built here whose vocabulary is the instruction's
character set (token = character code), padding and the action tokens; with
``actor.model.lm.lora.rank`` > 0 it trains through LoRA adapters (the LM side's ``with_lora``).
It exposes the interface of the built-in actor-critic (``act``, ``evaluate``, ``value``,
``forward``), so that the rollout, the PPO update, weight sync and checkpoints treat it as any
other policy.
"""

from __future__ import annotations

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

    def __init__(self, spec: Any, lm: Any) -> None:
        super().__init__()
        self.spec = spec
        self.text_length, self.charset = spec.obs_text or (0, "")
        bins = lm.action_bins
        self.dims = action_dims(spec, bins)
        if lm.path is None:
            from rlcore.models.lm import build_tiny_lm

            vocab = _CharVocab(self.charset, bins)
            tiny = lm.tiny
            self.lm = build_tiny_lm(
                vocab,
                hidden_size=tiny.hidden_size,
                num_layers=tiny.num_layers,
                num_heads=tiny.num_heads,
                intermediate_size=tiny.intermediate_size,
                seed=int(torch.randint(2**31, (1,))),
            )
            self.tokenizer = None  # the character codes are the tokens
        else:
            from rlcore.models.hub import local_model_dir
            from rlcore.models.lm import load_causal_lm, load_tokenizer

            folder = local_model_dir(lm.path, f"{KEY}.path")
            self.lm = load_causal_lm(folder, "float32")
            self.tokenizer = load_tokenizer(folder)
        if lm.lora.rank:  # the adapters go into the LM's layers in place; its weights freeze
            from rlcore.models.lm import with_lora

            with_lora(self.lm, lm.lora)
        self.lm.config.use_cache = False
        self.tokens_of: dict[str, list[int]] = {}  # an instruction's tokens (a tokenizer's)
        rows = self.lm.get_input_embeddings().weight.shape[0]
        hidden = self.lm.config.hidden_size
        state_dim = spec.obs_shape[0] - self.text_length
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
        """``[B, P, H]`` embeddings (instruction tokens left-padded, then the state token) and
        their ``[B, P]`` attention mask."""
        state = self.state_proj(obs[:, self.text_length :])[:, None]
        if self.text_length == 0:
            return state, torch.ones(state.shape[:2], dtype=torch.long, device=obs.device)
        codes = obs[:, : self.text_length].round().long()
        if self.tokenizer is None:
            lengths = (codes > 0).sum(1)
            width = int(lengths.max())
            order = torch.arange(width, device=obs.device)[None, :]
            start = width - lengths[:, None]  # left padding: row i's text ends at ``width``
            gather = (order - start).clamp(min=0)
            ids = torch.where(order >= start, codes.gather(1, gather), 0)
            mask = (order >= start).long()
        else:
            ids, mask = self._tokenized(codes)
        text = self.lm.get_input_embeddings()(ids)
        embeds = torch.cat([text, state], dim=1)
        ones = torch.ones((obs.shape[0], 1), dtype=mask.dtype, device=mask.device)
        return embeds, torch.cat([mask, ones], dim=1)

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
        backbone = getattr(self.lm, self.lm.base_model_prefix)
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


def check_lm_policy(spec: Any, lm: Any, normalize_obs: bool) -> None:
    """What an LM policy refuses, before anything starts: a model folder that is not one (a hub
    id is fetched into the local cache here, once), a discrete dimension with more actions than
    ``action_bins``, an unbounded Box, images, normalised instructions."""
    if lm.path is not None:
        from rlcore.models.hub import local_model_dir
        from rlcore.models.lm import check_model_dir

        folder = local_model_dir(lm.path, f"{KEY}.path")
        check_model_dir(str(folder), f"{KEY}.path", tokenizer=True)
    action_dims(spec, lm.action_bins)
    if len(spec.obs_shape) != 1:
        raise ConfigError(
            f"actor.model.type: lm reads an instruction and a state vector; this env observes "
            f"{spec.obs_shape} images (image entries are not built yet)"
        )
    if normalize_obs and spec.obs_text is not None:
        raise ConfigError(
            "env.normalize_obs: an LM policy reads the instruction's characters from the "
            "observation, and normalisation would change them; set env.normalize_obs=false"
        )
