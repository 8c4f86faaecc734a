"""``reward.kind: judge``: a causal language model grades each response (a generative judge).

The reward component loads the judge (``reward.model.path``: a causal LM folder with its
tokenizer) on the device its placement gives it, in ``actor.model.dtype``. Each row's judge
prompt is ``reward.judge.template`` (a regular text file of at most 64 KiB) with ``{prompt}``,
``{response}`` and ``{answer}`` filled in as they are (``{response}`` is required; no format spec,
conversion, attribute or item; write a literal brace twice: ``{{``), sent
through the judge's chat template as a user turn when its tokenizer has one. The judge answers
greedily, at most ``reward.judge.max_new_tokens`` tokens, ``reward.model.micro_batch_size`` rows
at a time; ``reward.judge.parser``, a regular expression whose first group is a number, reads the
score from the first match in the answer (a judge that gives none scores 0, counted in
``reward/judge_unparsed``). The verdicts (accuracy) and the combination with the rule's score are
those of ``kind: model`` (``reward.model.rule``, ``reward.model.combine``). Each row's raw judge
answer goes to the validation samples in the run folder.

``reward.judge.backend: sglang`` generates with an SGLang engine (``sglang_engine.start_engine``,
the rollout's adapter) started on the reward process's GPUs, tensor parallel over them: the
judge prompts go in as token ids, all rows in one call (the engine batches them), greedy, stopped
at the judge's end-of-sequence ids, and the answers are decoded as the hf path decodes them
(tested against the fake engine: the same answers as the hf judge).
"""

from __future__ import annotations

import os
import re
import stat
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlcore.config.errors import ConfigError
from rlcore.models.lm import DTYPES, load_tokenizer
from rlcore.rewards.model import described_model, encoded_in_parts
from rlcore.rewards.verdicts import Verdict

if TYPE_CHECKING:
    from rlcore.rewards.scorer import Rows

PLACEHOLDERS = ("prompt", "response", "answer")
TEMPLATE_MAX_BYTES = 64 * 1024


def read_template(path: str) -> str:
    """``reward.judge.template``'s text, or ``ConfigError`` when it is no regular file of at
    most ``TEMPLATE_MAX_BYTES`` (``template_text``), or fills in other placeholders than
    ``PLACEHOLDERS``, or not ``{response}``, or formats one: a format spec, a conversion, an
    attribute or an item (``{response:>100000000}`` would make every judge prompt 100 MB)."""
    text = template_text(path)
    try:
        fields = [(f, s, c) for _, f, s, c in string.Formatter().parse(text) if f is not None]
    except ValueError as error:
        raise ConfigError(
            f"reward.judge.template: {path} is not a template ({error}); write a literal brace "
            "twice ({{ or }})"
        ) from None
    names = {field for field, _, _ in fields}
    unknown = sorted(names - set(PLACEHOLDERS))
    if unknown:
        raise ConfigError(
            f"reward.judge.template: {path} fills in {', '.join(map(_shown, unknown))}, which "
            "rlcore does not give as such; use {prompt}, {response} and {answer}, each as it is "
            "(no attribute or item; a literal brace: {{ or }})"
        )
    formatted = [(f, s, c) for f, s, c in fields if s or c]
    if formatted:
        field, spec, conversion = formatted[0]
        written = field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
        raise ConfigError(
            f"reward.judge.template: {path} formats {{{' '.join(written.split())[:80]}}}; "
            f"rlcore fills each placeholder in as it is: write {{{field}}}"
        )
    if "response" not in names:
        raise ConfigError(
            f"reward.judge.template: {path} has no {{response}}, so the judge would never see "
            "the answer it grades; put {response} where it goes"
        )
    return text


def _shown(field: str) -> str:
    return " ".join(field.split())[:80] or "{}"  # (one line; {} is a positional field)


def template_text(path: str) -> str:
    """The text of ``path`` if it is a regular file of at most ``TEMPLATE_MAX_BYTES`` of UTF-8,
    else ``ConfigError``: a FIFO or a device would block the dry run, or never end."""
    file = Path(path).expanduser()
    try:
        kind = _not_regular(os.stat(file).st_mode)
        if kind is None:
            descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK)  # (swapped for a FIFO since)
            with os.fdopen(descriptor, "rb") as handle:
                kind = _not_regular(os.fstat(handle.fileno()).st_mode)
                data = b"" if kind else handle.read(TEMPLATE_MAX_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"reward.judge.template: {path} cannot be read ({error})") from None
    if kind is not None:
        raise ConfigError(
            f"reward.judge.template: {path} is {kind}, not a regular file; give a text file"
        )
    if len(data) > TEMPLATE_MAX_BYTES:
        raise ConfigError(
            f"reward.judge.template: {path} is larger than {TEMPLATE_MAX_BYTES // 1024} KiB, "
            "which no judge prompt needs; give the template alone"
        )
    try:
        return data.decode()
    except UnicodeDecodeError as error:
        raise ConfigError(f"reward.judge.template: {path} is not UTF-8 text ({error})") from None


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is, if it is not a regular file."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def compile_parser(pattern: str) -> re.Pattern[str]:
    """``reward.judge.parser`` compiled, or ``ConfigError`` naming what is wrong with it."""
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise ConfigError(
            f"reward.judge.parser: {pattern!r} is no regular expression ({error})"
        ) from None
    if compiled.groups < 1:
        raise ConfigError(
            f"reward.judge.parser: {pattern!r} has no group; put the score in the first one, "
            "e.g. 'Score: (-?\\d+(?:\\.\\d+)?)'"
        )
    return compiled


def parse_score(parser: re.Pattern[str], output: str) -> float | None:
    """The number the judge's ``output`` gives by ``parser`` (its first match's first group),
    or None when it gives none."""
    found = parser.search(output)
    if found is None:
        return None
    try:
        value = float(found.group(1))
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def check_judge(path: str) -> Path:
    """``path`` as a folder holding a causal LM and its tokenizer, or ``ConfigError``."""
    directory, _, architectures = described_model(path)
    if not any(a.endswith("ForCausalLM") for a in architectures):
        raise ConfigError(
            f"reward.model.path: {path} is not a causal language model (architectures "
            f"{architectures or 'none'}); reward.kind judge generates with one"
        )
    return directory


class JudgeScorer:
    """The judge of ``config.reward`` on ``device`` (see the module docstring)."""

    def __init__(self, config: Any, device: torch.device, ctx: Any = None) -> None:
        reward = config.reward
        directory = check_judge(reward.model.path)
        self.template = read_template(reward.judge.template)
        self.parser = compile_parser(reward.judge.parser)
        self.tokenizer = load_tokenizer(directory)
        self.tokenizer.padding_side = "left"  # generation continues each row's end
        self.model = self.engine = None
        if reward.judge.backend == "sglang":  # on the reward process's GPUs
            from rlcore.workers.reasoning import sglang_engine

            gpus = len(ctx.devices) if ctx is not None and ctx.device == "cuda" else 1
            self.engine = sglang_engine.start_engine(
                model_path=str(directory),
                tp_size=gpus,
                dtype=config.actor.model.dtype,
                skip_tokenizer_init=True,  # ids in, ids out (greedy: no seed needed)
                base_gpu_id=0,
                log_level="error",
            )
            self.stop_ids = sglang_engine.eos_ids(directory, self.tokenizer)
        else:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(
                str(directory),
                dtype=DTYPES[config.actor.model.dtype],
                trust_remote_code=False,
                use_safetensors=True,
            ).to(device)
            self.model.eval()
        self.device = device
        self.micro = reward.model.micro_batch_size
        self.max_new_tokens = reward.judge.max_new_tokens
        self.chat = getattr(self.tokenizer, "chat_template", None) is not None
        self.outputs: list[str] = []  # the judge's answers to the last rows scored
        self.unparsed = 0  # of those, answers that gave no score

    def judge_prompt(self, prompt: str, response: str, answer: str | None) -> str:
        text = self.template.format(prompt=prompt, response=response, answer=answer or "")
        if not self.chat:
            return text
        turn = [{"role": "user", "content": text}]
        return self.tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)

    def score(self, rows: Rows) -> list[Verdict]:
        """The ``Scorer`` seam: each row's score, with no verdict (the rule gives it)."""
        scores = self.scores(rows.prompts, rows.texts, rows.answers)
        return [Verdict(float(s), None, judged=False) for s in scores]

    @torch.no_grad()
    def scores(
        self, prompts: list[str], responses: list[str], answers: list[str | None]
    ) -> torch.Tensor:
        """``[B]`` float32 scores (0 where the judge gave none); ``outputs`` keeps its answers."""
        texts = [
            self.judge_prompt(p, r, a) for p, r, a in zip(prompts, responses, answers, strict=True)
        ]
        self.outputs = (
            self._hf_answers(texts) if self.engine is None else self._sglang_answers(texts)
        )
        parsed = [parse_score(self.parser, output) for output in self.outputs]
        self.unparsed = sum(value is None for value in parsed)
        scores = [0.0 if value is None else value for value in parsed]
        return torch.tensor(scores, dtype=torch.float32)

    def _hf_answers(self, texts: list[str]) -> list[str]:
        """transformers' greedy answers to ``texts``, ``reward.model.micro_batch_size`` at a
        time, left-padded."""
        answers: list[str] = []
        for encoded in encoded_in_parts(self, texts):
            out = self.model.generate(
                **encoded,
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            new = out[:, encoded["input_ids"].shape[1] :]
            answers += self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return answers

    def _sglang_answers(self, texts: list[str]) -> list[str]:
        """The SGLang engine's greedy answers to ``texts`` (token ids in, every row in one
        call: the engine batches them itself), decoded as the hf path decodes."""
        ids = [
            self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"] for text in texts
        ]
        params = {
            "temperature": 0.0,
            "max_new_tokens": self.max_new_tokens,
            "stop_token_ids": list(self.stop_ids),
            "skip_special_tokens": False,
        }
        outputs = self.engine.generate(input_ids=ids, sampling_params=params) if ids else []
        return [
            self.tokenizer.decode(list(out["output_ids"]), skip_special_tokens=True)
            for out in outputs
        ]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
