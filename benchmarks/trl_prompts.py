"""The default reasoning job's training prompts, written to a jsonl for the TRL baseline
(benchmarks/trl_baseline.py), which runs in a venv of its own where rlcore is not installed.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/trl_prompts.py \
        [--config reasoning/tiny_arith_ppo] [--out outputs/trl_baseline/prompts.jsonl] [k=v ...]

One line per training prompt, in the order of rlcore's prompt set:
``{"prompt": text, "answer": "19", "input_ids": [...]}``. ``prompt`` is the string rlcore hands
the tokenizer (``question + data.prompt_suffix``, through the chat template when
``data.chat_template``); ``input_ids`` are rlcore's own ids for it (``PromptSet.build``, the same
call the runner makes, prompts over ``data.max_prompt_length`` tokens dropped as there), so the
baseline can feed TRL exactly the tokens rlcore trains on. The first line before them is a header
``{"model_dir": ..., "config": ..., "prompt_suffix": ..., ...}`` naming the cached tiny model folder
(built by the default job's warm-up if it is not cached yet).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlcore.config import load_config
from rlcore.data.arith import arithmetic_problems
from rlcore.data.prompts import load_prompt_rows
from rlcore.data.sampler import load_prompt_set
from rlcore.models.lm import load_tokenizer
from rlcore.prepare import prepare_models


def prompt_texts(config, tokenizer) -> list[str]:
    """The strings ``PromptSet.build`` hands the tokenizer, over-long ones dropped as there."""
    data = config.data
    if data.train_files:
        rows = load_prompt_rows(
            data.train_files,
            "data.train_files",
            data.prompt_key,
            data.answer_key,
            data.answer_format,
        )
    else:
        syn = data.synthetic
        problems = arithmetic_problems(
            syn.num_train, digits=syn.digits, operations=syn.operations, seed=syn.seed
        )
        rows = [{"prompt": r["question"]} for r in problems]
    texts = [row["prompt"] + data.prompt_suffix for row in rows]
    if data.chat_template:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
            )
            for t in texts
        ]
    ids = tokenizer(texts, add_special_tokens=not data.chat_template)["input_ids"]
    return [t for t, row in zip(texts, ids, strict=True) if len(row) <= data.max_prompt_length]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="reasoning/tiny_arith_ppo")
    parser.add_argument("--out", default="outputs/trl_baseline/prompts.jsonl")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    dirs = prepare_models(config)  # the cached tiny model folder (built if missing)
    tokenizer = load_tokenizer(dirs.actor)
    prompts = load_prompt_set(config, tokenizer, train=True)
    ids = prompts.prompts
    texts = prompt_texts(config, tokenizer)
    data = config.data
    if len(texts) != len(ids):
        raise SystemExit(f"{len(texts)} prompt texts, but rlcore's prompt set has {len(ids)}")
    for text, row in zip(texts, ids, strict=True):
        again = tokenizer(text, add_special_tokens=not data.chat_template)["input_ids"]
        if again != row:
            raise SystemExit(f"prompt text does not re-tokenise to rlcore's ids: {text!r}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "header": True,
        "config": args.config,
        "overrides": args.overrides,
        "model_dir": str(Path(dirs.actor).resolve()),
        "prompt_suffix": data.prompt_suffix,
        "chat_template": data.chat_template,
        "add_special_tokens": not data.chat_template,
        "max_prompt_length": data.max_prompt_length,
        "count": len(ids),
        "dropped": prompts.dropped,
    }
    with out.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for text, answer, row in zip(texts, prompts.answers, ids, strict=True):
            f.write(json.dumps({"prompt": text, "answer": answer, "input_ids": row}) + "\n")
    print(f"{len(ids)} prompts ({prompts.dropped} dropped) -> {out}; model: {header['model_dir']}")


if __name__ == "__main__":
    main()
