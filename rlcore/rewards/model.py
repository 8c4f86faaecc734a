"""``reward.kind: model``: a discriminative reward model (a Hugging Face sequence-classification
model with one label, e.g. a Bradley-Terry RM) scores each response: its logit is the score.

The reward component loads it on the device its placement gives it, in ``actor.model.dtype``,
with its own tokenizer. Each row's text is the conversation ``[user: prompt, assistant:
response]`` through the RM's chat template when it has one, else the prompt followed by the
response; rows go through the model ``reward.model.micro_batch_size`` at a time, right-padded
(the model reads its score at the last token that is not padding), so the micro-batch size does
not change a score. ``reward.model.score_clip`` clips the scores to ``[-c, c]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlcore.config.errors import ConfigError
from rlcore.models.folder_safety import check_score_head
from rlcore.models.lm import DTYPES, check_model_dir, load_tokenizer
from rlcore.rewards.verdicts import Verdict

if TYPE_CHECKING:
    from rlcore.rewards.scorer import Rows


def described_model(path: str) -> tuple[Path, dict[str, Any], list[str]]:
    """``reward.model.path`` checked as a model folder with a tokenizer (``ConfigError``
    otherwise): the folder, its config.json and its architectures."""
    directory = check_model_dir(path, "reward.model.path", tokenizer=True)
    described = json.loads((directory / "config.json").read_text())
    return directory, described, described.get("architectures") or []


def encoded_in_parts(scorer: Any, texts: list[str]) -> Iterator[Any]:
    """``texts`` tokenised ``scorer.micro`` at a time, padded on the tokenizer's side, on
    ``scorer.device`` (special tokens added unless a chat template wrote them)."""
    for start in range(0, len(texts), scorer.micro):
        yield scorer.tokenizer(
            texts[start : start + scorer.micro],
            return_tensors="pt",
            padding=True,
            add_special_tokens=not scorer.chat,
        ).to(scorer.device)


def check_reward_model(path: str) -> Path:
    """``path`` as a folder holding a sequence-classification model with one label, its score
    head and its tokenizer, or ``ConfigError`` naming ``reward.model.path``."""
    directory, described, architectures = described_model(path)
    labels = described.get("num_labels", len(described.get("id2label") or {}) or 2)
    if not any(a.endswith("ForSequenceClassification") for a in architectures) or labels != 1:
        raise ConfigError(
            f"reward.model.path: {path} is not a sequence-classification model with one label "
            f"(architectures {architectures or 'none'}, {labels} labels); give a reward model "
            "(AutoModelForSequenceClassification, num_labels=1), e.g. one trained by "
            "examples/reasoning/train_reward_model.py"
        )
    check_score_head(directory, "reward.model.path")
    return directory


def reward_model_text(tokenizer: Any, prompt: str, response: str) -> str:
    """What a reward model reads for one row: the conversation through its chat template when
    its tokenizer has one, else the prompt followed by the response."""
    if getattr(tokenizer, "chat_template", None) is None:
        return prompt + response
    conversation = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": response},
    ]
    return tokenizer.apply_chat_template(conversation, tokenize=False)


class ModelScorer:
    """The reward model of ``config.reward`` on ``device`` (see the module docstring)."""

    def __init__(self, config: Any, device: torch.device, ctx: Any = None) -> None:
        from transformers import AutoModelForSequenceClassification

        reward = config.reward
        directory = check_reward_model(reward.model.path)
        self.tokenizer = load_tokenizer(directory)
        self.tokenizer.padding_side = "right"
        self.model, loaded = AutoModelForSequenceClassification.from_pretrained(
            str(directory),
            dtype=DTYPES[config.actor.model.dtype],
            trust_remote_code=False,
            use_safetensors=True,
            output_loading_info=True,
        )
        if loaded["missing_keys"]:  # (check_score_head's verdict, by transformers' own loader)
            raise ConfigError(
                f"reward.model.path: {directory} lacks weights the model needs "
                f"({', '.join(sorted(loaded['missing_keys']))}), which would start at random; "
                "give the folder of a trained reward model"
            )
        self.model = self.model.to(device)
        self.model.eval()
        if self.model.config.pad_token_id is None:  # the score is read before the padding
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        # reward.model.backend fsdp2: the weights sharded over the reward ranks, so that every
        # pass is a collective of all of them (``collective``)
        self.sharded = None
        if reward.model.backend == "fsdp2":
            from rlcore.workers.training.strategy import make_strategy

            self.sharded = make_strategy(ctx, "fsdp2")
            self.model = self.sharded.wrap(self.model)
        self.device = device
        self.micro = reward.model.micro_batch_size
        self.clip = reward.model.score_clip
        self.chat = getattr(self.tokenizer, "chat_template", None) is not None

    def score(self, rows: Rows) -> list[Verdict]:
        """The ``Scorer`` seam: each row's score, with no verdict (the rule gives it)."""
        return [
            Verdict(float(s), None, judged=False) for s in self.scores(rows.prompts, rows.texts)
        ]

    @torch.no_grad()
    def scores(self, prompts: list[str], responses: list[str]) -> torch.Tensor:
        """``[B]`` float32 scores, one per (prompt, response)."""
        texts = [
            reward_model_text(self.tokenizer, p, r) for p, r in zip(prompts, responses, strict=True)
        ]
        parts = list(encoded_in_parts(self, texts))
        extra = self._passes_behind_the_other_ranks(len(parts))
        scores = [self.model(**encoded).logits[:, 0].float().cpu() for encoded in parts]
        if extra:  # (discarded: they join the other ranks' gathers)
            filler = self.tokenizer(["."], return_tensors="pt").to(self.device)
            for _ in range(extra):
                self.model(**filler)
        if self.sharded is not None:  # FSDP2 keeps the root's weights gathered after a pass
            self.model.reshard()
        out = torch.cat(scores) if scores else torch.zeros(0)
        return out.clamp(-self.clip, self.clip) if self.clip is not None else out

    def close(self) -> None:
        self.model = None

    @property
    def collective(self) -> bool:
        """Whether a pass needs every reward rank (FSDP2 over several): each must then call
        ``scores`` as often as the others, with no rows if it has none to score."""
        return self.sharded is not None and self.sharded.world_size > 1

    def _passes_behind_the_other_ranks(self, passes: int) -> int:
        """FSDP2 over several ranks: a pass gathers each layer's shards from every rank, so a
        rank with fewer micro-batches than another makes this many more passes of one dummy
        row, after its own (agreed on before any pass: collectives run in the same order on
        every rank). 0 otherwise."""
        if not self.collective:
            return 0
        import torch.distributed as dist

        most = torch.tensor([passes], device=self.device)  # (NCCL reduces CUDA tensors only)
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.sharded.group)
        return int(most) - passes
