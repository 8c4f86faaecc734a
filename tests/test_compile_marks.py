"""``import rlcore`` keeps ``tensordict`` from importing ``torch._dynamo`` and still leaves
``torch.compile`` the same marks: compared with a plain ``import tensordict`` in another
process."""

import json
import subprocess
import sys

MARKS = r"""
import inspect, json, sys
if sys.argv[1] == "rlcore":
    import rlcore
import tensordict
from tensordict import TensorDict
loaded = "torch._dynamo" in sys.modules
import torch
TensorDict({"a": torch.ones(2)}, batch_size=[2]).clone()
import torch._dynamo
from torch._dynamo import trace_rules

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
print(json.dumps({"loaded": loaded, "allowed": allowed, "constant": constant}))
"""


def marks(mode):
    done = subprocess.run(
        [sys.executable, "-c", MARKS, mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tensordict_imports_without_the_compiler_and_keeps_its_marks():
    plain, deferred = marks("plain"), marks("rlcore")
    assert plain["loaded"] is True  # without rlcore, tensordict's import loads torch._dynamo
    assert deferred["loaded"] is False
    assert plain["constant"] == deferred["constant"]
    assert "tensordict.utils:_lock_warn" in deferred["constant"]
    assert plain["allowed"] == deferred["allowed"]
    assert any(k.startswith("torch._C._functorch:") for k in deferred["allowed"])
