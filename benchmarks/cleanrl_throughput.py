"""Training throughput against CleanRL's ppo.py on CartPole-v1, both measured in one run.

CleanRL is not an rlcore dependency and its ppo.py needs the old ``gym`` API, so it runs in its
own environment (ppo.py is taken unmodified from the cleanrl 1.2.0 wheel):

    python3 -m venv /tmp/crl
    /tmp/crl/bin/pip install torch==2.13.0 gym==0.23.1 pygame tensorboard "numpy<2"
    /tmp/crl/bin/pip download --no-deps cleanrl==1.2.0 --python-version 3.10 \\
        --only-binary=:all: -d /tmp/crl_dl
    unzip -o /tmp/crl_dl/cleanrl-1.2.0-py3-none-any.whl cleanrl/ppo.py -d /tmp/crl_src
    python benchmarks/cleanrl_throughput.py --cleanrl-python /tmp/crl/bin/python \\
        --cleanrl-script /tmp/crl_src/cleanrl/ppo.py

For each seed it runs CleanRL (its defaults: 4 envs x 128 steps, 4 epochs of 4 mini-batches)
and then rlcore's config, alternating so that both see the same machine load. CleanRL's figure
is the last ``SPS:`` it prints (env steps / seconds since its loop started, updates included,
no evaluation); rlcore's is ``train_sps`` from the summary (collection and updates, evals and
checkpoints excluded; the run goes on past the solved threshold, to the same step count as
CleanRL's). One JSON line per seed, then a median line with the ratio.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile

from embodied import train_seed  # benchmarks/embodied.py: this script's folder is on sys.path


def cleanrl_sps(python: str, script: str, seed: int, steps: int, workdir: str) -> float:
    out = subprocess.run(
        [python, script, f"--seed={seed}", f"--total-timesteps={steps}", "--cuda=False"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"^SPS: (\d+)", out, flags=re.M)
    if not found:
        raise RuntimeError(f"{script} printed no 'SPS:' line; its output ends:\n{out[-2000:]}")
    return float(found[-1])


def rlcore_sps(config_name: str, overrides: list[str], seed: int, steps: int, out: str) -> float:
    more = [f"runner.total_env_steps={steps}", "runner.stop_at_threshold=false"]
    return train_seed(config_name, [*overrides, *more], seed, out)["train_sps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cleanrl-python", required=True)
    parser.add_argument("--cleanrl-script", required=True, help="path to CleanRL's ppo.py")
    parser.add_argument("--config", default="embodied/cartpole_ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for seed in args.seeds:
            theirs = cleanrl_sps(args.cleanrl_python, args.cleanrl_script, seed, args.steps, out)
            ours = rlcore_sps(args.config, args.overrides, seed, args.steps, out)
            row = {
                "config": args.config,
                "seed": seed,
                "rlcore_train_sps": ours,
                "cleanrl_sps": theirs,
                "ratio": round(ours / theirs, 2),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    median = {k: statistics.median(r[k] for r in rows) for k in ("rlcore_train_sps", "cleanrl_sps")}
    median["ratio"] = round(median["rlcore_train_sps"] / median["cleanrl_sps"], 2)
    print(json.dumps({"config": args.config, "seeds": args.seeds, "median": True, **median}))


if __name__ == "__main__":
    main()
