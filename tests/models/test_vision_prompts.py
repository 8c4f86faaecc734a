"""Images in reasoning prompts (issue 54): every training pass over a batch with
``pixel_values`` (padded, packed, each distinct prompt once) gives each row the log-probs that
transformers' own forward of that row alone, with its images, gives."""

import pytest
import torch
from tensordict import TensorDict

from rlcore.columns import (
    ATTENTION_MASK,
    INPUT_IDS,
    PIXEL_VALUES,
    RESPONSE_MASK,
    RESPONSES,
    ROLLOUT_LOG_PROBS,
)
from rlcore.config import replace_keys
from rlcore.config.errors import ConfigError
from rlcore.data.packing import prompt_copies
from rlcore.data.sequences import joined_layout, left_pad, trim_padding
from rlcore.models.forward import response_log_probs
from rlcore.models.fused_head import TokenStats
from rlcore.workers.reasoning.rollout import HFEngine
from tests.runners.test_reasoning import length_reward

# the vocabulary of the tiny reasoning model's tokenizer (279 ids), and a placeholder beyond it
VOCAB, IMAGE_TOKEN, SIDE, PATCH = 280, 279, 8, 4
PER_IMAGE = (SIDE // PATCH) ** 2  # placeholders an image takes (the class token dropped)


@pytest.fixture(scope="module")
def llava():
    """A tiny LLaVA (CLIP tower, Qwen2 language model), float32, random weights."""
    from transformers import (
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        Qwen2Config,
    )

    torch.manual_seed(0)
    text = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
    )
    tower = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=SIDE,
        patch_size=PATCH,
        projection_dim=32,
    )
    config = LlavaConfig(
        vision_config=tower,
        text_config=text,
        image_token_id=IMAGE_TOKEN,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    return LlavaForConditionalGeneration(config).eval()


def image_batch(images_per_row=2, width=None):
    """Six rows: 0 and 1 one prompt (the same text and images: a group), 2 and 3 the same text
    and response with other images, 4 and 5 prompts of their own; prompts and responses of
    unequal lengths, each image's placeholders somewhere in its prompt."""
    g = torch.Generator().manual_seed(1)

    def prompt(length):
        text = torch.randint(1, IMAGE_TOKEN, (length,), generator=g).tolist()
        for _ in range(images_per_row):
            at = int(torch.randint(0, len(text) + 1, (1,), generator=g))
            text[at:at] = [IMAGE_TOKEN] * PER_IMAGE
        return text

    def images():
        return torch.randn(images_per_row, 3, SIDE, SIDE, generator=g)

    shared, same_text = (prompt(5), images()), prompt(3)
    rows = [shared, shared, (same_text, images()), (same_text, images())]
    rows += [(prompt(7), images()), (prompt(2), images())]
    lengths = [3, 3, 4, 4, 2, 5]
    responses = [torch.randint(1, IMAGE_TOKEN, (n,), generator=g) for n in lengths]
    responses[3] = responses[2]
    ids, mask = left_pad([p for p, _ in rows], pad_id=0)
    width = width or max(lengths)
    padded = torch.zeros(len(rows), width, dtype=torch.long)
    response_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(responses):
        padded[i, : len(r)], response_mask[i, : len(r)] = r, 1
    columns = joined_layout(ids, mask, padded, response_mask, response_mask.clone())
    columns[PIXEL_VALUES] = torch.stack([pixels for _, pixels in rows])
    batch = TensorDict(columns, batch_size=[len(rows)])
    return batch, [p for p, _ in rows], responses


def alone(model, prompt, pixels, response):
    """transformers' forward of one prompt and response, unpadded, with its images."""
    ids = torch.tensor([*prompt, *response.tolist()])[None]
    logits = model(input_ids=ids, pixel_values=pixels).logits[0].float()
    start = len(prompt) - 1
    picked = logits[start : start + len(response)].log_softmax(-1)
    return picked.gather(-1, response[:, None])[:, 0]


@pytest.mark.parametrize("fused", [False, True], ids=["logits", "fused-head"])
@pytest.mark.parametrize("layout", ["padded", "packed", "shared-prompts"])
def test_each_rows_log_probs_are_its_own_forward_with_its_images(llava, layout, fused):
    batch, prompts, responses = image_batch()
    stats = TokenStats(temperature=1.0, entropy=False)
    with torch.no_grad():
        logp, _, _ = response_log_probs(
            llava,
            batch,
            stats,
            packed=layout == "packed",
            share_prompts=layout == "shared-prompts",
            fused=fused,
        )
        for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            expected = alone(llava, prompt, batch[PIXEL_VALUES][row], response)
            got = logp[row][batch[RESPONSE_MASK][row].bool()]
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # rows 2 and 3: the same text and response, other images, other log-probs (the images count)
    assert (logp[2] - logp[3]).abs().max() > 1e-3


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_a_vision_language_critics_values_are_its_trunks_of_each_row_alone(llava, packed):
    """The critic of image prompts: the model's trunk (vision tower, projection, language model)
    over each row alone with its images, times the value head, read where each response token
    is predicted."""
    from rlcore.models.forward import response_values
    from rlcore.models.vision_value import VisionValueModel

    critic = VisionValueModel(llava)
    torch.nn.init.normal_(critic.score.weight, generator=torch.Generator().manual_seed(2))
    batch, prompts, responses = image_batch()
    with torch.no_grad():
        values = response_values(critic, batch, packed)
        for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            ids = torch.tensor([*prompt, *response.tolist()])[None]
            hidden = llava.model(input_ids=ids, pixel_values=batch[PIXEL_VALUES][row])
            at = len(prompt) - 1
            expected = hidden.last_hidden_state[0, at : at + len(response)] @ critic.score.weight[0]
            expected = expected + critic.score.bias
            got = values[row][batch[RESPONSE_MASK][row].bool()]
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_the_vision_tower_freezes_and_lora_adapts_the_language_model_only(llava):
    import copy
    from types import SimpleNamespace

    from rlcore.models.lm import freeze_vision, vision_tower, with_lora
    from rlcore.models.vision_value import VisionValueModel

    llava = copy.deepcopy(llava)  # (peft adapts a model in place)
    name, _ = vision_tower(llava)
    assert name == "model.vision_tower"
    critic = freeze_vision(VisionValueModel(llava), True)
    trained = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert trained and not any(n.startswith("model.vision_tower.") for n in trained)
    assert any(n.startswith("model.multi_modal_projector.") for n in trained)
    assert any(n.startswith("model.language_model.") for n in trained) and "score.weight" in trained
    # CLIP's attention has q_proj and v_proj too: LoRA puts adapters in the language model's
    lora = SimpleNamespace(rank=2, alpha=4.0, target_modules=["q_proj", "v_proj"])
    adapted = with_lora(critic, lora, value_head=True)
    adapters = [n for n, _ in adapted.named_parameters() if "lora_" in n]
    assert len(adapters) == 2 * 2 * 2  # 2 layers x 2 targets x (A, B)
    assert all(".language_model." in n for n in adapters)
    # fc1 is a layer of CLIP's MLP only: named for the language model, refused by key
    with pytest.raises(ConfigError, match=r"actor\.model\.lora\.target_modules: fc1 not in"):
        with_lora(
            VisionValueModel(llava), SimpleNamespace(rank=2, alpha=4.0, target_modules=["fc1"])
        )


def test_rows_share_a_prompt_only_with_the_same_images():
    batch, _, _ = image_batch()
    firsts, copy_of = prompt_copies(batch)
    assert sorted(firsts.tolist()) == [0, 2, 3, 4, 5]  # five distinct prompts, 1 is 0's copy
    distinct = copy_of.tolist()
    assert distinct[0] == distinct[1] and len(set(distinct)) == 5


@pytest.mark.parametrize(
    ("share", "favoured"),
    [(False, False), (True, False), (False, True)],
    ids=["prefill-each", "prefill-each-group-once", "placeholder-favoured"],
)
def test_the_engine_samples_from_the_images_and_records_the_passes_log_probs(
    llava, tiny_lm, share, favoured
):
    """Groups of 2 rows (a prompt and its images twice), sampled; with
    ``actor.model.share_group_prompts`` each group's prompt and images are prefilled once. The
    recorded log-probs are those a training pass computes with the images (1e-5), not with
    others; no response holds an image placeholder, even where the model favours it (its logit
    raised by 30)."""
    config, dirs = tiny_lm
    config = replace_keys(
        config, {"algorithm.group_size": 2, "actor.model.share_group_prompts": share}
    )
    engine = HFEngine(config, dirs.actor, torch.device("cpu"), model=llava)
    stats = TokenStats(temperature=config.rollout.temperature, entropy=False)
    batch, _, _ = image_batch()
    groups = torch.tensor([0, 0, 4, 4, 5, 5])  # (rows 0, 4, 5: prompts of unequal lengths)
    prompts = TensorDict(
        {
            INPUT_IDS: batch[INPUT_IDS][groups, : -batch[RESPONSES].shape[1]],
            ATTENTION_MASK: batch[ATTENTION_MASK][groups, : -batch[RESPONSES].shape[1]],
            PIXEL_VALUES: batch[PIXEL_VALUES][groups],
        },
        batch_size=[len(groups)],
    )

    def raise_placeholder(module, inputs, logits):
        raised = torch.zeros(logits.shape[-1])
        raised[IMAGE_TOKEN] = 30.0
        return logits + raised

    hook = llava.lm_head.register_forward_hook(raise_placeholder) if favoured else None
    torch.manual_seed(3)
    try:
        out = engine.generate(prompts, greedy=False, log_probs=True)
        with torch.no_grad():
            logp, _, _ = response_log_probs(llava, out, stats, packed=True)
    finally:
        if hook is not None:
            hook.remove()
    assert (out[RESPONSES] != IMAGE_TOKEN).all()
    torch.testing.assert_close(out[PIXEL_VALUES], prompts[PIXEL_VALUES], atol=0, rtol=0)
    real = out[RESPONSE_MASK].bool()
    torch.testing.assert_close(logp[real], out[ROLLOUT_LOG_PROBS][real], atol=1e-5, rtol=0)
    if favoured:  # (the placeholder took nearly all the probability the passes compute)
        assert logp[real].max() < -20
        return
    with torch.no_grad():
        out[PIXEL_VALUES] = torch.roll(out[PIXEL_VALUES], 2, 0)  # each group another's images
        other, _, _ = response_log_probs(llava, out, stats, packed=True)
    assert (other[real] - logp[real]).abs().max() > 1e-3


def test_cutting_padding_columns_leaves_the_images_whole():
    """Responses padded to 6 columns, the longest 5: the last column is cut from every
    ``[B, R]`` tensor, not from ``pixel_values`` ``[B, 6, ...]`` (6 images a row)."""
    batch, _, _ = image_batch(images_per_row=6, width=6)
    cut = trim_padding(batch)
    assert cut[RESPONSES].shape[1] == 5
    torch.testing.assert_close(cut[PIXEL_VALUES], batch[PIXEL_VALUES], atol=0, rtol=0)


@pytest.fixture(scope="module")
def vlm_run_files(llava, tiny_lm, tmp_path_factory):
    """The tiny LLaVA as a model folder (the tiny tokenizer with ``<image>`` as the placeholder,
    a CLIP image processor), and verl-layout parquet files of prompts with an 8x8 image each."""
    from transformers import CLIPImageProcessor

    from rlcore.models.lm import load_tokenizer

    _, dirs = tiny_lm
    root = tmp_path_factory.mktemp("vlm_run")
    tokenizer = load_tokenizer(dirs.actor)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    assert tokenizer.convert_tokens_to_ids("<image>") == IMAGE_TOKEN
    llava.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    side = {"shortest_edge": SIDE}
    crop = {"height": SIDE, "width": SIDE}
    CLIPImageProcessor(size=side, crop_size=crop).save_pretrained(root / "model")
    return root / "model", *verl_image_files(root, lambda i: (SIDE, SIDE))


def verl_image_files(root, side_of):
    """verl-layout parquet files ``root/train.parquet`` (16 rows) and ``root/val.parquet`` (4)
    of prompts "<image>What is i + 1?", each with one random image of ``side_of(i)`` (height,
    width) pixels."""
    import datasets
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    files = []
    for name, count in (("train", 16), ("val", 4)):
        rows = [
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": f"<image>What is {i} + 1?"}],
                "images": [Image.fromarray(rng.integers(0, 256, (*side_of(i), 3), dtype=np.uint8))],
                "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            }
            for i in range(count)
        ]
        path = root / f"{name}.parquet"
        datasets.Dataset.from_list(rows).cast_column(
            "images", datasets.Sequence(datasets.Image())
        ).to_parquet(str(path))
        files.append(path)
    return files


def test_a_ppo_run_with_a_vision_language_critic_trains_and_exports(vlm_run_files, tmp_path):
    """Two PPO iterations of a LLaVA folder on verl-layout image prompts, in one process (the
    actor under FSDP2): the rollout, the reference's and the old log-probs' passes, the critic's
    values and both updates each read the images (a pass handed placeholders without them
    raises). The vision towers stay as loaded (actor.model.freeze_vision_tower's default), the
    rest trains. The export loads with transformers, its image processor beside it, and
    answers the validation prompts as the trained policy does."""
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    from rlcore.cli import main
    from rlcore.config import load_config
    from rlcore.data.sampler import prompt_batch
    from rlcore.data.sequences import response_mask
    from rlcore.placement import plan_for_config
    from rlcore.runners.supervisor import build_runner
    from rlcore.workers.files.weights_file import read_trained_weights

    model, train, val = vlm_run_files
    overrides = [
        f"actor.model.path={model}",
        "warmup.steps=0",
        f"data.train_files=[{train}]",
        f"data.val_files=[{val}]",
        *length_reward(tmp_path),  # (a random model is never right: a signal for the critic)
        "data.train_batch_size=4",
        "algorithm.adv_type=gae",
        "algorithm.group_size=1",
        "algorithm.use_kl_loss=true",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size=2",
        "actor.training_backend=fsdp2",  # (one rank: FSDP2's wrapping, frozen weights in it)
        "actor.optim.lr=0.01",
        "critic.optim.lr=0.01",
        "runner.total_iterations=2",
        "runner.checkpoint_every=2",
        "runner.run_name=r",
        "runner.val_every=0",
        "runner.progress=false",
        "runner.torch_threads=1",
        "logger.tensorboard=false",
        f"runner.output_dir={tmp_path}",
    ]
    config = load_config("reasoning/tiny_arith_ppo", overrides)
    summary = build_runner(config, plan_for_config(config)).run()
    assert summary["iterations"] == 2

    loaded = AutoModelForImageTextToText.from_pretrained(model)
    base = loaded.state_dict()
    checkpoint = tmp_path / "r" / "checkpoints" / "iter_000002"
    for part in ("actor", "critic"):  # (the actor's FSDP2 shards read into the model's shapes)
        saved = read_trained_weights(checkpoint / part, loaded)
        tower = {k: v for k, v in saved.items() if ".vision_tower." in k}
        projector = {k: v for k, v in saved.items() if ".multi_modal_projector." in k}
        assert tower and projector, part
        # the critic's trunk is the policy model's "model" (its keys are the policy's)
        for key, value in tower.items():
            assert torch.equal(value, base[key]), (part, key)
        assert any(not torch.equal(v, base[k]) for k, v in projector.items()), part

    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "r"), str(out)]) == 0
    again = load_config("reasoning/tiny_arith_ppo", [*overrides, "runner.resume=auto"])
    resumed = build_runner(again, plan_for_config(again))
    rows = list(range(len(resumed.val_set)))
    prompts = prompt_batch(rows, resumed.val_set, 1, resumed.tokenizer.pad_token_id)
    resumed.sync()
    trained = resumed.rollout.generate(prompts, resumed.version, greedy=True)
    resumed.close()

    exported = AutoModelForImageTextToText.from_pretrained(out)
    processor = AutoImageProcessor.from_pretrained(out)
    images = [image for row in _parquet_images(val) for image in row]
    pixels = processor(images=images, return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(pixels, prompts[PIXEL_VALUES].flatten(0, 1), atol=0, rtol=0)
    width = prompts[INPUT_IDS].shape[1]
    answers = exported.generate(
        input_ids=prompts[INPUT_IDS],
        attention_mask=prompts[ATTENTION_MASK],
        pixel_values=pixels,
        do_sample=False,
    )[:, width:]
    eos = exported.generation_config.eos_token_id
    mask = response_mask(answers, eos if isinstance(eos, list) else [eos])
    for row in rows:
        mine = answers[row][mask[row].bool()].tolist()
        theirs = trained[RESPONSES][row][trained[RESPONSE_MASK][row].bool()].tolist()
        assert mine == theirs, row
    assert not (out / "critic").exists()


def _parquet_images(path):
    """Each row's images of a verl-layout parquet file, decoded (PIL)."""
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    table = pq.read_table(path).to_pylist()
    return [
        [Image.open(io.BytesIO(cell["bytes"])).convert("RGB") for cell in row["images"]]
        for row in table
    ]


def test_the_visual_task_builds_its_vision_language_model_and_trains(tmp_path):
    """``reasoning/tiny_visual_arith_grpo``, shrunk: the tiny LLaVA built and warmed up on the
    images (its folder loads as any LLaVA folder: 16 placeholders an image), two iterations
    through LoRA adapters."""
    from rlcore.config import load_config
    from rlcore.data.images import ImageInputs
    from rlcore.models.lm import load_tokenizer
    from rlcore.placement import plan_for_config
    from rlcore.prepare import prepare_models
    from rlcore.runners.supervisor import build_runner

    shrunk = [
        "actor.model.tiny.hidden_size=32",
        "actor.model.tiny.num_layers=1",
        "actor.model.tiny.num_heads=2",
        "actor.model.tiny.intermediate_size=64",
        "data.synthetic.num_train=256",
        "data.synthetic.num_val=8",
        "data.train_batch_size=4",
        "actor.ppo_mini_batch_size=4",
        "actor.ppo_micro_batch_size=8",
        "warmup.steps=3",
        "warmup.stop_at_accuracy=null",
        "actor.model.lora.rank=4",  # (adapters in the language model; the reference: them off)
        f"warmup.cache_dir={tmp_path / 'cache'}",
        f"runner.output_dir={tmp_path / 'out'}",
        "runner.total_iterations=2",
        "runner.val_every=0",
        "runner.progress=false",
        "runner.torch_threads=1",
        "logger.tensorboard=false",
    ]
    config = load_config("reasoning/tiny_visual_arith_grpo", shrunk)
    dirs = prepare_models(config)
    inputs = ImageInputs.of_folder(dirs.actor, load_tokenizer(dirs.actor))
    assert inputs.tokens_per_image == 16
    summary = build_runner(config, plan_for_config(config)).run()
    assert summary["iterations"] == 2 and summary["val_prompts"] == 8
    with pytest.raises(ConfigError, match=r"data\.synthetic\.digits: 2; the visual task"):
        load_config("reasoning/tiny_visual_arith_grpo", [*shrunk, "data.synthetic.digits=2"])


def sglang_image_engines(model, train, val, tmp_path):
    """The fake SGLang engine (tests/workers/fake_sglang.py: 0.5.21's signatures) and the hf
    engine over ``model``'s folder, and the validation prompts (with their images) as a batch."""
    from rlcore.config import load_config
    from rlcore.data.sampler import load_prompt_set, prompt_batch
    from rlcore.workers.reasoning.sglang_engine import SGLangEngine
    from tests.lm_fixtures import unchecked

    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            f"actor.model.path={model}",
            "warmup.steps=0",
            f"data.train_files=[{train}]",
            f"data.val_files=[{val}]",
            f"runner.output_dir={tmp_path}",
        ],
    )
    config = unchecked(config, {"rollout.backend": "sglang"})
    cpu = torch.device("cpu")
    sglang = SGLangEngine(config, model, cpu, rank=0, tp_size=1, collocated=False)
    hf = HFEngine(config, model, cpu)
    prompts = load_prompt_set(config, hf.tokenizer, train=False, quiet=True)
    batch = prompt_batch(list(range(len(prompts))), prompts, 1, hf.tokenizer.pad_token_id)
    return sglang, hf, batch


def test_sglang_generates_from_the_images_as_the_hf_engine(vlm_run_files, tmp_path, fake_engines):
    """The SGLang adapter hands each request's images in SGLang's processor_output format (the
    fake reads them as the model does): greedy answers equal the hf engine's, the images ride
    on with the batch, and the placeholder is kept from being sampled by a logit bias, even
    where the model favours it above everything."""
    sglang, hf, prompts = sglang_image_engines(*vlm_run_files, tmp_path)
    ours, theirs = sglang.generate(prompts, greedy=True), hf.generate(prompts, greedy=True)
    for key in (INPUT_IDS, ATTENTION_MASK, RESPONSES, RESPONSE_MASK, PIXEL_VALUES):
        assert torch.equal(ours[key], theirs[key]), key
    (fake,) = fake_engines
    for model in (fake.model, hf.model):
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.lm_head.out_features))
        model.lm_head.bias.data[IMAGE_TOKEN] = 1e4
    ours, theirs = sglang.generate(prompts, greedy=True), hf.generate(prompts, greedy=True)
    assert (ours[RESPONSES] != IMAGE_TOKEN).all()
    assert torch.equal(ours[RESPONSES], theirs[RESPONSES])


@pytest.mark.parametrize("freeze", [True, False], ids=["tower-frozen", "tower-trained"])
def test_ddp_updates_a_vision_language_model_with_its_tower_frozen_or_trained(llava, freeze):
    """DDP (one gloo rank: the reducer's bookkeeping is a rank's own) over the LLaVA: two steps
    update it, frozen or not. A trained CLIP tower has weights no loss reaches (its
    post-layernorm reads only the pooled output LLaVA drops), which DDP is told to expect."""
    import copy

    from rlcore.models.lm import freeze_vision
    from rlcore.workers.training.strategy import DistributedDataParallel, one_rank_group

    model = freeze_vision(copy.deepcopy(llava).train(), freeze)
    ddp = DistributedDataParallel(one_rank_group(torch.device("cpu")), 0, 1).wrap(model)
    batch, _, _ = image_batch()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(2):
        out = ddp(input_ids=batch[INPUT_IDS], pixel_values=batch[PIXEL_VALUES].flatten(0, 1))
        out.logits.float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    tower = {n for n in before if n.startswith("model.vision_tower.")}
    assert any(n.startswith("model.language_model.") for n in moved)
    assert bool(moved & tower) == (not freeze)
