"""Where a reasoning iteration's batches come from, and how its stages run: the one iteration
(``ReasoningRunner.iterate``) drives a ``Lockstep`` at ``runner.max_staleness`` 0 (each batch
generated with the actor's weights when the iteration asks for it, every stage in turn) or a
``Pipeline`` at k >= 1 (asynchronous: the rollout generates the next batches with the weights it
holds while the actor and critic train on this one). Neither holds the runner: each is given the
prompts, the rollout, the passes and the components, and the iteration passes the version.

In a ``Pipeline`` every call below is submitted to the component's processes without waiting
(``submit``), and a process runs the calls it is given in order; the driver waits only for what
it reads. One iteration, batch i at actor version v (docs/async.md draws it):

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensordict import TensorDict

from rlcore.columns import LOSS_MASK, RESPONSE_MASK, ROLLOUT_VERSIONS
from rlcore.config.schema import ReasoningConfig
from rlcore.data.sampler import TrainingPrompts
from rlcore.runners.dynamic_sampling import generate_groups
from rlcore.runners.passes import Passes
from rlcore.runners.progress import Stopwatch
from rlcore.scheduler.handles import Pending, submit, wait_any

PARTIAL_ROLLOUT_TOKENS = 16  # rollout.partial_rollout_tokens: null

Scorer = Callable[[TensorDict], TensorDict]  # a training batch's rewards


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


class ReasoningBatches(Ahead):
    """Where a reasoning iteration's batches come from, both modes: ``Lockstep`` (staleness 0)
    or ``Pipeline``. ``ReasoningRunner.iterate``, the one iteration, asks it for a batch
    (``next_batch``), runs its passes (``run_passes``) and updates (``update``) through it, and
    tells it of each new version (``updated``)."""

    def __init__(
        self,
        config: ReasoningConfig,
        prompts: TrainingPrompts,
        rollout: Any,
        passes: Passes,
        components: Any,
    ) -> None:
        """``prompts``: the training prompts, drawn batch by batch; ``rollout``: the rollout's
        handle; ``passes``: the run's passes; ``components``: the components (weight syncs)."""
        super().__init__(config.runner.max_staleness)
        self.config, self.prompts, self.rollout = config, prompts, rollout
        self.passes, self.components = passes, components

    def sampler_state(self) -> dict[str, Any]:
        """The prompt sampler as a checkpoint keeps it: before the batches in flight."""
        if self.queue:
            return self.queue[0].before
        return self.prompts.sampler.state_dict()

    def needs_sync(self) -> bool:
        """Whether the rollout must be given the actor's weights before the next batch."""
        raise NotImplementedError

    def next_batch(
        self, iteration: int, version: int, watch: Stopwatch, score: Scorer
    ) -> tuple[TensorDict, TensorDict, dict[str, float]]:
        """``(batch, scored, metrics)``: the batch iteration ``iteration`` trains on at actor
        ``version``, scored by ``score``."""
        raise NotImplementedError

    def run_passes(self, batch: TensorDict, watch: Stopwatch, version: int) -> None:
        """The batch's passes (``passes.py``), their answers in ``batch``."""
        raise NotImplementedError

    def update(
        self, updates: list[tuple[str, Any]], batch: TensorDict, watch: Stopwatch
    ) -> dict[str, float]:
        """Each ``(timer, component)``'s update on ``batch``, their metrics."""
        raise NotImplementedError

    def updated(self, version: int) -> None:
        """The actor's weights are now ``version``."""

    def finish(self, batch: TensorDict, version: int) -> dict[str, float]:
        """After the iteration's updates: metrics of a ``batch`` trained on at ``version``."""
        return {}


class Lockstep(ReasoningBatches):
    """Staleness 0, the synchronous iteration: each batch generated when the iteration asks
    for it, with the weights the actor holds (synced first), and every stage in turn. With
    DAPO's dynamic sampling, generation batches until enough groups differ
    (``dynamic_sampling.py``)."""

    def needs_sync(self) -> bool:
        return True

    def next_batch(
        self, iteration: int, version: int, watch: Stopwatch, score: Scorer
    ) -> tuple[TensorDict, TensorDict, dict[str, float]]:
        def generate_and_score(prompts: TensorDict) -> tuple[TensorDict, TensorDict]:
            with watch("generate"):
                responses = self.rollout.generate(
                    prompts, version, log_probs=self.passes.record_log_probs
                )
                batch = prompts.update(responses)
            with watch("reward"):
                return batch, score(batch)

        rule, p = self.config.algorithm.filter_groups, self.prompts
        return generate_groups(rule, p.wanted, p.size, p.pad_id, p, generate_and_score)

    def run_passes(self, batch: TensorDict, watch: Stopwatch, version: int) -> None:
        self.rollout.release_memory()  # generation is done: a collocated sglang engine's
        self.passes.run(batch, watch)

    def update(
        self, updates: list[tuple[str, Any]], batch: TensorDict, watch: Stopwatch
    ) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for timer, component in updates:
            with watch(timer):
                metrics.update(component.update(batch))
        return metrics


class Pipeline(ReasoningBatches):
    """Staleness k >= 1: the batches in flight, generated ahead (module docstring)."""

    def __init__(self, config: ReasoningConfig, *parts: Any) -> None:
        """As ``ReasoningBatches``."""
        super().__init__(config, *parts)
        rollout = config.rollout
        self.partial = rollout.partial_rollout
        self.segment = rollout.partial_rollout_tokens or PARTIAL_ROLLOUT_TOKENS
        self.most_segments = math.ceil(config.data.max_response_length / self.segment)
        self.keys = itertools.count()
        self.tokens_behind = [0, 0, 0, 0]  # versions behind summed, tokens, rows interrupted, rows
        self.left = 0  # batches to train on after the current one

    def summary(self, regenerated: int) -> dict[str, Any]:
        """``Ahead.summary``; with partial rollouts also the tokens' mean staleness and the
        share of rows that took a weight update mid-generation (since this process started)."""
        out = super().summary(regenerated)
        if self.partial:
            behind, tokens, interrupted, rows = self.tokens_behind
            out["token_staleness_mean"] = round(behind / max(tokens, 1), 4)
            out["interrupted_share"] = round(interrupted / max(rows, 1), 4)
        return out

    def _start(self, version: int) -> InFlight:
        """One more batch to generate, with the weights the rollout will hold by then (every
        copy started so far reaches it first: ``version``)."""
        before = self.prompts.sampler.state_dict()
        prompts = self.prompts()
        if not self.partial:
            responses = submit(self.rollout, "generate", prompts, version, log_probs=True)
            return InFlight(prompts, responses, version, before)
        key = next(self.keys)
        begun = submit(self.rollout, "begin_partial", prompts, version, key)
        batch = InFlight(prompts, None, version, before, key=key, begun=begun)
        self._next_segment(batch)
        return batch

    def _next_segment(self, batch: InFlight) -> None:
        batch.last = submit(self.rollout, "advance_partial", batch.key, self.segment)
        batch.segments += 1

    def _complete(self, batch: InFlight, ended: bool = False) -> None:
        """A partial rollout's remaining segments (none once every row has ``ended``) and its
        answer, submitted: they run after what the rollout was given before (a weight sync
        among it)."""
        if batch.answer is not None:
            return
        while not ended and batch.segments < self.most_segments:
            self._next_segment(batch)
        batch.answer = submit(self.rollout, "finish_partial", batch.key)

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

    def needs_sync(self) -> bool:
        return not self.queue  # the first iteration (of a start or a resume) fills the pipeline

    def next_batch(
        self, iteration: int, version: int, watch: Stopwatch, score: Scorer
    ) -> tuple[TensorDict, TensorDict, dict[str, float]]:
        self.left = self.config.runner.total_iterations - iteration
        if not self.queue:
            self.top_up(self.left + 1, lambda: self._start(version))
        with watch("wait_generate"):
            current, responses, staleness = self.take(version)
            batch = current.asked.update(responses)
        with watch("reward"):
            scored = score(batch)
        metrics = {
            "sampling/generated_tokens": float(batch[LOSS_MASK].sum()),
            "async/staleness": float(staleness),
        }
        return batch, scored, metrics

    def run_passes(self, batch: TensorDict, watch: Stopwatch, version: int) -> None:
        pending = self.passes.submit(batch)
        self.top_up(self.left, lambda: self._start(version))  # after its passes, in each process
        with watch("passes"):
            self.passes.wait(pending, batch)

    def update(
        self, updates: list[tuple[str, Any]], batch: TensorDict, watch: Stopwatch
    ) -> dict[str, float]:
        """The updates side by side (each in its processes)."""
        pending = [submit(component, "update", batch) for _, component in updates]
        metrics: dict[str, float] = {}
        with watch("updates"):
            if self.partial:
                self._generate_while(pending)
            for answer in pending:
                metrics.update(answer.result())
        return metrics

    def updated(self, version: int) -> None:
        """The new weights sent to the rollout: started, waited for by the next ``take``."""
        self.syncing.append(self.components.start_sync("actor", "rollout", version))

    def finish(self, batch: TensorDict, version: int) -> dict[str, float]:
        """With partial rollouts: the rest of the batches in flight submitted (after the weight
        sync), and the batch's tokens' staleness."""
        if not self.partial:
            return {}
        for waiting in self.queue:
            self._complete(waiting)
        behind, tokens, interrupted = token_staleness(batch, version)
        for i, value in enumerate((behind, tokens, interrupted, len(batch))):
            self.tokens_behind[i] += value
        return {
            "async/token_staleness_mean": behind / max(tokens, 1),
            "async/interrupted_share": interrupted / len(batch),
        }


def token_staleness(batch: Any, version: int) -> tuple[int, int, int]:
    """A partial rollout's batch trained on at ``version``: the versions its response tokens
    were sampled behind it, summed; its response tokens; its rows sampled with more than one
    version (a weight update taken mid-generation)."""
    made, mask = batch[ROLLOUT_VERSIONS], batch[RESPONSE_MASK].bool()
    behind = (version - made).masked_select(mask)
    low = made.masked_fill(~mask, 1 << 40).min(-1).values
    high = made.masked_fill(~mask, -1).max(-1).values
    return int(behind.sum()), int(mask.sum()), int((high > low).sum())
