"""Mixture-of-experts policies (issue 53): the rollout records each token's experts, and the
actor's passes replaying them compute the log-probs of the rollout's own forward; a routing
flipped on purpose changes them; the load-balancing loss reaches the routers under replay."""

import pytest
import torch
from tensordict import TensorDict

from rlcore.config.errors import ConfigError
from rlcore.data.sequences import left_pad, position_ids
from rlcore.models import moe
from rlcore.workers.reasoning.lm_actor import LMActor
from rlcore.workers.reasoning.rollout import HFEngine
from tests.lm_fixtures import SOLO, tiny_config

CPU = torch.device("cpu")
MOE = ["actor.model.tiny.num_experts=4", "actor.model.tiny.experts_per_token=2"]
REPLAY = [*MOE, "rollout.routing_replay=true"]


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory):
    """``(config, model_dirs)``: a tiny MoE model (4 experts, 2 a token), built once."""
    from rlcore.prepare import prepare_models

    root = tmp_path_factory.mktemp("tiny_moe")
    config = tiny_config(root / "cache", root / "outputs", *REPLAY)
    return config, prepare_models(config)


def sampled(config, dirs, actor=None, rows=6, seed=1, copies=1):
    """A sampled batch of ``rows`` prompts of unequal lengths, each ``copies`` times in a row
    (groups, as a training batch lays them out)."""
    engine = HFEngine(config, dirs.actor, CPU, model=None if actor is None else actor.model)
    prompts = [
        engine.tokenizer(f"What is {i} + {7 * i}?")["input_ids"][: 3 + i % 4]
        for i in range(rows)
        for _ in range(copies)
    ]
    rows *= copies
    ids, mask = left_pad(prompts, engine.tokenizer.pad_token_id)
    torch.manual_seed(seed)
    prompt_td = TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[rows])
    return engine, engine.generate(prompt_td, greedy=False, log_probs=True)


def test_the_tiny_moe_routes_each_token_to_k_of_its_experts(tiny_moe):
    config, dirs = tiny_moe
    engine, batch = sampled(config, dirs)
    layers = moe.routers(engine.model)
    assert [type(r).__name__ for r in layers] == ["Qwen3MoeTopKRouter"]  # one layer (TINY)
    routed = batch["routed_experts"]
    assert routed.shape == (*batch["input_ids"].shape, 1, 2)
    real = batch["attention_mask"].bool()
    # every real token but the response's last has its two distinct experts recorded
    last = real.long().cumsum(1) == real.sum(1, keepdim=True)
    recorded = real & ~last
    chosen = routed[recorded]
    assert ((chosen >= 0) & (chosen < 4)).all()
    assert (chosen[..., 0] != chosen[..., 1]).all()
    # the rollout's own choice: its routers over the sequences as recorded, token by token
    with moe.recording(engine.model) as calls:
        engine.model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        )
    again = calls[0][0].reshape(*batch["input_ids"].shape, 2)
    same = (again.sort(-1).values == routed[:, :, 0].long().sort(-1).values).all(-1)
    assert same[recorded].float().mean() > 0.95  # a near tie may flip between the two passes


@pytest.mark.parametrize("layout", ["padded", "packed", "shared"])
def test_replayed_log_probs_equal_the_rollouts_own(tiny_moe, layout):
    """The actor's old log-probs, replaying the recorded experts, equal what the rollout
    recorded while sampling (its own forward, token by token with a key-value cache) in every
    layout of the pass; a routing flipped on purpose changes the tokens after it."""
    config, dirs = tiny_moe
    extra = {
        "padded": [],
        "packed": ["actor.model.use_remove_padding=true"],
        "shared": ["actor.model.share_group_prompts=true", "algorithm.group_size=2"],
    }[layout]
    config = tiny_config(dirs.actor.parent, dirs.actor.parent, *REPLAY, *extra)
    actor = LMActor(SOLO, config, dirs.actor)
    # shared: groups of 2 copies of a prompt, which the rollout prefills once a group too
    engine, batch = sampled(config, dirs, actor, *((3, 1, 2) if layout == "shared" else ()))
    if layout == "shared":  # (the rollout's prefill of one row a group was taken)
        cut = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        prompts = (batch["input_ids"][:, :cut], batch["attention_mask"][:, :cut])
        assert engine._shared_prompts(*prompts)
    valid = batch["response_mask"].bool()
    replayed = actor.compute_log_probs(batch)
    assert torch.allclose(replayed[valid], batch["rollout_log_probs"][valid], atol=1e-5)
    # a flipped routing: one prompt token's first expert moved to an expert it did not use
    flipped = batch.clone()
    row, column = 0, batch["input_ids"].shape[1] - batch["responses"].shape[1] - 1
    used = flipped["routed_experts"][row, column, 0]
    unused = next(e for e in range(4) if e not in used.tolist())
    flipped["routed_experts"][row, column, 0, 0] = unused
    changed = actor.compute_log_probs(flipped)
    assert not torch.allclose(changed[row][valid[row]], replayed[row][valid[row]], atol=1e-5)
    others = torch.arange(len(batch)) != row
    if layout != "shared":
        assert torch.equal(changed[others], replayed[others])


def test_the_load_balancing_loss_is_transformers_and_reaches_the_routers(tiny_moe):
    """Without replay, the loss over a padded pass is transformers' own (its
    ``load_balancing_loss_func`` with the attention mask); with replay its gradient reaches the
    router's weight."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    config, dirs = tiny_moe
    actor = LMActor(SOLO, config, dirs.actor)
    _, batch = sampled(config, dirs, actor)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        out = actor.model(**inputs, output_router_logits=True)
    expected = load_balancing_loss_func(out.router_logits, 4, 2, batch["attention_mask"])
    routing = moe.Routing(actor.model, replay=False, keep_logits=True)
    with routing.call(batch["attention_mask"]):
        actor.model(**inputs)
    assert torch.allclose(routing.aux_loss(), expected, atol=1e-6)

    routing = moe.Routing(actor.model, replay=True, keep_logits=True)
    actor._log_probs_entropy(actor.model, batch, routing)
    aux = routing.aux_loss()
    assert aux is not None and aux.item() > 0
    aux.backward()
    router = moe.routers(actor.model)[0]
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_routing_replay_refuses_a_dense_model_and_what_records_none(tmp_path):
    with pytest.raises(ConfigError, match="the tiny model is dense"):
        tiny_config(tmp_path, tmp_path, "rollout.routing_replay=true")
    with pytest.raises(ConfigError, match=r"not built with actor\.model\.gradient_checkpointing"):
        tiny_config(tmp_path, tmp_path, *REPLAY, "actor.model.gradient_checkpointing=true")
    with pytest.raises(ConfigError, match="experts_per_token: 3, more than"):
        tiny_config(
            tmp_path,
            tmp_path,
            "actor.model.tiny.num_experts=2",
            "actor.model.tiny.experts_per_token=3",
        )


def test_the_routing_mismatch_counts_the_flips_the_replay_overrode(tiny_moe):
    """``rollout_corr/routing_mismatch``: the share of the recorded token-layer routings that
    are not the training pass's own choice: none for the recorded batch itself (but near ties),
    one more for each recorded routing moved on purpose to experts the router did not pick."""
    config, dirs = tiny_moe
    actor = LMActor(SOLO, config, dirs.actor)
    _, batch = sampled(config, dirs, actor)
    actor.compute_log_probs(batch)
    compared, base = actor.routings
    real = batch["attention_mask"].bool() & (batch["routed_experts"] >= 0).all(-1).all(-1)
    assert compared == int(real.sum())  # one MoE layer: one routing per recorded token
    moved = batch.clone()
    rows = torch.arange(3)
    column = batch["input_ids"].shape[1] - batch["responses"].shape[1] - 1  # a prompt token
    own = moved["routed_experts"][rows, column, 0].long()
    spare = [next(e for e in range(4) if e not in r.tolist()) for r in own]
    moved["routed_experts"][rows, column, 0, 0] = torch.tensor(spare, dtype=torch.int16)
    actor.routings = [0, 0]
    actor.compute_log_probs(moved)
    assert actor.routings == [compared, base + 3]


def test_updates_weigh_the_load_balancing_loss_and_log_it(tiny_moe):
    """The actor's update adds the routers' loss at the model config's weight (0.001) and logs
    it as actor/aux_loss (the routing mismatch of the old log-probs' pass beside it); the
    critic, an MoE value model too, as critic/aux_loss; a weight of 0 adds none."""
    from rlcore.workers.reasoning.lm_actor import LMCritic, aux_loss_coef

    config, dirs = tiny_moe
    actor = LMActor(SOLO, config, dirs.actor)
    assert aux_loss_coef(config, actor.model) == pytest.approx(0.001)
    _, batch = sampled(config, dirs, actor, rows=8)
    batch["loss_mask"] = batch["response_mask"].clone()
    batch["old_log_probs"] = actor.compute_log_probs(batch)
    gen = torch.Generator().manual_seed(0)
    batch["advantages"] = torch.randn(batch["responses"].shape, generator=gen)
    batch["returns"] = torch.randn(batch["responses"].shape, generator=gen)
    critic = LMCritic(SOLO, config, dirs.critic)
    batch["values"] = critic.compute_values(batch)
    metrics = actor.update(batch)
    assert metrics["actor/aux_loss"] > 0
    assert 0 <= metrics["rollout_corr/routing_mismatch"] < 0.05
    assert critic.update(batch)["critic/aux_loss"] > 0
    off = tiny_config(dirs.actor.parent, dirs.actor.parent, *REPLAY, "actor.router_aux_loss_coef=0")
    assert "actor/aux_loss" not in LMActor(SOLO, off, dirs.actor).update(batch)


def test_fsdp2_on_two_ranks_updates_an_moe_like_one_rank(tiny_moe, tmp_path):
    """FSDP2 on 2 gloo ranks (each MoE decoder layer, its experts and router, one unit), each
    holding half the batch with its recorded experts and replaying them, end where one process
    does on the whole batch: actor and critic. (Without the load-balancing loss: it is a
    statistic of each micro-batch's tokens, as transformers and verl compute it, so another
    split of the batch into micro-batches and ranks moves it.)"""
    from rlcore.config import replace_keys
    from rlcore.workers.reasoning.lm_actor import LMCritic
    from tests.rank_pool import rank_pool
    from tests.workers.test_lm_actor import TWO_EPOCHS, rank_main, update_params

    config, dirs = tiny_moe
    no_aux = "actor.router_aux_loss_coef=0"
    config = tiny_config(dirs.actor.parent, dirs.actor.parent, *REPLAY, *TWO_EPOCHS, no_aux)
    config = replace_keys(
        config, {"actor.training_backend": "fsdp2", "critic.training_backend": "fsdp2"}
    )
    actor = LMActor(SOLO, config, dirs.actor)
    _, batch = sampled(config, dirs, actor, rows=8)
    # responses of uneven lengths (as if ended early), so the ranks hold unequal tokens
    width = batch["responses"].shape[1]
    ends = torch.tensor([width, 3, 5, 2, 7, width, 1, 4])[:, None]
    batch["response_mask"] = (torch.arange(width) < ends).long()
    batch["attention_mask"][:, -width:] = batch["response_mask"]
    batch["position_ids"] = position_ids(batch["attention_mask"])
    assert batch["response_mask"][:4].sum() != batch["response_mask"][4:].sum()
    batch["loss_mask"] = batch["response_mask"].clone()
    batch["old_log_probs"] = actor.compute_log_probs(batch)
    gen = torch.Generator().manual_seed(0)
    batch["advantages"] = torch.randn(batch["responses"].shape, generator=gen)
    batch["returns"] = torch.randn(batch["responses"].shape, generator=gen)
    batch["values"] = LMCritic(SOLO, config, dirs.critic).compute_values(batch) + 0.3
    rank_pool(2).run(rank_main, str(tmp_path), config, dirs, batch)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    for component_cls in (LMActor, LMCritic):
        single, _ = update_params(component_cls, SOLO, config, dirs, batch)
        ranks = [r[component_cls.__name__] for r in results]
        assert all(0.4 < r["held"] < 0.6 for r in ranks)
        for name, value in single.items():
            assert torch.equal(ranks[0]["weights"][name], ranks[1]["weights"][name]), name
            assert torch.allclose(ranks[0]["weights"][name], value, atol=1e-6), name


def test_batches_joined_by_dynamic_sampling_keep_each_tokens_experts():
    """DAPO's rounds join generated batches of other prompt widths: the recorded experts are
    left-padded with -1 like the tokens, so each still sits beside its token."""
    from rlcore.data.sequences import concat_generated

    def batch(width, fill):
        return TensorDict(
            {
                "input_ids": torch.full((2, width), 5),
                "attention_mask": torch.ones(2, width, dtype=torch.long),
                "position_ids": torch.arange(width).expand(2, -1),
                "routed_experts": torch.full((2, width, 1, 2), fill, dtype=torch.int16),
            },
            batch_size=[2],
        )

    joined = concat_generated([batch(3, 1), batch(5, 2)], pad_id=0)
    assert joined["routed_experts"].shape == (4, 5, 1, 2)
    assert (joined["routed_experts"][:2, :2] == -1).all()
    assert (joined["routed_experts"][:2, 2:] == 1).all() and (
        joined["routed_experts"][2:] == 2
    ).all()
    assert torch.equal(joined["attention_mask"][:2, :2], torch.zeros(2, 2, dtype=torch.long))


def test_a_sequence_split_of_a_folders_moe_is_refused_at_the_start(tiny_moe):
    """Ulysses' split passes keep no router logits: an MoE model from a folder (which the
    config cannot see) is refused when the component starts, naming the key."""
    from rlcore.workers.reasoning.lm_actor import check_sequence_split

    config, dirs = tiny_moe
    actor = LMActor(SOLO, config, dirs.actor)
    with pytest.raises(ConfigError, match=r"actor\.ulysses_sequence_parallel_size: 2, not built"):
        check_sequence_split(actor.model, 2, "actor.ulysses_sequence_parallel_size")
    check_sequence_split(actor.model, 1, "actor.ulysses_sequence_parallel_size")  # no split
