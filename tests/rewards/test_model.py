"""``reward.kind: model``: the reward component's scores against a direct forward of the same
model, micro-batching and rank shards, the combination with the rule, and bad folders refused."""

import json

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config import ConfigError, load_config, replace_keys
from rlcore.models.lm import load_tokenizer
from rlcore.placement import plan_for_config
from rlcore.rewards.model import check_reward_model
from rlcore.runners.preflight import preflight


@pytest.fixture(scope="module")
def reward_model(tiny_lm, tmp_path_factory):
    """A one-logit sequence classifier made from the tiny policy (its head random, seeded)."""
    from transformers import AutoModelForSequenceClassification

    _, dirs = tiny_lm
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(dirs.actor), num_labels=1)
    folder = tmp_path_factory.mktemp("rm")
    model.save_pretrained(folder)
    load_tokenizer(dirs.actor).save_pretrained(folder)
    return folder


def rows(tokenizer, prompts, responses, answers):
    """A generated batch as the rollout lays it out: left-padded prompts, right-padded
    responses."""
    pad = tokenizer.pad_token_id
    p = [tokenizer(x, add_special_tokens=False)["input_ids"] for x in prompts]
    r = [tokenizer(x, add_special_tokens=False)["input_ids"] for x in responses]
    wp, wr = max(map(len, p)), max(map(len, r))
    prompt_ids = torch.tensor([[pad] * (wp - len(x)) + x for x in p])
    response_ids = torch.tensor([x + [pad] * (wr - len(x)) for x in r])
    mask = torch.tensor([[1] * len(x) + [0] * (wr - len(x)) for x in r])
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention = torch.cat([(prompt_ids != pad).long(), mask], dim=1)
    batch = TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attention,
            "responses": response_ids,
            "response_mask": mask,
        },
        batch_size=[len(p)],
    )
    batch["answers"] = NonTensorStack(*answers)
    return batch


PROMPTS = ["What is 1 + 2? Answer after ####.", "What is 10 + 25?", "What is 7 + 7? Answer."]
RESPONSES = [" #### 3", " #### 36 and more words", " 14"]
ANSWERS = ["3", "35", "14"]


def worker_for(tiny_lm, reward_model, **reward):
    from rlcore.rewards.worker import RewardWorker

    config, dirs = tiny_lm
    keys = {"reward.kind": "model", "reward.model.path": str(reward_model)}
    config = replace_keys(config, keys | {f"reward.model.{k}": v for k, v in reward.items()})
    return RewardWorker(None, config, dirs.actor)


def test_scores_equal_a_direct_forward_whatever_the_micro_batch_and_the_shards(
    tiny_lm, reward_model
):
    from transformers import AutoModelForSequenceClassification

    tokenizer = load_tokenizer(reward_model)
    assert tokenizer.chat_template is not None  # (the tiny model's: the conversation is read)
    model = AutoModelForSequenceClassification.from_pretrained(str(reward_model)).eval()
    with torch.no_grad():  # one row at a time, no padding: the score is the last token's logit
        direct = []
        for p, r in zip(PROMPTS, RESPONSES, strict=True):
            chat = [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
            ids = tokenizer.apply_chat_template(chat, tokenize=True, return_tensors="pt")
            ids = ids["input_ids"] if not isinstance(ids, torch.Tensor) else ids
            direct.append(model(input_ids=ids).logits[0, 0].item())
    batch = rows(load_tokenizer(tiny_lm[1].actor), PROMPTS, RESPONSES, ANSWERS)
    for micro in (1, 2, 64):
        worker = worker_for(tiny_lm, reward_model, micro_batch_size=micro)
        try:
            whole = worker.score(batch)
            shards = [worker.score(batch[:2]), worker.score(batch[2:])]  # two ranks' shares
        finally:
            worker.close()
        assert whole["model_scores"].tolist() == pytest.approx(direct, abs=1e-5)
        assert torch.cat([s["model_scores"] for s in shards]).tolist() == pytest.approx(
            direct, abs=1e-5
        )
        # rule_only_for_accuracy: the reward is the model's; the rule gives the verdicts
        assert whole["scores"].tolist() == pytest.approx(direct, abs=1e-5)
        assert whole["correct"].tolist() == [True, False, False]  # the third has no ####


def fsdp2_rank_main(rank, out, config, model_dir, batch):
    """Rank ``rank`` of 2 scores its rows with the reward model sharded over both (FSDP2): rank
    0 the first two rows one at a time (two passes), rank 1 the third (one pass, then a dummy
    one to join rank 0's second)."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from rlcore.rewards.worker import RewardWorker

    ctx = SimpleNamespace(
        group=dist.group.WORLD, world_size=2, rank=rank, torch_device=torch.device("cpu")
    )
    worker = RewardWorker(ctx, config, model_dir)
    try:
        mine = batch[:2] if rank == 0 else batch[2:]
        scores = worker.score(mine)["model_scores"]
        sharded = worker.router.scorers["model"].model
        held = sum(p.to_local().numel() for p in sharded.parameters())  # (its shards)
        torch.save({"scores": scores, "held": held}, f"{out}/rank{rank}.pt")
    finally:
        worker.close()


def test_an_fsdp2_reward_model_scores_as_a_direct_forward_with_its_weights_sharded(
    tiny_lm, reward_model, tmp_path
):
    from transformers import AutoModelForSequenceClassification

    from tests.rank_pool import rank_pool

    config, dirs = tiny_lm
    config = replace_keys(
        config,
        {
            "reward.kind": "model",
            "reward.model.path": str(reward_model),
            "reward.model.backend": "fsdp2",
            "reward.model.micro_batch_size": 1,
        },
    )
    batch = rows(load_tokenizer(dirs.actor), PROMPTS, RESPONSES, ANSWERS)
    rank_pool(2).run(fsdp2_rank_main, str(tmp_path), config, dirs.actor, batch)
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    whole = AutoModelForSequenceClassification.from_pretrained(str(reward_model))
    total = sum(p.numel() for p in whole.parameters())
    assert all(g["held"] < 0.75 * total for g in got)  # each rank holds about half
    single = worker_for(tiny_lm, reward_model)  # one process, the whole model
    try:
        expected = single.score(batch)["model_scores"]
    finally:
        single.close()
    scores = torch.cat([g["scores"] for g in got])
    assert scores.tolist() == pytest.approx(expected.tolist(), abs=1e-5)


def test_combine_adds_the_rule_score_as_asked(tiny_lm, reward_model):
    batch = rows(load_tokenizer(tiny_lm[1].actor), PROMPTS, RESPONSES, ANSWERS)
    out = {}
    for combine, extra in (
        ("sum", {}),
        ("weighted", {"model_weight": 0.5, "rule_weight": 2.0}),
    ):
        worker = worker_for(tiny_lm, reward_model, combine=combine, **extra)
        try:
            out[combine] = worker.score(batch)
        finally:
            worker.close()
    model = out["sum"]["model_scores"]
    rule = torch.tensor([1.0, 0.0, 0.0])  # gsm8k's: right 1, wrong 0 (format_score 0)
    assert out["sum"]["scores"].tolist() == pytest.approx((model + rule).tolist(), abs=1e-6)
    weighted = 0.5 * model + 2.0 * rule
    assert out["weighted"]["scores"].tolist() == pytest.approx(weighted.tolist(), abs=1e-6)


def test_a_folder_that_is_no_one_label_classifier_is_refused_before_the_start(
    tiny_lm, reward_model, tmp_path
):
    _, dirs = tiny_lm
    with pytest.raises(ConfigError, match=r"reward.model.path: .* is not a sequence-class"):
        check_reward_model(str(dirs.actor))  # a causal LM
    two = tmp_path / "two_labels"
    two.mkdir()
    for f in reward_model.iterdir():
        (two / f.name).write_bytes(f.read_bytes())
    described = json.loads((two / "config.json").read_text())
    described["id2label"] = {"0": "a", "1": "b"}
    described.pop("num_labels", None)
    (two / "config.json").write_text(json.dumps(described))
    with pytest.raises(ConfigError, match="2 labels"):
        check_reward_model(str(two))
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [f"runner.output_dir={tmp_path}", "reward.kind=model", f"reward.model.path={dirs.actor}"],
    )
    with pytest.raises(ConfigError, match=r"reward\.model\.path"):
        preflight(config, plan_for_config(config))  # the dry run's checks
    with pytest.raises(ConfigError, match=r"reward\.model\.path: null, but reward\.kind is model"):
        load_config("reasoning/tiny_arith_ppo", ["reward.kind=model"])
    with pytest.raises(ConfigError, match=r"reward\.model\.combine=weighted"):
        load_config(
            "reasoning/tiny_arith_ppo",
            [
                "reward.kind=model",
                f"reward.model.path={reward_model}",
                "reward.model.rule_weight=2",
            ],
        )


def test_score_normalize_standardises_the_model_part_by_running_statistics():
    from rlcore.runners.score_normalizer import ScoreNormalizer
    from tests.rewards.test_rules import sectioned

    def scored(model, rule):
        model, rule = torch.tensor(model), torch.tensor(rule)
        scores = 0.5 * torch.nan_to_num(model) + rule  # combine weighted: 0.5 x model + rule
        return TensorDict({"scores": scores, "model_scores": model}, batch_size=[len(model)])

    assert ScoreNormalizer.of(sectioned({"score_normalize": False})) is None  # (off: none)
    norm = ScoreNormalizer.of(
        sectioned({"score_normalize": True, "combine": "weighted", "model_weight": 0.5})
    )
    first = scored([1.0, 3.0, float("nan")], [1.0, 0.0, 1.0])  # the third: no model score
    norm(first)  # mean 2, population std 1: the model parts become -1 and 1
    assert first["scores"].tolist() == pytest.approx([0.5 * -1 + 1, 0.5 * 1 + 0, 1.0])
    second = scored([5.0], [0.0])
    metrics = norm(second)  # over 1, 3, 5: mean 3, std sqrt(8/3)
    z = (5 - 3) / (8 / 3) ** 0.5
    assert second["scores"].tolist() == pytest.approx([0.5 * z])
    assert metrics["reward/model_score_running_std"] == pytest.approx((8 / 3) ** 0.5)
    again = ScoreNormalizer(sectioned({"combine": "sum", "model_weight": 0.5}))
    again.load_state_dict(norm.state_dict())  # what a checkpoint carries
    third = TensorDict(
        {"scores": torch.tensor([3.0]), "model_scores": torch.tensor([3.0])}, batch_size=[1]
    )
    again(third)  # sum: weight 1; 3 is the mean of 1, 3, 5, 3
    assert third["scores"].tolist() == pytest.approx([0.0])
