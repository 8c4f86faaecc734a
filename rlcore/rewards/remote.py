"""``reward.kind: remote``: responses scored by an HTTP service (OpenRLHF's ``--remote_rm_url``,
a reward-model server, a sandbox), with the contract below so that anyone can write one.

Request: ``POST reward.remote.url`` with a JSON body

    {"items": [{"prompt": str, "response": str, "answer": str or null,
                "data_source": str or null}, ...]}

Answer: status 200 and

    {"scores": [float, ...]}                     one finite number per item, in order
    {"scores": [...], "correct": [bool, ...]}    and the verdicts the accuracy counts (optional)

Extra fields are allowed both ways. A batch goes in requests of ``reward.remote.batch_size``
items, ``reward.remote.concurrency`` of them in flight. A request that fails (no connection,
no whole answer within ``reward.remote.timeout_s``, status 5xx or 429) is tried again
``reward.remote.retries`` times, waiting 0.5 s, 1 s, 2 s ... between tries; one that still
fails, or is answered with another status (a 3xx too: redirects are not followed) or a
malformed body, is a failure. Malformed: not JSON, over ``MAX_ANSWER_BYTES``, nested deeper
than Python's JSON reader allows, an integer longer than Python converts, not one score per
item, or a score that is not a finite number within ``reward.score_range``.
``reward.remote.on_error`` says what a failure does: ``raise`` ends the run with one line naming the
URL (never its credentials: they are refused before the start) and what went wrong; ``zero``
scores the request's items 0, counted in ``reward/remote_failures`` and said on stderr. Each
try's cost is bounded whatever the service does (``bounded_post``).
"""

from __future__ import annotations

import json
import math
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rlcore.config.errors import ConfigError
from rlcore.config.service_url import redacted, url_problem
from rlcore.log import warn
from rlcore.rewards.bounded_post import PostFailed, bounded_post
from rlcore.rewards.verdicts import Verdict, shown_value

if TYPE_CHECKING:
    from rlcore.rewards.scorer import Rows

BACKOFF_S = 0.5  # the first wait before trying a request again; doubled at each try
# An answer is a few bytes per item; this leaves room for extra fields (echoed items) while a
# service that streams without end cannot fill the reward worker's memory.
MAX_ANSWER_BYTES = 16 << 20


class RemoteRewardError(ConfigError):
    """The reward service failed a request (``reward.remote.on_error: raise``): one line."""


@dataclass(frozen=True)
class RemoteScores:
    """One batch's answers: a score per item, the verdicts where the service gave them (else
    None), and the items of failed requests (scored 0 under ``on_error: zero``)."""

    scores: list[float]
    correct: list[bool] | None
    failed: int


class _Failure(Exception):
    """A request that failed; ``retry``: a try again may succeed."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def check_reachable(url: str, timeout_s: float = 5.0) -> None:
    """``ConfigError`` unless something accepts connections at ``url``'s host and port (what the
    dry run and the start check; the contract's POST is not sent)."""
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"reward.remote.url: {problem}")
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as error:
        raise ConfigError(
            f"reward.remote.url: {redacted(url)} is unreachable ({type(error).__name__}: {error}); "
            "start the reward service, or check the address"
        ) from None


class RemoteScorer:
    """The client of one reward service (see the module docstring); ``config``: the reward
    section."""

    def __init__(self, config: Any) -> None:
        remote = config.remote
        self.url = remote.url
        self.shown = redacted(remote.url)  # (credentials are refused earlier; never shown)
        self.score_range = tuple(config.score_range)
        self.batch_size = remote.batch_size
        self.timeout_s = remote.timeout_s
        self.retries = remote.retries
        self.on_error = remote.on_error
        self.pool = ThreadPoolExecutor(remote.concurrency, thread_name_prefix="reward")
        self.failed = 0  # the last batch's items whose requests failed (on_error: zero)

    def score(self, rows: Rows) -> list[Verdict]:
        """The ``Scorer`` seam: each row's verdict from the service; ``failed``: the rows of
        failed requests (scored 0 under ``reward.remote.on_error: zero``, said on stderr)."""
        items = [
            {"prompt": prompt, "response": text, "answer": answer, "data_source": source}
            for prompt, text, answer, source in zip(
                rows.prompts, rows.texts, rows.answers, rows.sources, strict=True
            )
        ]
        answer = self.ask(items)
        self.failed = answer.failed
        if answer.failed:
            warn(
                f"reward: {answer.failed} of {len(items)} responses score 0: their requests to "
                f"reward.remote.url {self.shown} failed (reward.remote.on_error=zero)"
            )
        judged = answer.correct is not None
        return [
            Verdict(score, answer.correct[i] if judged else None, judged=judged)
            for i, score in enumerate(answer.scores)
        ]

    def ask(self, items: list[dict[str, Any]]) -> RemoteScores:
        """Every item's score, in order (requests in parallel, each retried)."""
        chunks = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        answers = list(self.pool.map(self._request, chunks))
        scores: list[float] = []
        verdicts: list[bool] | None = []
        failed = 0
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, str):  # failed (on_error: zero)
                failed += len(chunk)
                scores += [0.0] * len(chunk)
                verdicts = None
                continue
            chunk_scores, chunk_correct = answer
            scores += chunk_scores
            if verdicts is not None and chunk_correct is not None:
                verdicts += chunk_correct
            else:
                verdicts = None
        return RemoteScores(scores, verdicts, failed)

    def _request(self, chunk: list[dict[str, Any]]) -> tuple[list[float], list[bool] | None] | str:
        body = json.dumps({"items": chunk}).encode()
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                return self._post(body, len(chunk))
            except _Failure as failure:
                problem = str(failure)
                if not failure.retry:
                    break
        tries = f"{attempt + 1} tr{'y' if attempt == 0 else 'ies'}"
        message = (
            f"reward.remote.url: {self.shown} failed a request of {len(chunk)} items "
            f"({tries}): {problem}"
        )
        if self.on_error == "raise":
            raise RemoteRewardError(
                f"{message}; fix the service, or set reward.remote.on_error=zero to score such "
                "requests 0 and go on"
            )
        return message

    def _post(self, body: bytes, count: int) -> tuple[list[float], list[bool] | None]:
        try:
            answer = bounded_post(self.url, body, self.timeout_s, MAX_ANSWER_BYTES)
        except PostFailed as failure:
            raise _Failure(str(failure), failure.retry) from None
        if 300 <= answer.status < 400:
            raise _Failure(
                f"status {answer.status} redirects to {answer.location!r}, which is not "
                "followed; set reward.remote.url to the address that scores",
                False,
            )
        if answer.status != 200:
            retry = answer.status >= 500 or answer.status == 429
            raise _Failure(f"status {answer.status} {answer.reason}", retry)
        return _parse(answer.body, count, self.score_range)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _parse(
    raw: bytes, count: int, score_range: tuple[float, float]
) -> tuple[list[float], list[bool] | None]:
    """The answer's scores (and verdicts), or a ``_Failure`` saying what is malformed."""
    try:
        answer = json.loads(raw)
    except RecursionError:
        raise _Failure(
            "the answer is nested deeper than Python's JSON reader allows", False
        ) from None
    except (ValueError, UnicodeDecodeError) as error:  # (JSONDecodeError is a ValueError)
        if "integer string conversion" in str(error):
            raise _Failure("the answer holds an integer of over 4300 digits", False) from None
        raise _Failure(f"the answer is not JSON: {raw[:80]!r}", False) from None
    scores = answer.get("scores") if isinstance(answer, dict) else None
    if not isinstance(scores, list) or len(scores) != count:
        got = "no 'scores' list" if not isinstance(scores, list) else f"{len(scores)} scores"
        raise _Failure(f"the answer has {got} for {count} items", False)
    low, high = score_range
    for index, score in enumerate(scores):
        # (ints compared as they are: a 4000-digit one has no float)
        number = isinstance(score, int | float) and not isinstance(score, bool)
        if not number or not (low <= score <= high) or not math.isfinite(float(score)):
            raise _Failure(
                f"score {index} is {shown_value(score)}, not a finite number in reward.score_range "
                f"[{low:g}, {high:g}]",
                False,
            )
    correct = answer.get("correct")
    if correct is not None and (
        not isinstance(correct, list)
        or len(correct) != count
        or not all(isinstance(c, bool) for c in correct)
    ):
        raise _Failure("'correct' must be one true or false per item", False)
    return [float(s) for s in scores], correct
