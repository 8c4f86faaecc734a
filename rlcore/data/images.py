"""Images in reasoning prompts (verl's multimodal layout): decoding a row's image cells, the
model's image processor, and the image placeholders of the tokenised prompt.

verl's preprocessing (its geo3k example) writes a row's images as a list in an ``images`` column,
each a Hugging Face ``Image`` cell (``{"bytes": ..., "path": ...}`` in the parquet file, a PIL
image once ``datasets`` decodes it), and marks where each one goes with the text ``<image>`` in
the chat prompt. Here a cell may also be a path (relative to the data file, as a jsonl file
would give it). Each marker becomes the model's image placeholder token repeated as many times
as the model turns an image into tokens (a LLaVA-family model: one per patch of its vision
tower's square input, ``vision_feature_select_strategy`` "default" dropping the class token; a
Qwen2-VL-family model: one per merged block of the image's grid of patches, which its size
sets, between its vision start and end tokens), so the token budgets count the image's
tokens; the images themselves go through the model folder's image processor (resized and
normalised), one ``[images, C, H, W]`` tensor a prompt (Qwen2-VL's: ``[images, patches, D]``
and each image's grid, rlcore/columns.py's ``IMAGE_GRID``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MARKER = "<image>"  # where verl's prompts put an image


class ImageError(ValueError):
    """A row's images cannot be read or do not match its prompt: the message names the file and
    the row (a ``DataError`` where prompts.py raises it)."""


def decode_image(cell: Any, base: Path, where: str) -> Any:
    """One image cell as an RGB PIL image: a PIL image, ``{"bytes": ..., "path": ...}`` (bytes
    first) or a path relative to ``base``; ``where`` names the file and row in errors."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(cell, Image.Image):
        return cell.convert("RGB")
    source: Any = cell
    if isinstance(cell, dict):
        source = cell.get("bytes") or cell.get("path")
        if source is None:
            raise ImageError(f"{where}: an image cell with neither bytes nor a path: {cell!r}")
    try:
        if isinstance(source, bytes | bytearray):
            return Image.open(io.BytesIO(source)).convert("RGB")
        if isinstance(source, str):
            path = Path(source).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                raise ImageError(f"{where}: the image {source} does not exist ({path})")
            return Image.open(path).convert("RGB")
    except Image.DecompressionBombError as error:  # (PIL's pixel limit: a flood of memory)
        raise ImageError(f"{where}: an image too large to decode: {error}") from None
    except (UnidentifiedImageError, OSError) as error:
        raise ImageError(f"{where}: an image that does not decode: {error}") from None
    raise ImageError(f"{where}: an image cell of type {type(cell).__name__} (bytes, path, image)")


GRID_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"  # Qwen2-VL's text for one image


@dataclass(frozen=True)
class ImageInputs:
    """How a model folder takes images: its image processor, its placeholder token, and how
    many placeholders an image takes: ``tokens_per_image`` each (a LLaVA-family model's fixed
    square input), or with ``merge`` > 0 (Qwen2-VL's family, images of any size as grids of
    patches) each image's ``frames x rows x columns / merge**2``. ``marker``: the text an
    image's ``<image>`` becomes before tokenising (``<image>`` itself for LLaVA, whose tokenizer
    reads it as the placeholder; Qwen2-VL's vision start, placeholder and end tokens)."""

    processor: Any
    token_id: int
    tokens_per_image: int
    merge: int = 0
    marker: str = MARKER

    @classmethod
    def of_folder(cls, folder: str | Path, tokenizer: Any) -> ImageInputs:
        """A LLaVA-family folder's (its config's ``vision_config``, ``image_token_id`` and
        feature strategy, its ``preprocessor_config.json``), or a Qwen2-VL-family one's (its
        ``vision_start_token_id`` and ``spatial_merge_size``)."""
        import json

        from transformers import AutoImageProcessor

        config = json.loads((Path(folder) / "config.json").read_text())
        vision = config.get("vision_config")
        token_id = config.get("image_token_id", config.get("image_token_index"))
        if vision is None or token_id is None:
            raise ImageError(
                f"{folder}: not a vision-language model folder (its config.json has no "
                "vision_config and image_token_id); prompts with images need one"
            )
        if "vision_start_token_id" in config:
            return cls._grid(folder, config, tokenizer)
        if "image_size" not in vision or "patch_size" not in vision:
            raise ImageError(
                f"{folder}: a {config.get('model_type')} model, whose vision tower takes no fixed "
                "square image; rlcore reads LLaVA-family and Qwen2-VL-family models' images"
            )
        patches = (vision["image_size"] // vision["patch_size"]) ** 2
        full = config.get("vision_feature_select_strategy", "default") == "full"
        if tokenizer.convert_tokens_to_ids(MARKER) != token_id:
            raise ImageError(
                f"{folder}: its tokenizer does not read {MARKER} as the image placeholder "
                f"(token {token_id} of its config); add {MARKER} to it as that token"
            )
        processor = AutoImageProcessor.from_pretrained(str(folder), trust_remote_code=False)
        return cls(processor, int(token_id), patches + int(full))

    @classmethod
    def _grid(cls, folder: str | Path, config: dict[str, Any], tokenizer: Any) -> ImageInputs:
        from transformers import AutoImageProcessor

        ids = (config["vision_start_token_id"], config["image_token_id"])
        ids += (config.get("vision_end_token_id"),)
        names = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
        read = tuple(tokenizer.convert_tokens_to_ids(n) for n in names)
        if read != ids:
            raise ImageError(
                f"{folder}: its tokenizer reads {', '.join(names)} as tokens {read}, its config "
                f"names {ids} (vision_start_token_id, image_token_id, vision_end_token_id)"
            )
        processor = AutoImageProcessor.from_pretrained(str(folder), trust_remote_code=False)
        merge = int(config["vision_config"].get("spatial_merge_size", 2))
        return cls(processor, int(ids[1]), 0, merge, GRID_MARKER)

    @classmethod
    def of_tokenizer(cls, tokenizer: Any) -> ImageInputs | None:
        """The image inputs of the folder ``tokenizer`` was loaded from
        (``rlcore.models.lm.load_tokenizer``), None when that model reads text only."""
        import json

        config = Path(getattr(tokenizer, "name_or_path", "") or "") / "config.json"
        if not config.is_file() or "vision_config" not in json.loads(config.read_text()):
            return None
        return cls.of_folder(config.parent, tokenizer)

    def pixels(self, images: list[Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``images`` (PIL) as the processor makes them, float32: ``([images, C, H, W], None)``,
        or for a grid model ``([images, patches, D], [images, 3])``, each image's patches first
        and zeros after (as ``IMAGE_GRID`` says in rlcore/columns.py), and its grid."""
        out = self.processor(images=images, return_tensors="pt")
        if not self.merge:
            return out["pixel_values"].float(), None
        grids = out["image_grid_thw"].long()
        each = out["pixel_values"].float().split(grids.prod(-1).tolist())
        return torch.nn.utils.rnn.pad_sequence(list(each), batch_first=True), grids

    def placeholders(self, grids: torch.Tensor | None, images: int) -> list[int]:
        """How many placeholder tokens each of ``images`` images takes (``grids``: theirs)."""
        if grids is None:
            return [self.tokens_per_image] * images
        return (grids.prod(-1) // self.merge**2).tolist()

    def expand(self, ids: list[int], counts: list[int], where: str) -> list[int]:
        """``ids`` with the i-th placeholder token repeated ``counts[i]`` times; there must be
        one placeholder for each image."""
        found = ids.count(self.token_id)
        if found != len(counts):
            raise ImageError(
                f"{where}: {len(counts)} image(s) but {found} {MARKER} marker(s) in the prompt; "
                f"write one {MARKER} where each image goes"
            )
        out: list[int] = []
        at = iter(counts)
        for token in ids:
            out.extend([token] * next(at) if token == self.token_id else [token])
        return out
