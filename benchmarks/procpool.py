"""How fast rlcore.procpool's processes start and are replaced after a deadline, forked by the
fork server (``START_METHOD = "forkserver"``, what ships) against spawned, from a program whose
main module imports what an entry point's does (rlcore.cli: torch, the config): each new
process runs that module again.

    python benchmarks/procpool.py [--rounds 3] [--replacements 6]

Each round runs one program per start method, alternated (these machines are shared and
noisy). One JSON line per program: the seconds until two processes answered their first items
(``first_s``), and the seconds of ``replacements`` deadlines, each killing both processes and
running an item on each replacement (``replace_s``); then a line with the medians and the
ratio spawned / forked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PROGRAM = """
import json, sys, time
import rlcore.cli  # (what an entry point's main module imports)
from rlcore import procpool
from rlcore.procpool import DeadlinePool, serve_items


def serve(conn, payload):
    serve_items(conn, lambda: None, lambda state, index, item: index)


if __name__ == "__main__":
    procpool.START_METHOD, replacements = sys.argv[1], int(sys.argv[2])
    start = time.perf_counter()
    pool = DeadlinePool(serve, None, processes=2, timeout_s=60)
    assert [o.result for o in pool.run([(), ()])] == [0, 1]
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(replacements):
        for worker in (0, 1):
            pool._replace(worker)  # (what a deadline does)
        assert [o.kind for o in pool.run([(), ()])] == ["ok", "ok"]
    replaced = time.perf_counter() - start
    pool.close()
    print(json.dumps({"first_s": round(first, 3), "replace_s": round(replaced, 3)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replacements", type=int, default=6)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"spawn": [], "forkserver": []}
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "program.py")
        with open(script, "w") as f:
            f.write(PROGRAM)
        for round_ in range(args.rounds):
            for method in ("spawn", "forkserver") if round_ % 2 == 0 else ("forkserver", "spawn"):
                done = subprocess.run(
                    [sys.executable, script, method, str(args.replacements)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                line = {"start_method": method, "round": round_, **json.loads(done.stdout)}
                results[method].append(line)
                print(json.dumps(line), flush=True)
    medians = {
        method: {key: statistics.median(r[key] for r in rows) for key in ("first_s", "replace_s")}
        for method, rows in results.items()
    }
    print(
        json.dumps(
            {
                "replacements": 2 * args.replacements,
                "median": medians,
                "replace_spawn_over_forkserver": round(
                    medians["spawn"]["replace_s"] / medians["forkserver"]["replace_s"], 1
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
