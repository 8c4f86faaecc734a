"""Asynchronous reasoning iterations (``runner.max_staleness`` = k >= 1): the rollout generates
the next batches with the weights it holds while the actor and critic train on this one.

Every call below is submitted to the component's processes without waiting (``submit``), and a
process runs the calls it is given in order; the driver waits only for what it reads. One
iteration, batch i at actor version v (docs/async.md draws it):

    wait for batch i's responses (submitted k iterations ago, with weights v_i >= v - k)
    reward.score(i)                                       the reward's process
    actor.compute_log_probs(i), ref(i), critic.values(i)  submitted at once
    rollout.generate(batch i + k) with version v          the rollout's process, after values(i)
    advantages (here), then critic.update(i) and actor.update(i) side by side
    v += 1; the new weights sent to the rollout (started, not waited for: the rollout takes
    them after the generation it is busy with, before the next one)

so a batch generated with version g is trained on at version v with v - g <= k (checked: the
run stops rather than train on an older batch), and the rollout, the actor and the critic each
work while the others do. The old log-probs are recomputed by the actor (the proximal policy)
and the rollout's own are kept: the rollout correction (``algorithm.rollout_correction``) and its
``rollout_corr/`` metrics compare them. ``async/staleness`` is v - g of the iteration's batch.

With ``rollout.partial_rollout`` a batch is generated in segments of
``rollout.partial_rollout_tokens`` tokens a row (``begin_partial``, ``advance_partial``,
``finish_partial`` on the rollout): while the actor and critic update, the driver gives the
rollout the next segment whenever the last is done, so the weight sync submitted after the
update runs between two segments, and the rest of the batch is generated with the new weights
from where it stopped (``rollout_versions``: each token's version). The batch's version, for
the bound, is the one it began with; ``async/token_staleness_mean`` is the tokens' own.

A checkpoint holds the prompt sampler as it was before the batches in flight were drawn, so a
resumed run draws and generates them again, with the resumed weights (``summary.json``:
``async.regenerated_on_resume``).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from rlcore.columns import ATTENTION_MASK, LOSS_MASK, RESPONSE_MASK, ROLLOUT_VERSIONS
from rlcore.data.sampler import prompt_batch
from rlcore.data.sequences import trim_padding
from rlcore.runners import reasoning_metrics
from rlcore.runners.advantages import reasoning_advantages
from rlcore.runners.progress import Stopwatch
from rlcore.scheduler.handles import Pending, submit, wait_any

PARTIAL_ROLLOUT_TOKENS = 16  # rollout.partial_rollout_tokens: null


class StalenessError(RuntimeError):
    """A batch older than ``runner.max_staleness`` reached the trainer (a bug, never data)."""


@dataclass
class InFlight:
    """A batch being made: what it was asked with (a reasoning batch's prompts), the answer to
    come, the weights' version it samples with, and the state to resume from so that a resumed
    run makes it again (the prompt sampler's before its prompts were drawn)."""

    asked: Any
    answer: Pending | None  # None: a partial rollout whose last segments are still to come
    version: int
    before: Any = None
    key: int | None = None  # a partial rollout's, on the rollout
    segments: int = 0  # a partial rollout's segments submitted
    last: Pending | None = None  # its last segment's answer: whether every row has ended
    begun: Pending | None = None  # its begin_partial's (read first: its error is the cause)


class Ahead:
    """The batches in flight of an asynchronous run, both modes: at most ``bound`` batches
    made ahead of the one trained on, and each trained on at most ``bound`` actor updates after
    the weights that made it (``take`` checks), and the weight copies started to wait for."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.queue: deque[InFlight] = deque()
        self.syncing: list[Any] = []  # weight copies started, to wait for (their errors)
        self.staleness: list[int] = []  # of each batch trained on since this process started

    def top_up(self, wanted: int, start: Any) -> None:
        """Batches in flight up to ``min(bound, wanted)``, each ``start()``ed (none made that no
        iteration will take: ``wanted`` counts the batches still to train on)."""
        while len(self.queue) < min(self.bound, wanted):
            self.queue.append(start())

    def take(self, version: int) -> tuple[InFlight, Any, int]:
        """The oldest batch, its answer (waited for) and its staleness at ``version``; the
        weight copies started before are waited for too (their errors surface here)."""
        batch = self.queue.popleft()
        answer = batch.answer.result()
        for wait in self.syncing:
            wait()
        self.syncing.clear()
        staleness = version - batch.version
        if staleness > self.bound:
            raise StalenessError(
                f"a batch made with weights {batch.version} reached the trainer at version "
                f"{version}: {staleness} > runner.max_staleness={self.bound}"
            )
        self.staleness.append(staleness)
        return batch, answer, staleness

    def summary(self, regenerated: int) -> dict[str, Any]:
        """``summary.json``'s ``async``: the bound, the staleness of the batches trained on
        (since this process started), and the batches a resume made again."""
        seen = self.staleness or [0]
        return {
            "max_staleness": self.bound,
            "staleness_mean": round(sum(seen) / len(seen), 4),
            "staleness_max": max(seen),
            "regenerated_on_resume": regenerated,
        }


class Pipeline(Ahead):
    """A reasoning run's batches in flight, and its iteration (module docstring)."""

    def __init__(self, runner: Any) -> None:
        """``runner``: the ``ReasoningRunner`` whose components and state it drives."""
        super().__init__(runner.config.runner.max_staleness)
        self.runner = runner
        rollout = runner.config.rollout
        self.partial = rollout.partial_rollout
        self.segment = rollout.partial_rollout_tokens or PARTIAL_ROLLOUT_TOKENS
        self.most_segments = math.ceil(runner.config.data.max_response_length / self.segment)
        self.keys = itertools.count()
        self.tokens_behind = [0, 0, 0, 0]  # versions behind summed, tokens, rows interrupted, rows

    def summary(self, regenerated: int) -> dict[str, Any]:
        """``Ahead.summary``; with partial rollouts also the tokens' mean staleness and the
        share of rows that took a weight update mid-generation (since this process started)."""
        out = super().summary(regenerated)
        if self.partial:
            behind, tokens, interrupted, rows = self.tokens_behind
            out["token_staleness_mean"] = round(behind / max(tokens, 1), 4)
            out["interrupted_share"] = round(interrupted / max(rows, 1), 4)
        return out

    def sampler_state(self) -> dict[str, Any]:
        """The prompt sampler as a checkpoint keeps it: before the batches in flight."""
        if self.queue:
            return self.queue[0].before
        return self.runner.sampler.state_dict()

    def _start(self) -> InFlight:
        """One more batch to generate, with the weights the rollout will hold by then (every
        copy started so far reaches it first)."""
        r = self.runner
        cfg = r.config
        before = r.sampler.state_dict()
        prompts = prompt_batch(
            r.sampler.next(cfg.data.train_batch_size),
            r.train_set,
            cfg.algorithm.group_size,
            r.tokenizer.pad_token_id,
        )
        if not self.partial:
            responses = submit(r.rollout, "generate", prompts, r.version, log_probs=True)
            return InFlight(prompts, responses, r.version, before)
        key = next(self.keys)
        begun = submit(r.rollout, "begin_partial", prompts, r.version, key)
        batch = InFlight(prompts, None, r.version, before, key=key, begun=begun)
        self._next_segment(batch)
        return batch

    def _next_segment(self, batch: InFlight) -> None:
        batch.last = submit(self.runner.rollout, "advance_partial", batch.key, self.segment)
        batch.segments += 1

    def _complete(self, batch: InFlight, ended: bool = False) -> None:
        """A partial rollout's remaining segments (none once every row has ``ended``) and its
        answer, submitted: they run after what the rollout was given before (a weight sync
        among it)."""
        if batch.answer is not None:
            return
        while not ended and batch.segments < self.most_segments:
            self._next_segment(batch)
        batch.answer = submit(self.runner.rollout, "finish_partial", batch.key)

    def _generate_while(self, waiting: list[Pending]) -> None:
        """Until every ``waiting`` answer is in: the batch being generated gets its next segment
        each time its last is done (until all its rows end), so the rollout is never idle and
        never more than a segment away from taking a weight sync. A minute with nothing done
        ends it: the caller's waits, which have deadlines, take over."""
        while not all(p.done() for p in waiting):
            open_ = next((b for b in self.queue if b.answer is None), None)
            if open_ is None or open_.last is None:
                return
            if open_.last.done():
                open_.begun.result()  # (a failed start raises here, not as a missing key)
                ended = bool(open_.last.result().all())
                if ended or open_.segments >= self.most_segments:
                    self._complete(open_, ended)
                else:
                    self._next_segment(open_)
            elif not wait_any([*waiting, open_.last], timeout_s=60.0):
                return

    def take(self, version: int) -> tuple[InFlight, Any, int]:
        if self.queue:
            head = self.queue[0]
            self._complete(head)
            if head.begun is not None:
                head.begun.result()
        return super().take(version)

    def iterate(self, iteration: int) -> dict[str, float]:
        r, watch = self.runner, Stopwatch()
        cfg = r.config
        left = cfg.runner.total_iterations - iteration  # batches to train on after this one
        if not self.queue:  # the first iteration (of a start or a resume): fill the pipeline
            with watch("sync"):
                r.sync()
            self.top_up(left + 1, self._start)
        with watch("wait_generate"):
            current, responses, staleness = self.take(r.version)
            batch = current.asked.update(responses)
        with watch("reward"):
            scored = r.score(batch)
        batch = trim_padding(batch)
        passes = r.passes.submit(batch)  # old log-probs, the reference's, values
        self.top_up(left, self._start)  # after this batch's passes, in each process
        with watch("passes"):
            r.passes.wait(passes, batch)
        metrics: dict[str, float] = {
            "sampling/generated_tokens": float(batch[LOSS_MASK].sum()),
            "async/staleness": float(staleness),
        }
        with watch("advantages"):
            metrics.update(reasoning_advantages(cfg.algorithm, r.kl_ctrl, batch, scored))
        updates = {}
        if r.critic is not None:
            updates["critic"] = submit(r.critic, "update", batch)
        trains = iteration > cfg.critic.critic_warmup
        if trains:
            updates["actor"] = submit(r.actor, "update", batch)
        with watch("updates"):
            if self.partial:
                self._generate_while(list(updates.values()))
            for pending in updates.values():
                metrics.update(pending.result())
        if trains:
            metrics["perf/update_padding_share"] = metrics["actor/padding_share"]
            r.version += 1
            self.syncing.append(r.components.start_sync("actor", "rollout", r.version))
        if self.partial:  # the rest of the batches in flight, after the sync
            for waiting in self.queue:
                self._complete(waiting)
            behind, tokens, interrupted = token_staleness(batch, r.version - int(trains))
            for i, value in enumerate((behind, tokens, interrupted, len(batch))):
                self.tokens_behind[i] += value
            metrics["async/token_staleness_mean"] = behind / max(tokens, 1)
            metrics["async/interrupted_share"] = interrupted / len(batch)
        metrics.update(reasoning_metrics.batch_metrics(cfg, batch, scored))
        metrics.update(r.normalized)
        metrics.update(watch.metrics())
        total = sum(watch.seconds.values())
        metrics["perf/tokens_per_s"] = float(batch[ATTENTION_MASK].sum()) / max(total, 1e-9)
        generated = metrics.pop("sampling/generated_tokens")
        metrics["perf/generated_tokens_per_s"] = generated / max(total, 1e-9)
        r.generated_tokens += int(generated)
        return metrics


def token_staleness(batch: Any, version: int) -> tuple[int, int, int]:
    """A partial rollout's batch trained on at ``version``: the versions its response tokens
    were sampled behind it, summed; its response tokens; its rows sampled with more than one
    version (a weight update taken mid-generation)."""
    made, mask = batch[ROLLOUT_VERSIONS], batch[RESPONSE_MASK].bool()
    behind = (version - made).masked_select(mask)
    low = made.masked_fill(~mask, 1 << 40).min(-1).values
    high = made.masked_fill(~mask, -1).max(-1).values
    return int(behind.sum()), int(mask.sum()), int((high > low).sum())
