"""Imported at start-up by every Python process of a ``benchmarks/claims.py`` run (this folder is
first on the run's ``PYTHONPATH``, which its child processes and Ray's workers inherit): an audit
hook writes each file under ``$RLCORE_CLAIMS_CONFIGS`` (the configs/ folder) that the process
opens, relative to it, one a line, to ``$RLCORE_CLAIMS_READS``. claims.py logs them with the run,
so that a logged run counts again while the configs it read are unchanged (a change to another
config does not make it stale). Then any other ``sitecustomize`` on the path runs, as it would
have without this one."""

import os
import sys


def _record_config_reads() -> None:
    folder, record = os.environ.get("RLCORE_CLAIMS_CONFIGS"), os.environ.get("RLCORE_CLAIMS_READS")
    if not folder or not record:
        return
    root = os.path.join(os.path.realpath(folder), "")
    name, seen = os.path.basename(os.path.dirname(root)), set()

    def hook(event: str, args: tuple) -> None:
        # (the record's own open passes here too; its path is outside the folder)
        if event != "open" or isinstance(args[0], int) or args[0] is None:
            return
        try:
            path = os.fsdecode(args[0])
        except TypeError:
            return
        if name not in path:  # (the cheap test first: the hook sees every open)
            return
        try:
            full = os.path.realpath(os.path.join(os.getcwd(), path))
            if full.startswith(root) and full not in seen:
                seen.add(full)
                fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, (full[len(root) :] + "\n").encode())
                finally:
                    os.close(fd)
        except OSError:
            pass

    sys.addaudithook(hook)


def _run_the_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_record_config_reads()
_run_the_next_sitecustomize()
