"""rlcore.scheduler: a ``PlacementPlan`` made real on Ray (placement groups, worker processes,
torch.distributed groups, weight sync). Local and multi-node runs are the same code.

Every worker process imports ``rlcore.scheduler.worker``, and importing a submodule runs this
file first; so the exports below load on first use, keeping Hydra, the config layer and the
driver-side code out of the workers (2.7 s of imports each, measured, against 0.7 s for Ray).
"""

from rlcore.lazy import lazy_exports

_EXPORTS = {
    "ComponentSpec": "rlcore.scheduler.deployment",
    "Dispatch": "rlcore.scheduler.dispatch",
    "Peer": "rlcore.scheduler.handles",
    "Scheduler": "rlcore.scheduler.scheduler",
    "SchedulerError": "rlcore.scheduler.ray_cluster",
    "SyncReport": "rlcore.scheduler.weight_sync",
    "WorkerContext": "rlcore.scheduler.worker",
    "WorkerError": "rlcore.scheduler.errors",
    "WorkerGroup": "rlcore.scheduler.worker_group",
    "WorkerProcess": "rlcore.scheduler.worker",
    "dispatch": "rlcore.scheduler.dispatch",
    "start_components": "rlcore.scheduler.deployment",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("rlcore.scheduler", _EXPORTS)
