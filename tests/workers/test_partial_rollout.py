"""Partial rollouts (``rollout.partial_rollout``): a batch generated in segments takes a weight
update between two of them and goes on from where it stopped with the new weights, each token
recording the version that sampled it and its log-prob under those weights."""

import copy

import torch

from rlcore.data.sequences import left_pad, position_ids, response_mask
from rlcore.models.lm import load_causal_lm
from rlcore.workers.reasoning.rollout import RolloutWorker
from tests.lm_fixtures import SOLO, tiny_config
from tests.workers.test_lm_actor import prompts_td


def direct_log_probs(model, ids, mask, start, temperature):
    """Each token's log-prob after ``start`` from a plain forward of ``model`` (no cache)."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask))
        logits = logits.logits.float() / temperature
    logp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
    return logp[:, start - 1 :]


def test_a_weight_update_between_segments_is_taken_mid_generation(tiny_lm):
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent, dirs.actor.parent, "data.max_response_length=8", "rollout.top_k=0"
    )
    worker = RolloutWorker(SOLO, config, dirs.actor)
    worker.set_weight_version(3)
    old = copy.deepcopy(worker.engine.model).eval()
    tokenizer = worker.engine.tokenizer
    texts = [tokenizer(f"What is {i} + {7 * i}?")["input_ids"] for i in range(5)]
    ids, mask = left_pad([t[: 4 + i] for i, t in enumerate(texts)], tokenizer.pad_token_id)
    prompts = prompts_td(ids, mask)

    torch.manual_seed(0)
    worker.begin_partial(prompts, 3, key=11)
    done = worker.advance_partial(11, 3)
    assert done.tolist() == [False] or all(len(t) < 3 for t in worker.partial[11].tokens)
    with torch.no_grad():  # the actor's next weights arrive (a sync), then the version
        for tensor in worker.weights().values():
            if tensor.is_floating_point():
                tensor.add_(0.05 * torch.randn_like(tensor))
    worker.set_weight_version(4)
    while not bool(worker.advance_partial(11, 3).all()):
        pass
    out = worker.finish_partial(11)
    assert 11 not in worker.partial

    responses, resp_mask = out["responses"], out["response_mask"]
    assert torch.equal(resp_mask, response_mask(responses, worker.engine.eos_ids))
    assert torch.equal(out["input_ids"], torch.cat([ids, responses], dim=1))
    assert torch.equal(out["attention_mask"], torch.cat([mask, resp_mask], dim=1))
    lengths = resp_mask.sum(-1)
    assert int(lengths.max()) > 3  # some row went on after the update
    versions = out["rollout_versions"]
    for row, n in enumerate(lengths.tolist()):
        expected = [3] * min(3, n) + [4] * max(0, n - 3) + [-1] * (8 - n)
        assert versions[row].tolist() == expected

    # each token's log-prob is the one the weights that sampled it give, by a plain forward
    new = load_causal_lm(dirs.actor, "float32").eval()
    new.load_state_dict(worker.engine.model.state_dict())
    seq, attention = out["input_ids"], out["attention_mask"]
    temperature = config.rollout.temperature
    before = direct_log_probs(old, seq, attention, ids.shape[1], temperature)
    after = direct_log_probs(new, seq, attention, ids.shape[1], temperature)
    expected = torch.where(versions == 3, before, after) * resp_mask
    assert torch.allclose(out["rollout_log_probs"], expected, atol=1e-5)
    assert not torch.allclose(before * resp_mask, after * resp_mask, atol=1e-3)
