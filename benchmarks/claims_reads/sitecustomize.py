"""Imported at start-up by every Python process of a ``benchmarks/claims.py`` run (this folder is
first on the run's ``PYTHONPATH``, which its child processes and Ray's workers inherit): an audit
hook writes each file under ``$RLCORE_CLAIMS_CONFIGS`` (the configs/ folder) that the process
opens, relative to it, one a line, to ``$RLCORE_CLAIMS_READS``. claims.py logs them with the run,
so that a logged run counts again while the configs it read are unchanged (a change to another
config does not make it stale). Then any other ``sitecustomize`` on the path runs, as it would
have without this one.

Two readers are left out, named exactly: ``rlcore.config.composition``'s ``shipped_configs``
(every shipped config's ``# description:`` line, for an entry point's ``--help`` text, built at
each start) and ``_check_yaml_files`` (every YAML file parsed, only after a composition failed,
to name the broken one): what they read decides no run's figures."""

import os
import sys

# (file name, function) of the readers whose opens are not recorded
NOT_A_DEPENDENCY = {
    (os.path.join("rlcore", "config", "composition.py"), "shipped_configs"),
    (os.path.join("rlcore", "config", "composition.py"), "_check_yaml_files"),
}


def _opened_by_a_lister() -> bool:
    frame = sys._getframe(1)  # (the hook, then the frames that opened the file)
    while frame is not None:
        code = frame.f_code
        if any(code.co_filename.endswith(f) and code.co_name == n for f, n in NOT_A_DEPENDENCY):
            return True
        frame = frame.f_back
    return False


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
        # (the cheap test first: the hook sees every open; a relative path may lie under the
        # folder without naming it, when the process works inside it)
        if name not in path and os.path.isabs(path):
            return
        try:
            full = os.path.realpath(os.path.join(os.getcwd(), path))
            if full.startswith(root) and full not in seen and not _opened_by_a_lister():
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
