"""What a run prepares before its driver is built: the reasoning mode's model folders (the given
ones checked, or the tiny model built and warmed up, ``models.py`` and ``warmup.py``). The entry
points run it once; the supervisor's restarts reuse its folders."""

from rlcore.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "models": ("ModelDirs", "prepare", "prepare_models"),
    },
)
