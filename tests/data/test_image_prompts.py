"""Prompts with images in verl's multimodal layout (issue 54): read from parquet (``datasets``'
image cells) and jsonl (paths relative to the file), each ``<image>`` marker made the model's
placeholder tokens, the pixels the model folder's image processor makes, and the errors."""

import json

import numpy as np
import pytest
import torch

from rlcore.columns import PIXEL_VALUES
from rlcore.data.images import ImageInputs
from rlcore.data.prompts import DataError, PromptSet, load_prompt_rows
from rlcore.data.sampler import prompt_batch

SIDE, PATCH, MEAN, STD = 8, 4, 0.5, 0.25


@pytest.fixture(scope="module")
def vlm_folder(tmp_path_factory, tiny_lm):
    """A LLaVA-family folder (config, tokenizer with ``<image>``, image processor; no weights:
    reading prompts needs none)."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, LlavaConfig

    from rlcore.models.lm import load_tokenizer

    _, dirs = tiny_lm
    folder = tmp_path_factory.mktemp("vlm")
    tokenizer = load_tokenizer(dirs.actor)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    text = json.loads((dirs.actor / "config.json").read_text())
    tower = CLIPVisionConfig(
        image_size=SIDE, patch_size=PATCH, hidden_size=16, num_attention_heads=2
    )
    config = LlavaConfig(vision_config=tower, text_config=text, image_token_id=image_token)
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessor(
        size={"shortest_edge": SIDE},
        crop_size={"height": SIDE, "width": SIDE},
        image_mean=[MEAN] * 3,
        image_std=[STD] * 3,
    ).save_pretrained(folder)
    return folder, tokenizer, image_token


def pictures(count, seed=0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    arrays = [rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8) for _ in range(count)]
    return arrays, [Image.fromarray(a) for a in arrays]


def verl_rows(images, questions=("<image>What is the sum?", "Add <image> up", "<image>?")):
    return [
        {
            "data_source": "visual_arith",
            "prompt": [{"role": "user", "content": q}],
            "images": [image],
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i},
        }
        for i, (q, image) in enumerate(zip(questions, images, strict=True))
    ]


def as_parquet(tmp_path, rows):
    import datasets

    features = datasets.Features(
        {
            "data_source": datasets.Value("string"),
            "prompt": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
            "images": datasets.Sequence(datasets.Image()),
            "reward_model": {
                "style": datasets.Value("string"),
                "ground_truth": datasets.Value("string"),
            },
            "extra_info": {"index": datasets.Value("int64")},
        }
    )
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


def built(path, tokenizer, folder, max_length=64):
    rows = load_prompt_rows([str(path)], "data.train_files", "prompt", "answer", "gsm8k", True)
    return PromptSet.build(
        rows,
        tokenizer,
        suffix="",
        chat_template=False,
        max_length=max_length,
        what="data.train_files",
        images=ImageInputs.of_folder(folder, tokenizer),
    )


def test_parquet_and_jsonl_rows_give_placeholders_and_the_processors_pixels(vlm_folder, tmp_path):
    folder, tokenizer, image_token = vlm_folder
    arrays, images = pictures(3)
    from_parquet = built(as_parquet(tmp_path, verl_rows(images)), tokenizer, folder)
    (tmp_path / "pics").mkdir()
    rows = verl_rows([f"pics/{i}.png" for i in range(3)])
    for i, image in enumerate(images):
        image.save(tmp_path / "pics" / f"{i}.png")
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    from_jsonl = built(jsonl, tokenizer, folder)
    per_image = (SIDE // PATCH) ** 2
    for prompts in (from_parquet, from_jsonl):
        for i, ids in enumerate(prompts.prompts):
            at = [j for j, t in enumerate(ids) if t == image_token]
            assert len(at) == per_image and at == list(range(at[0], at[0] + per_image)), i
        # an 8x8 image is neither resized nor cropped: rescaled and normalised, by hand
        for pixels, array in zip(prompts.images, arrays, strict=True):
            expected = (torch.tensor(array).permute(2, 0, 1) / 255.0 - MEAN) / STD
            torch.testing.assert_close(pixels, expected[None], atol=1e-6, rtol=0)
    assert from_parquet.prompts == from_jsonl.prompts
    # rlcore's own layout (data.prompt_key / answer_key) reads an images field as well
    own = tmp_path / "own.jsonl"
    lines = [
        {"prompt": row["prompt"][0]["content"], "answer": f"#### {i}", "images": row["images"]}
        for i, row in enumerate(rows)
    ]
    own.write_text("".join(json.dumps(line) + "\n" for line in lines))
    from_own = built(own, tokenizer, folder)
    assert from_own.prompts == from_jsonl.prompts
    for mine, theirs in zip(from_own.images, from_jsonl.images, strict=True):
        torch.testing.assert_close(mine, theirs, atol=0, rtol=0)
    batch = prompt_batch([2, 0], from_parquet, repeat=2, pad_id=tokenizer.pad_token_id)
    assert batch[PIXEL_VALUES].shape == (4, 1, 3, SIDE, SIDE)
    for row, source in enumerate([2, 2, 0, 0]):
        torch.testing.assert_close(batch[PIXEL_VALUES][row], from_parquet.images[source])


def test_bad_image_rows_are_refused_naming_the_file_and_row(vlm_folder, tmp_path, monkeypatch):
    folder, tokenizer, _ = vlm_folder
    _, images = pictures(3)
    two_markers = verl_rows(images, ("<image>", "<image> and <image>", "<image>"))
    with pytest.raises(DataError, match=r"row 1: 1 image\(s\) but 2 <image> marker"):
        built(as_parquet(tmp_path, two_markers), tokenizer, folder)
    jsonl = tmp_path / "missing.jsonl"
    jsonl.write_text(json.dumps(verl_rows(["nowhere.png"], ("<image>",))[0]) + "\n")
    with pytest.raises(DataError, match=r"missing\.jsonl: row 0: the image nowhere\.png does not"):
        built(jsonl, tokenizer, folder)
    rows = load_prompt_rows(
        [str(as_parquet(tmp_path, verl_rows(images)))], "data.train_files", "p", "a", "gsm8k", True
    )
    with pytest.raises(DataError, match=r"set actor\.model\.path to a vision-language"):
        PromptSet.build(
            rows, tokenizer, suffix="", chat_template=False, max_length=64, what="data.train_files"
        )
    # an image over PIL's pixel limit (a decompression bomb; the limit lowered to 8x8 / 2 here)
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 16)
    with pytest.raises(DataError, match=r"row 0: an image too large to decode"):
        built(as_parquet(tmp_path, verl_rows(images)), tokenizer, folder)
    monkeypatch.undo()
    # the image's placeholders count in the length limit: 4 of them make each prompt too long
    with pytest.raises(DataError, match=r"every prompt is longer than data\.max_prompt_length=4"):
        built(as_parquet(tmp_path, verl_rows(images)), tokenizer, folder, max_length=4)


def test_geometry3k_prepared_in_verls_layout_loads_with_its_images(vlm_folder, tmp_path):
    """examples/reasoning/prepare_geo3k.py over a local copy in the hub's file layout (a problem
    without its marker gets one in front): verl's columns, the images' bytes unchanged, and the
    rows load as prompts with the processor's pixels of those images."""
    import io

    import datasets
    import pyarrow.parquet as pq

    from examples.reasoning.prepare_geo3k import INSTRUCTION, main

    folder, tokenizer, image_token = vlm_folder
    arrays, images = pictures(4)
    encoded = []
    for image in images:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    features = datasets.Features(
        {
            "images": datasets.Sequence(datasets.Image()),
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    local = tmp_path / "geometry3k"
    (local / "data").mkdir(parents=True)
    problems = {
        "train": ["<image>Find x.", "Find the area."],
        "test": ["<image>Find y.", "<image>z"],
    }
    for split, start in (("train", 0), ("test", 2)):
        rows = [
            {"images": [{"bytes": encoded[start + i]}], "problem": p, "answer": f"{start + i}"}
            for i, p in enumerate(problems[split])
        ]
        table = datasets.Dataset.from_list(rows, features=features)
        table.to_parquet(str(local / "data" / f"{split}-00000-of-00001.parquet"))
    assert (
        main(["--local_dataset_path", str(local), "--local_save_dir", str(tmp_path / "out")]) == 0
    )

    written = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["data_source"] for r in written] == ["hiyouga/geometry3k"] * 2
    assert [r["prompt"][0]["content"] for r in written] == [
        f"<image>Find x. {INSTRUCTION}",
        f"<image>Find the area. {INSTRUCTION}",  # (the marker put in front)
    ]
    assert [r["reward_model"]["ground_truth"] for r in written] == ["0", "1"]
    assert [r["images"][0]["bytes"] for r in written] == encoded[:2]
    assert written[1]["extra_info"] == {
        "split": "train",
        "index": 1,
        "answer": "1",
        "question": "Find the area.",
    }
    prompts = built(tmp_path / "out" / "test.parquet", tokenizer, folder, max_length=512)
    assert prompts.answers == ["2", "3"]
    for pixels, array in zip(prompts.images, arrays[2:], strict=True):
        expected = (torch.tensor(array).permute(2, 0, 1) / 255.0 - MEAN) / STD
        torch.testing.assert_close(pixels, expected[None], atol=1e-6, rtol=0)
    assert all(ids.count(image_token) == (SIDE // PATCH) ** 2 for ids in prompts.prompts)
