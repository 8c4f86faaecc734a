"""Model paths that name a Hugging Face hub model (``actor.model.path=Qwen/Qwen2.5-0.5B-Instruct``,
as verl's commands write them) resolved to a local folder through ``huggingface_hub``: the local
cache when it holds the model (always, when the hub is unreachable or ``HF_HUB_OFFLINE=1``), a
download into that cache otherwise, and one line naming the key when neither works.

    local_model_dir("Qwen/Qwen2.5-0.5B-Instruct", "actor.model.path")  # -> the snapshot folder

A value that is an existing path is that path; one that is not, and does not look like a hub id
(``org/name``), is returned as given for ``check_model_dir`` to say what is wrong with it. A
value whose first part is a folder here (``models/`` existing), or a name the hub keeps for its
own pages (``models/Qwen2.5-0.5B-Instruct``: huggingface.co/models is the hub's model list, so
no org has that name), is a local path too: it is never downloaded, nor is ``hf download``
suggested for it.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlcore.config.errors import ConfigError
from rlcore.log import say

# what a model folder needs: config, weights, tokenizer (no other formats' weights, no docs,
# no custom code: rlcore never runs a folder's Python, rlcore.models.folder_safety)
MODEL_FILES = [
    "*.json",
    "*.safetensors",
    "*.model",
    "*.txt",
    "*.tiktoken",
]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# first parts of huggingface.co's own pages (its lists of models, datasets and spaces), which
# no user or organisation can take
_HUB_PAGES = ("models", "datasets", "spaces")


def is_hub_id(value: str) -> bool:
    """Whether ``value`` reads as a hub id (``org/name``) and names no existing path, nor one in
    a folder here or under a name the hub keeps for its own pages (see the module docstring)."""
    if not _REPO_ID.match(value) or ".." in value or Path(value).exists():
        return False
    org = value.split("/")[0]
    return org not in _HUB_PAGES and not Path(org).is_dir()


def local_model_dir(value: str, setting: str, download: bool = True) -> Path | None:
    """The local folder of the model ``value`` names (see the module docstring); with
    ``download`` False (the dry run), None for a hub model the run would download (said in one
    line), nothing downloaded."""
    if not is_hub_id(value):
        return Path(value).expanduser()
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(value, local_files_only=True, allow_patterns=MODEL_FILES))
    except LocalEntryNotFoundError:
        pass
    cache = constants.HF_HUB_CACHE
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(
            f"{setting}: {value} is not a folder here, nor in the Hugging Face cache ({cache}), "
            "and HF_HUB_OFFLINE=1 allows no download: download it where the hub is reachable "
            f"(hf download {value}), or give a local model folder"
        )
    try:
        if not download:
            files = snapshot_download(value, allow_patterns=MODEL_FILES, dry_run=True)
            size = sum(f.file_size for f in files) / 1e9
            say(f"{setting}: the run downloads {value} ({size:.1f} GB) into {cache}")
            return None
        say(f"{setting}: downloading {value} from the Hugging Face hub into {cache}")
        return Path(snapshot_download(value, allow_patterns=MODEL_FILES))
    except (HfHubHTTPError, OSError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ConfigError(
            f"{setting}: {value} is not a folder here, nor in the Hugging Face cache ({cache}), "
            f"and the hub cannot give it ({type(error).__name__}: {first}); give a local model "
            "folder, or download it where the hub is reachable"
        ) from None
