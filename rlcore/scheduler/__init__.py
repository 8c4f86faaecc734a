"""rlcore.scheduler: a ``PlacementPlan`` made real on Ray (placement groups, worker processes,
torch.distributed groups, weight sync). Local and multi-node runs are the same code.

Every worker process imports ``rlcore.scheduler.worker``, and importing a submodule runs this
file first; so the exports below load on first use, keeping Hydra, the config layer and the
driver-side code out of the workers (2.7 s of imports each, measured, against 0.7 s for Ray).
"""

from rlcore.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "deployment": ("ComponentSpec", "start_components"),
        "dispatch": ("Dispatch", "dispatch"),
        "handles": ("Peer",),
        "scheduler": ("Scheduler",),
        "ray_cluster": ("SchedulerError",),
        "weight_sync": ("SyncReport",),
        "worker": ("WorkerContext", "WorkerProcess"),
        "errors": ("WorkerError",),
        "worker_group": ("WorkerGroup",),
    },
)
