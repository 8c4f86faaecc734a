"""What a model folder may not ask of rlcore, refused in one line before anything loads it: a
model folder is input rlcore did not write (a download, someone else's folder).

- Custom code: ``auto_map`` in its config.json (or tokenizer or processor config) asks
  transformers to import the folder's own Python. rlcore builds transformers' own classes only
  (every load passes ``trust_remote_code=False``; without it transformers asks on standard input
  whether to run the code).
- Weights as pickle only (``pytorch_model.bin``): unpickling runs whatever the file asks for.
  rlcore loads safetensors only (``use_safetensors=True``).
- A reward model without its score head (a causal LM's folder, a classifier saved without its
  head): transformers would start the head at random, and the run would train against noise
  without a word (``check_score_head``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlcore.config.errors import ConfigError

# the files of a folder transformers reads an ``auto_map`` from
CODE_FILES = (
    "config.json",
    "tokenizer_config.json",
    "processor_config.json",
    "preprocessor_config.json",
)
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def check_no_custom_code(directory: Path, setting: str | None = None) -> None:
    """``ConfigError`` when a file of ``directory`` names custom code (``auto_map``), naming
    ``setting`` when given (a folder read after the checks: only the file)."""
    for name in CODE_FILES:
        file = Path(directory) / name
        where = f"{setting}: {file}" if setting else str(file)
        if file.exists() and not file.is_file():  # a FIFO would block the reads here and after
            raise ConfigError(f"{where} is not a regular file; the model folder is damaged")
        try:
            described = json.loads(file.read_text())
        except (OSError, ValueError):
            continue  # absent, or unreadable: check_model_dir (config.json) or the load says so
        if isinstance(described, dict) and "auto_map" in described:
            mapped = described["auto_map"]
            classes = ", ".join(map(str, mapped)) if isinstance(mapped, dict) else str(mapped)
            classes = " ".join(classes.split())[:200]  # (one line, whatever the file holds)
            raise ConfigError(
                f"{where} names custom code (auto_map: {classes}), which rlcore never "
                "runs; give a model of an architecture transformers ships (if its model_type is "
                "one, delete the auto_map key)"
            )


def check_weight_format(directory: Path, setting: str) -> None:
    """``ConfigError`` when ``directory`` holds its weights as pickle only."""
    directory = Path(directory)
    if any((directory / name).is_file() for name in SAFETENSORS):
        return
    pickled = [name for name in PICKLE_WEIGHTS if (directory / name).is_file()]
    if pickled:
        raise ConfigError(
            f"{setting}: {directory} holds its weights as pickle only ({pickled[0]}), which "
            "rlcore does not load (unpickling runs what the file asks for); convert them to "
            "safetensors where you trust the file: the model's from_pretrained(folder) then "
            "save_pretrained(folder) writes model.safetensors"
        )


def weight_names(directory: Path) -> set[str]:
    """The tensor names of ``directory``'s safetensors weights, read from the index or the
    file's header (nothing loaded)."""
    from safetensors import safe_open

    index = Path(directory) / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text())["weight_map"])
    with safe_open(str(Path(directory) / "model.safetensors"), framework="pt") as handle:
        return set(handle.keys())


def check_score_head(directory: Path, setting: str) -> None:
    """``ConfigError`` unless ``directory``'s weights hold every tensor of the score head its
    sequence-classification class makes (the class's parameters outside its base model, built
    from the config on the meta device: no memory, no weights read)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    try:
        config = AutoConfig.from_pretrained(str(directory), trust_remote_code=False)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(config, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(
            f"{setting}: transformers cannot build the model of {directory} ({first})"
        ) from None
    prefix = f"{model.base_model_prefix}."
    head = sorted(name for name in model.state_dict() if not name.startswith(prefix))
    missing = [name for name in head if name not in weight_names(directory)]
    if missing:
        raise ConfigError(
            f"{setting}: {directory} has no score head ({', '.join(missing)} not in its "
            "weights: a causal LM's folder, or a classifier saved without its head), which "
            "would start at random and score noise; give a trained reward model, e.g. one "
            "examples/reasoning/train_reward_model.py writes (AutoModelForSequenceClassification "
            "with num_labels=1, trained, then save_pretrained)"
        )
