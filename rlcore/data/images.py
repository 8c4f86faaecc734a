"""Images in reasoning prompts (verl's multimodal layout): decoding a row's image cells, the
model's image processor, and the image placeholders of the tokenised prompt.

verl's preprocessing (its geo3k example) writes a row's images as a list in an ``images`` column,
each a Hugging Face ``Image`` cell (``{"bytes": ..., "path": ...}`` in the parquet file, a PIL
image once ``datasets`` decodes it), and marks where each one goes with the text ``<image>`` in
the chat prompt. Here a cell may also be a path (relative to the data file, as a jsonl file
would give it). Each marker becomes the model's image placeholder token repeated as many times
as the model turns an image into tokens (a LLaVA-family model: one per patch of its vision
tower's square input, ``vision_feature_select_strategy`` "default" dropping the class token),
so the token budgets count the image's tokens; the images themselves go through the model
folder's image processor (resized and normalised), one ``[images, C, H, W]`` tensor a prompt.
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


@dataclass(frozen=True)
class ImageInputs:
    """How a model folder takes images: its image processor, its placeholder token, and how
    many placeholders an image takes (``tokens_per_image``)."""

    processor: Any
    token_id: int
    tokens_per_image: int

    @classmethod
    def of_folder(cls, folder: str | Path, tokenizer: Any) -> ImageInputs:
        """A LLaVA-family folder's (its config's ``vision_config``, ``image_token_id`` and
        feature strategy, its ``preprocessor_config.json``)."""
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
        if "image_size" not in vision or "patch_size" not in vision:
            raise ImageError(
                f"{folder}: a {config.get('model_type')} model, whose vision tower takes no fixed "
                "square image; rlcore reads LLaVA-family models' images"
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
    def of_tokenizer(cls, tokenizer: Any) -> ImageInputs | None:
        """The image inputs of the folder ``tokenizer`` was loaded from
        (``rlcore.models.lm.load_tokenizer``), None when that model reads text only."""
        import json

        config = Path(getattr(tokenizer, "name_or_path", "") or "") / "config.json"
        if not config.is_file() or "vision_config" not in json.loads(config.read_text()):
            return None
        return cls.of_folder(config.parent, tokenizer)

    def pixels(self, images: list[Any]) -> torch.Tensor:
        """``[images, C, H, W]`` float32: ``images`` (PIL) as the processor makes them."""
        out = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return out.float()

    def expand(self, ids: list[int], images: int, where: str) -> list[int]:
        """``ids`` with each placeholder token repeated ``tokens_per_image`` times; there must be
        one placeholder for each of the row's ``images``."""
        found = ids.count(self.token_id)
        if found != images:
            raise ImageError(
                f"{where}: {images} image(s) but {found} {MARKER} marker(s) in the prompt; "
                f"write one {MARKER} where each image goes"
            )
        out: list[int] = []
        for token in ids:
            out.extend([token] * self.tokens_per_image if token == self.token_id else [token])
        return out
