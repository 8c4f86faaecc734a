"""``import rlcore`` keeps ``tensordict`` from importing ``torch._dynamo`` and still leaves
``torch.compile`` the same marks: compared with a plain ``import tensordict`` in another
process."""

import json
import subprocess
import sys

# Each case in a process forked from one that imported torch alone (torch does not load
# torch._dynamo; importing it is 2.6 of each case's CPU-s): the case's marks on the pipe.
MARKS = r"""
import importlib, inspect, json, os, sys
import torch


def marks(mode):
    if mode == "rlcore":
        import rlcore
    import tensordict
    from tensordict import TensorDict
    loaded = "torch._dynamo" in sys.modules
    TensorDict({"a": torch.ones(2)}, batch_size=[2]).clone()
    trace_rules = importlib.import_module("torch._dynamo.trace_rules")

    candidates = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("tensordict") or name in ("torch._C._functorch", "torch"):
            for key, value in list(vars(module).items()):
                inner = vars(value).items() if inspect.isclass(value) else ()
                for sub, obj in [(key, value), *((f"{key}.{k}", v) for k, v in inner)]:
                    if callable(obj):
                        candidates[f"{name}:{sub}"] = obj
    allowed = sorted(k for k, f in candidates.items() if id(f) in trace_rules._allowed_callable_ids)
    constant = sorted(
        k for k, f in candidates.items() if getattr(f, "_dynamo_marked_constant", False) is True
    )
    return {"loaded": loaded, "allowed": allowed, "constant": constant}


assert "torch._dynamo" not in sys.modules and "tensordict" not in sys.modules
found = {}
for mode in ("plain", "rlcore"):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 1
        try:
            with os.fdopen(write, "w") as out:
                json.dump(marks(mode), out)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as got:
        text = got.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, (mode, status)
    found[mode] = json.loads(text)
print(json.dumps(found))
"""


def test_tensordict_imports_without_the_compiler_and_keeps_its_marks():
    done = subprocess.run(
        [sys.executable, "-c", MARKS], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    plain, deferred = found["plain"], found["rlcore"]
    assert plain["loaded"] is True  # without rlcore, tensordict's import loads torch._dynamo
    assert deferred["loaded"] is False
    assert plain["constant"] == deferred["constant"]
    assert "tensordict.utils:_lock_warn" in deferred["constant"]
    assert plain["allowed"] == deferred["allowed"]
    assert any(k.startswith("torch._C._functorch:") for k in deferred["allowed"])
