"""The training loop of both modes: iterations, evaluations, checkpoints, logging, progress, the
optional stop at a solved threshold, and the run's summary.

A driver (``EmbodiedRunner``, ``ReasoningRunner``) says what an iteration and an evaluation are;
``train`` does the rest the same way for both:

    for iteration in remaining iterations:
        metrics = driver.iterate(iteration)          # one PPO iteration, timed by stage
        every eval_every iterations and at the end:  driver.evaluate(iteration)
        every checkpoint_every iterations and at the end: driver.checkpoint()
        log metrics; advance the progress bar
    write summary.json (the driver's fields, the mean seconds per stage, the restarts)

SIGINT (Ctrl-C), SIGTERM or SIGHUP (a closed terminal) during training lets the current
iteration finish, then writes a checkpoint (unless ``checkpoint_every`` is 0) and
``summary.json`` marked ``"interrupted": true``, and ends with ``RunInterrupted`` (exit status
128 + the signal's number). A second signal stops at once.
"""

from __future__ import annotations

import contextlib
import json
import signal
import statistics
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from rlcore.config.fields import as_plain
from rlcore.log import say, warn
from rlcore.runners.files import write_replacing
from rlcore.runners.metrics import MetricsLogger
from rlcore.runners.progress import Progress


@dataclass(frozen=True)
class Schedule:
    iterations: int
    samples_per_iteration: int  # env steps or responses
    eval_every: int  # 0 = only at the end
    eval_first: bool  # also evaluate before the first iteration
    eval_metric: str  # the evaluation's headline metric (threshold, progress bar)
    checkpoint_every: int  # 0 = never
    threshold: float | None  # the headline value that counts as solved
    stop_at_threshold: bool
    show_progress: bool
    log_by_samples: bool  # x axis of the logs: samples (embodied) or iterations (reasoning)
    postfix: dict[str, str]  # metric -> short name shown on the progress bar


class Driver(Protocol):
    config: Any
    schedule: Schedule
    progress: Progress
    run_dir: Path
    restarts: list[dict[str, Any]]  # the supervisor's restarts before this attempt (supervisor.py)

    def iterate(self, iteration: int) -> dict[str, float]: ...

    def evaluate(self, iteration: int) -> dict[str, float]: ...

    def checkpoint(self) -> Path: ...

    def summary(self, wall_s: float, means: dict[str, float]) -> dict[str, Any]: ...

    def busy_seconds(self) -> dict[str, dict[int, float]]: ...


class RunInterrupted(SystemExit):
    """The run stopped on a signal after saving what it had (exit status 128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


# Ctrl-C, a kill, and the terminal's hang-up (a closed ssh session): each asks the run to stop
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequests:
    """While training, the first SIGINT, SIGTERM or SIGHUP is a request to stop after the current
    iteration (``signum`` is set); a second one stops at once. Outside the main thread (where
    Python cannot install handlers) signals behave as they would without it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.honoured = False  # the loop stopped early for it
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._request)
        return self

    def _request(self, signum: int, frame: object) -> None:
        if self.signum is not None:  # the second one: at once
            self.__exit__()
            raise KeyboardInterrupt if signum == signal.SIGINT else RunInterrupted(signum)
        self.signum = signum
        # said from a thread: the signal may have interrupted a write to stderr (a metrics
        # line), whose buffered stream refuses a write from its own thread until that one ends
        # ("reentrant call"); the thread waits for it instead
        threading.Thread(
            target=say,
            args=(
                f"{signal.Signals(signum).name}: stopping after this iteration, with a "
                "checkpoint and the summary (send it again to stop at once)",
            ),
            name="rlcore-stop-request",
        ).start()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(sig, handler)
        self._previous.clear()


# the iteration after which an auto placement's prediction is compared with the run's seconds
PREDICTION_CHECKED = 5


def steady_seconds(measured: list[float]) -> float:
    """An iteration's seconds once started: the median after the first two (start-up, a
    pipeline's filling), or of all where there are not more."""
    return statistics.median(measured[2:] if len(measured) > 2 else measured)


def prediction_line(predicted: float, measured: list[float]) -> str:
    """How far an auto placement's prediction was from the iterations measured so far."""
    steady = steady_seconds(measured)
    counted = len(measured) - 2 if len(measured) > 2 else len(measured)
    return (
        f"placement: predicted {predicted:.3f} s an iteration, measured {steady:.3f} s "
        f"(median of {counted} iterations; the prediction {100 * (predicted / steady - 1):+.0f}%)"
    )


def busy_shares(
    before: dict[str, dict[int, float]], after: dict[str, dict[int, float]], seconds: float
) -> dict[str, float]:
    """``perf/busy/<component>``: the share of an iteration of ``seconds`` that the component
    spent in calls (its ranks' mean; 1 - it is the share it stood idle), from the busy seconds
    its answers carried before and after (``WorkerGroup.busy``). A call still running when the
    iteration ends counts in the iteration that reads its answer (asynchronous runs: a share
    may pass 1 in one iteration and fall short in the next; the run's mean holds). Components
    in the driver's own process are not timed apart: none."""
    shares = {}
    for name, ranks in after.items():
        spent = [busy - before.get(name, {}).get(rank, 0.0) for rank, busy in ranks.items()]
        if spent and seconds > 0:
            shares[f"perf/busy/{name}"] = sum(spent) / len(spent) / seconds
    return shares


def train(driver: Driver) -> dict[str, Any]:
    """Run ``driver`` to the end of its schedule; its summary (also written to summary.json)."""
    with StopRequests() as stop:
        summary = _train(driver, stop)
    if stop.honoured:
        say(f"interrupted: the summary is in {driver.run_dir / 'summary.json'}")
        raise RunInterrupted(stop.signum)
    return summary


def _stopped_solved(s: Schedule, progress: Progress) -> bool:
    """Whether a resumed run had stopped at its solved threshold (``runner.stop_at_threshold``):
    then it ends at once, as the unbroken run did, saying so."""
    solved = s.threshold is not None and progress.reached_samples is not None
    if not (s.stop_at_threshold and solved and progress.iteration < s.iterations):
        return False
    say(
        f"resumed at iteration {progress.iteration}: the run reached its solved threshold "
        f"({s.threshold:g}) after {progress.reached_samples} samples and "
        "runner.stop_at_threshold is set, so it trains no further"
    )
    return True


def _train(driver: Driver, stop: StopRequests) -> dict[str, Any]:
    s, progress, config = driver.schedule, driver.progress, driver.config
    logger = MetricsLogger(
        driver.run_dir,
        tensorboard=config.logger.tensorboard,
        wandb=config.logger.wandb,
        console=config.logger.console,
        config=as_plain(config),
    )
    unit = s.samples_per_iteration if s.log_by_samples else 1
    bar = tqdm(
        total=s.iterations * unit,
        initial=progress.iteration * unit,
        disable=not s.show_progress,
        file=sys.stderr,
        dynamic_ncols=True,
        unit="step" if s.log_by_samples else "it",
    )
    start = time.perf_counter() - progress.elapsed_s  # wall time counts across resumes
    timings: dict[str, list[float]] = defaultdict(list)
    shown: dict[str, float] = {}
    skipped: dict[str, int] = {}  # component -> optimiser steps skipped for a non-finite gradient
    plan = getattr(driver, "plan", None)
    predicted = getattr(plan, "predicted_iteration_s", None)
    measured: list[float] = []  # this process's iteration seconds, where a prediction was made
    try:
        if s.eval_first and progress.first_eval is None:
            progress.first_eval = driver.evaluate(0)
            progress.last_eval = dict(progress.first_eval)
            logger.log(0, progress.first_eval)
        first = s.iterations + 1 if _stopped_solved(s, progress) else progress.iteration + 1
        for iteration in range(first, s.iterations + 1):
            timer, busy = time.perf_counter(), driver.busy_seconds()
            metrics = driver.iterate(iteration)
            seconds = time.perf_counter() - timer
            metrics.update(busy_shares(busy, driver.busy_seconds(), seconds))
            metrics["time/iteration_s"] = seconds
            metrics["perf/samples_per_s"] = s.samples_per_iteration / seconds
            progress.train_s += seconds
            progress.iteration, progress.samples = (
                iteration,
                progress.samples + s.samples_per_iteration,
            )
            last = iteration == s.iterations
            if predicted is not None:  # component_placement: auto (placement/advise.py)
                metrics["placement/predicted_iteration_s"] = predicted
                measured.append(seconds)
                if len(measured) == PREDICTION_CHECKED or (
                    last and len(measured) < PREDICTION_CHECKED
                ):
                    say(prediction_line(predicted, measured))
            interrupted = stop.signum is not None
            if ((s.eval_every and iteration % s.eval_every == 0) or last) and not interrupted:
                timer = time.perf_counter()
                progress.last_eval = driver.evaluate(iteration)
                metrics.update(progress.last_eval)
                metrics["time/eval_s"] = time.perf_counter() - timer
                value = progress.last_eval.get(s.eval_metric)  # absent: nothing to compare
                if (
                    s.threshold is not None
                    and value is not None
                    and progress.reached_s is None
                    and value >= s.threshold
                ):
                    progress.reached_s = time.perf_counter() - start
                    progress.reached_samples = progress.samples
                    last = last or s.stop_at_threshold
            progress.elapsed_s = time.perf_counter() - start
            stop.honoured = interrupted and not last  # stopping early, for the signal
            last = last or interrupted
            if s.checkpoint_every and (iteration % s.checkpoint_every == 0 or last):
                driver.checkpoint()
            logger.log(progress.samples if s.log_by_samples else iteration, metrics)
            for name, value in metrics.items():
                if name.startswith(("time/", "perf/")):
                    timings[name].append(value)
                elif name.endswith("/skipped_steps"):
                    skipped[name.split("/")[0]] = int(value)
            bar.update(unit)
            shown.update(
                {short: round(metrics[m], 3) for m, short in s.postfix.items() if m in metrics}
            )
            bar.set_postfix(shown, refresh=False)
            if last:
                break
    finally:
        bar.close()
        logger.close()
    # Means over this process's iterations (a resumed run: since it resumed).
    means = {name: statistics.fmean(values) for name, values in timings.items()}
    try:
        summary = driver.summary(time.perf_counter() - start, means)
    except Exception as error:  # trained: the summary is written, whatever fails in it
        failed = f"{type(error).__name__}: {error}"
        warn(f"the run's summary could not be completed ({failed}); summary.json holds the rest")
        summary = {"iterations": driver.progress.iteration, "summary_error": failed}
    summary["seconds_per_stage"] = {
        name.removeprefix("time/").removesuffix("_s"): round(value, 5)
        for name, value in means.items()
        if name.startswith("time/")
    }
    summary["run_dir"] = str(driver.run_dir)
    if predicted is not None and measured:
        summary["placement_prediction"] = {
            "predicted_iteration_s": round(predicted, 5),
            "measured_iteration_s": round(steady_seconds(measured), 5),
        }
    summary["restarts"] = len(driver.restarts)
    summary["restart_log"] = driver.restarts
    summary["interrupted"] = stop.honoured
    summary["skipped_steps"] = skipped
    # each component's share of the iterations spent in calls (the rest: idle), where measured
    summary["busy_share"] = {
        name.removeprefix("perf/busy/"): round(value, 4)
        for name, value in means.items()
        if name.startswith("perf/busy/")
    }
    write_replacing(driver.run_dir / "summary.json", json.dumps(summary, indent=2))
    return summary
