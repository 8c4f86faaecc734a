"""Gloo ranks kept for the tests of a pytest worker: ``rank_pool(size)`` starts ``size``
processes once (each one rank of a gloo group over loopback, one torch thread), and every test
that needs ranks sends them a function instead of starting its own.

The ranks are forked from a fork server (multiprocessing's ``forkserver``, the one tests/forked.py
keeps for the tests' commands too) that imported torch, transformers, Megatron and rlcore's
trainers once: a rank starts with them imported, where each spawned rank imported them itself
(about 6.5 CPU-s a rank on these 2 cores; 78 CPU-s for the 9 processes of the modules that use
ranks, measured). The server is a clean process that runs no torch op (no thread pool to
copy), so forking from it is safe.

    results = rank_pool(2).run(rank_main, out, config)   # rank_main(rank, out, config) on each

``fn`` must be importable by name (a module-level function of a test module). Each rank runs it
with the default group up; what it starts besides (Megatron's model-parallel state) is torn
down after it, so the next function starts from the same state. A rank's exception is raised in
the test with that rank's traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import socket
import traceback
from collections.abc import Callable
from typing import Any

from rlcore.scheduler.worker import tear_down_model_parallel
from tests.forked import context as forkserver_context

# seconds a function may run on the ranks before the test fails (a hung collective)
TIMEOUT_S = 600

_pools: dict[int, RankPool] = {}


def rank_pool(size: int) -> RankPool:
    """This pytest worker's pool of ``size`` ranks, started on first use."""
    if size not in _pools or not _pools[size].alive():
        _pools[size] = RankPool(size)
    return _pools[size]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankPool:
    def __init__(self, size: int) -> None:
        context = forkserver_context()  # (tests/forked.py's: one server for ranks and commands)
        self.size = size
        self.tasks = [context.Queue() for _ in range(size)]
        self.results = context.Queue()
        port = free_port()
        self.processes = [
            # not daemonic: a rank may start processes of its own (Megatron's checkpoint writer)
            context.Process(
                target=_serve, args=(rank, size, port, os.getpid(), self.tasks[rank], self.results)
            )
            for rank in range(size)
        ]
        for process in self.processes:
            process.start()
        atexit.register(self.close)

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(rank, *args)`` on every rank; their results in rank order."""
        for tasks in self.tasks:
            tasks.put((fn, args))
        results: dict[int, tuple[bool, Any]] = {}
        try:
            while len(results) < self.size:
                rank, ok, value = self.results.get(timeout=TIMEOUT_S)
                results[rank] = (ok, value)
        except queue.Empty:
            self.close()  # a hung rank: the next test gets fresh ones
            raise TimeoutError(
                f"{fn.__name__} did not finish on every rank in {TIMEOUT_S} s"
            ) from None
        failed = {r: v for r, (ok, v) in results.items() if not ok}
        if failed:
            rank, trace = min(failed.items())
            raise RuntimeError(f"{fn.__name__} failed on rank {rank}:\n{trace}")
        return [results[r][1] for r in range(self.size)]

    def close(self) -> None:
        for tasks, process in zip(self.tasks, self.processes, strict=True):
            if process.is_alive():
                with contextlib.suppress(Exception):
                    tasks.put(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def _serve(rank: int, size: int, port: int, parent: int, tasks: Any, results: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size
    )
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            if not _alive(parent):  # the test process is gone: so are its ranks
                break
            continue
        if task is None:
            break
        fn, args = task
        try:
            results.put((rank, True, fn(rank, *args)))
        except BaseException:
            results.put((rank, False, traceback.format_exc()))
        finally:
            tear_down_model_parallel()
    dist.destroy_process_group()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` (the test process: a rank's parent is the fork server) runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
