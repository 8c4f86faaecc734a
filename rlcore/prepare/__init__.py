"""What a run prepares before its driver is built: the reasoning mode's model folders (the given
ones checked, or the tiny model built and warmed up, ``models.py`` and ``warmup.py``). The entry
points run it once; the supervisor's restarts reuse its folders."""

from rlcore.lazy import lazy_exports

_EXPORTS = {
    "ModelDirs": "rlcore.prepare.models",
    "prepare": "rlcore.prepare.models",
    "prepare_models": "rlcore.prepare.models",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("rlcore.prepare", _EXPORTS)
