"""What a lent GPU machine already has of the packages benchmarks/gpu_wheels.sh can bring: one
JSON line, each distribution's installed version or null, read from the installed metadata
(nothing is imported, so it takes well under a second). Run it there in the first call, before
deciding which sets of wheels to carry (its sizes: gpu_wheels.sh's header)::

    python3 benchmarks/gpu_env_probe.py   # or PYTHONPATH=/tmp/site:. to see the carried ones too

``needs`` lists, for each set whose first distribution (hydra-core, trl, pandas, pyarrow) is
missing, the distributions of it that are missing (``arrow``: pyarrow, 41 MiB, the one that
does not fit beside everything else).
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata

SETS = {
    "rlcore": [
        "hydra-core",
        "omegaconf",
        "antlr4-python3-runtime",
        "gymnasium",
        "Farama-Notifications",
        "tensordict",
        "pyvers",
        "megatron-core",
    ],
    "trl": [
        "trl",
        "accelerate",
        "datasets",
        "dill",
        "multiprocess",
        "xxhash",
        "requests",
        "urllib3",
        "charset-normalizer",
    ],
    "pandas": ["pandas", "python-dateutil", "six", "pytz", "tzdata"],
    "arrow": ["pyarrow"],
}
# there with torch and transformers on the machines lent so far; their versions decide which
# wheels fit (transformers pins huggingface-hub, pandas needs numpy >= 1.26)
CONTEXT = [
    "torch",
    "transformers",
    "huggingface-hub",
    "tokenizers",
    "numpy",
    "fsspec",
    "filelock",
    "httpx",
    "idna",
    "certifi",
    "pyyaml",
    "tqdm",
    "jinja2",
    "psutil",
]


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main() -> None:
    found = {name: version(name) for names in [*SETS.values(), CONTEXT] for name in names}
    # a set is needed where its first distribution is missing; then so are its missing others
    needs = {
        s: [n for n in names if found[n] is None] if found[names[0]] is None else []
        for s, names in SETS.items()
    }
    print(
        json.dumps(
            {
                "check": "env",
                "python": platform.python_version(),
                "executable": sys.executable,
                "installed": found,
                "needs": needs,
            }
        )
    )


if __name__ == "__main__":
    main()
