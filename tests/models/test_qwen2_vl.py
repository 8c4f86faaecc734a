"""Qwen2-VL-family folders in reasoning runs (issue 54): images of any size as grids of patches
(``image_grid_thw``), each ``<image>`` made Qwen2-VL's vision start, placeholder and end tokens,
the placeholders as many as the image's grid says, and the model's 3-D positions, in every pass
and in generation."""

import pytest
import torch

from rlcore.columns import IMAGE_GRID, PIXEL_VALUES, RESPONSE_MASK
from rlcore.config.errors import ConfigError
from rlcore.data.images import ImageInputs
from rlcore.data.prompts import PromptSet, load_prompt_rows
from rlcore.data.sampler import prompt_batch
from rlcore.data.sequences import joined_layout
from rlcore.models.forward import response_log_probs, response_values
from rlcore.models.fused_head import TokenStats
from tests.runners.test_reasoning import length_reward

# image sides (height, width): the processor makes each a grid of 2-pixel patches, in blocks of
# 2 x 2 (the merge) a placeholder, between 8x8 and 16x16 pixels
SIDES = [(8, 8), (8, 12), (12, 8), (12, 12)]
TOKENS = {(8, 8): 4, (8, 12): 6, (12, 8): 6, (12, 12): 9}


@pytest.fixture(scope="module")
def qwen2_vl(tiny_lm, tmp_path_factory):
    """A tiny Qwen2-VL folder (random weights; the tiny tokenizer with Qwen2-VL's three vision
    tokens; its image processor) and verl-layout parquet files of prompts, each with one image
    of one of ``SIDES``."""
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
    )

    from rlcore.models.lm import load_tokenizer

    _, dirs = tiny_lm
    root = tmp_path_factory.mktemp("qwen2_vl")
    tokenizer = load_tokenizer(dirs.actor)
    names = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": names})
    start, image, end = tokenizer.convert_tokens_to_ids(names)
    torch.manual_seed(0)
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 4]},
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 1,
            "embed_dim": 16,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 2,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=image,
        vision_start_token_id=start,
        vision_end_token_id=end,
        video_token_id=tokenizer.pad_token_id,  # (no videos here)
    )
    Qwen2VLForConditionalGeneration(config).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    Qwen2VLImageProcessor(
        patch_size=2, merge_size=2, temporal_patch_size=2, min_pixels=64, max_pixels=256
    ).save_pretrained(root / "model")
    from tests.models.test_vision_prompts import verl_image_files

    return root / "model", tokenizer, *verl_image_files(root, lambda i: SIDES[i % 4])


def grid_prompts(qwen2_vl, file=None):
    model, tokenizer, train, _ = qwen2_vl
    rows = load_prompt_rows([str(file or train)], "data.train_files", "p", "a", "gsm8k", True)
    images = ImageInputs.of_folder(model, tokenizer)
    return images, PromptSet.build(
        rows,
        tokenizer,
        suffix="",
        chat_template=False,
        max_length=64,
        what="data.train_files",
        images=images,
    )


def test_each_image_takes_the_placeholders_its_grid_says_between_the_vision_tokens(qwen2_vl):
    _, tokenizer, _, _ = qwen2_vl
    images, prompts = grid_prompts(qwen2_vl)
    start, image, end = tokenizer.convert_tokens_to_ids(
        ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
    )
    rows = zip(prompts.prompts, prompts.grids, prompts.images, strict=True)
    for i, (ids, grid, pixels) in enumerate(rows):
        height, width = SIDES[i % 4]
        # (frames, rows, columns) of 2-pixel patches, the frame's one image twice over time
        assert grid.tolist() == [[1, height // 2, width // 2]]
        count = TOKENS[(height, width)]
        first = ids.index(image)
        assert ids[first - 1] == start and ids[first : first + count] == [image] * count
        assert ids[first + count] == end and ids.count(image) == count
        # the patches first, zeros after (the largest image, 12x12, has 36 patches)
        patches = height * width // 4
        assert pixels.shape == (1, 36, 3 * 2 * 2 * 2)
        assert pixels[0, patches:].abs().sum() == 0 and pixels[0, :patches].abs().sum() > 0
    assert images.placeholders(prompts.grids[1], 1) == [6]


def image_batch(qwen2_vl):
    """Four rows of prompts (images of each size) with responses of unequal lengths."""
    _, tokenizer, _, _ = qwen2_vl
    _, prompts = grid_prompts(qwen2_vl)
    batch = prompt_batch([0, 1, 2, 3], prompts, 1, tokenizer.pad_token_id)
    g = torch.Generator().manual_seed(1)
    lengths = [3, 5, 2, 4]
    responses = torch.zeros(4, 5, dtype=torch.long)
    mask = torch.zeros(4, 5, dtype=torch.long)
    for row, n in enumerate(lengths):
        responses[row, :n] = torch.randint(1, 200, (n,), generator=g)
        mask[row, :n] = 1
    columns = joined_layout(batch["input_ids"], batch["attention_mask"], responses, mask, mask)
    for key in (PIXEL_VALUES, IMAGE_GRID):
        columns[key] = batch[key]
    from tensordict import TensorDict

    return TensorDict(columns, batch_size=[4]), prompts, responses, lengths


def alone(model, ids, pixels, grid, image):
    """transformers' own forward of one unpadded row with its image (its 3-D positions computed
    by the model)."""
    ids = torch.tensor(ids)[None]
    return model(
        input_ids=ids,
        pixel_values=pixels[: int(grid.prod())],
        image_grid_thw=grid,
        mm_token_type_ids=(ids == image).int(),
    )


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_log_probs_and_values_of_each_row_are_transformers_own_forward_of_it(qwen2_vl, packed):
    from transformers import Qwen2VLForConditionalGeneration

    from rlcore.models.vision_value import VisionValueModel

    folder, _, _, _ = qwen2_vl
    model = Qwen2VLForConditionalGeneration.from_pretrained(folder).eval()
    critic = VisionValueModel(model)
    torch.nn.init.normal_(critic.score.weight, generator=torch.Generator().manual_seed(2))
    image = model.config.image_token_id
    batch, prompts, responses, lengths = image_batch(qwen2_vl)
    stats = TokenStats(temperature=1.0, entropy=False)
    with torch.no_grad():
        logp, _, _ = response_log_probs(model, batch, stats, packed=packed)
        values = response_values(critic, batch, packed)
        for row, n in enumerate(lengths):
            prompt = prompts.prompts[row]
            ids = [*prompt, *responses[row, :n].tolist()]
            grid, pixels = prompts.grids[row], prompts.images[row][0]
            at = len(prompt) - 1
            logits = alone(model, ids, pixels, grid, image).logits[0, at : at + n]
            expected = logits.log_softmax(-1).gather(-1, responses[row, :n, None])[:, 0]
            got = logp[row][batch[RESPONSE_MASK][row].bool()]
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
            hidden = critic.model(
                input_ids=torch.tensor(ids)[None],
                pixel_values=pixels[: int(grid.prod())],
                image_grid_thw=grid,
                mm_token_type_ids=(torch.tensor(ids)[None] == image).int(),
            ).last_hidden_state[0, at : at + n]
            expected = critic.score(hidden)[:, 0]
            got = values[row][batch[RESPONSE_MASK][row].bool()]
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # rows 1 and 2 with each other's image (8x12 and 12x8: 6 placeholders either way, another
    # grid): other log-probs, so the grid and pixels are read
    swapped = batch.clone()
    for key in (PIXEL_VALUES, IMAGE_GRID):
        swapped[key] = batch[key][[0, 2, 1, 3]]
    with torch.no_grad():
        other, _, _ = response_log_probs(model, swapped, stats, packed=packed)
    assert (other[1] - logp[1]).abs().max() > 1e-4
    torch.testing.assert_close(other[0], logp[0], atol=0, rtol=0)


def test_a_ppo_run_with_a_qwen2_vl_folder_trains(qwen2_vl, tmp_path):
    """Two PPO iterations (a vision-language critic) of the Qwen2-VL folder on verl-layout
    parquet with images of four sizes, the sequences packed (its check passes on the model):
    generation and every pass read the grids; a group's prompt computed once is refused by key
    before the start."""
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config
    from rlcore.runners.supervisor import build_runner

    model, _, train, val = qwen2_vl
    overrides = [
        f"actor.model.path={model}",
        "warmup.steps=0",
        f"data.train_files=[{train}]",
        f"data.val_files=[{val}]",
        *length_reward(tmp_path),
        "data.train_batch_size=4",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size=2",
        "algorithm.use_kl_loss=true",
        "actor.model.use_remove_padding=true",
        "runner.total_iterations=2",
        "runner.val_every=0",
        "runner.progress=false",
        "runner.torch_threads=1",
        "logger.tensorboard=false",
        f"runner.output_dir={tmp_path}",
    ]
    config = load_config("reasoning/tiny_arith_ppo", overrides)
    summary = build_runner(config, plan_for_config(config)).run()
    assert summary["iterations"] == 2
    shared = ["algorithm.adv_type=grpo", "algorithm.group_size=2"]
    shared += ["actor.model.use_remove_padding=false"]
    shared = load_config(
        "reasoning/tiny_arith_ppo", [*overrides, *shared, "actor.model.share_group_prompts=true"]
    )
    with pytest.raises(ConfigError, match=r"actor\.model\.share_group_prompts \(Qwen2-VL's\)"):
        build_runner(shared, plan_for_config(shared))


def test_sglang_generates_from_the_grids_as_the_hf_engine(qwen2_vl, tmp_path, fake_engines):
    """Qwen2-VL's images through the SGLang adapter (processor_output: the pixels and the grid
    of each request): greedy answers equal the hf engine's."""
    from tests.models.test_vision_prompts import sglang_image_engines

    model, _, train, val = qwen2_vl
    sglang, hf, prompts = sglang_image_engines(model, train, val, tmp_path)
    ours, theirs = sglang.generate(prompts, greedy=True), hf.generate(prompts, greedy=True)
    assert int(ours["response_mask"].sum()) > len(prompts)
    for key in ("input_ids", "responses", "response_mask", PIXEL_VALUES, IMAGE_GRID):
        assert torch.equal(ours[key], theirs[key]), key
