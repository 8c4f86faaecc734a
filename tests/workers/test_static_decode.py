"""The hf engine's static-cache decode loop (rollout.hf.static_cache) against transformers'
generate and a teacher-forced forward pass, its sampling warpers against transformers', and its
buckets (reused, dropped, valid across an in-place weight copy)."""

import pytest
import torch
from tensordict import TensorDict

from rlcore.data.sequences import left_pad, position_ids
from rlcore.workers.reasoning.static_decode import Sampling, StaticDecoder, warp

CPU = torch.device("cpu")
PAD, EOS = 0, 13


@pytest.fixture(scope="module")
def model():
    """A random two-layer Qwen2 (grouped key/value heads): varied greedy tokens, some EOS."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=PAD,
        eos_token_id=EOS,
    )
    return Qwen2ForCausalLM(config).eval()


def prompts(n=7):
    gen = torch.Generator().manual_seed(1)
    rows = [torch.randint(6, 48, (2 + i % 5,), generator=gen).tolist() for i in range(n)]
    return left_pad(rows, PAD)


def decoder(model, **options):
    settings = {"batch_bucket": 4, "length_bucket": 7, "max_buckets": 2, "cuda_graph": True}
    return StaticDecoder(model, [EOS], PAD, CPU, **{**settings, **options})


def generated(model, ids, mask, new):
    """transformers' greedy generate, padded to ``new`` columns."""
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        do_sample=False,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )[:, ids.shape[1] :]
    return torch.nn.functional.pad(out, (0, new - out.shape[1]), value=PAD)


def test_greedy_tokens_equal_transformers_generate(model):
    """Left-padded prompts of uneven lengths, rows added up to the batch bucket: the same
    tokens as generate, rows that reached EOS padded after it."""
    ids, mask = prompts()
    expected = generated(model, ids, mask, 20)
    got, _ = decoder(model).generate(ids, mask, 20, Sampling(greedy=True), log_probs=False)
    got = torch.nn.functional.pad(got, (0, 20 - got.shape[1]), value=PAD)
    assert torch.equal(got, expected)
    ended = (expected == EOS).any(-1)
    assert ended.any() and not ended.all(), "rows must end at different steps to mean something"


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), [(1.0, 1.0, 0), (0.7, 0.9, 10)])
def test_sampled_log_probs_equal_a_forward_pass(model, temperature, top_p, top_k):
    """Each sampled token's recorded log-prob is log softmax(logits / T) at it, over the whole
    vocabulary, as a forward pass over the prompt and response computes it; 0 after EOS; and
    every sampled token lies inside the top-k set of its step."""
    ids, mask = prompts()
    torch.manual_seed(3)
    sampling = Sampling(False, temperature, top_p, top_k)
    tokens, logp = decoder(model).generate(ids, mask, 12, sampling, log_probs=True)
    width = tokens.shape[1]
    from rlcore.data.sequences import response_mask

    kept = response_mask(tokens, [EOS])
    full_ids = torch.cat([ids, tokens], 1)
    full_mask = torch.cat([mask, kept], 1)
    with torch.no_grad():
        logits = model(
            input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)
        ).logits[:, -width - 1 : -1]
    expected = torch.log_softmax(logits.float() / temperature, -1)
    expected = expected.gather(-1, tokens[..., None])[..., 0]
    valid = kept.bool()
    assert torch.allclose(logp[valid], expected[valid], atol=1e-5)
    assert torch.equal(logp[~valid], torch.zeros_like(logp[~valid]))
    if top_k:
        rank = (logits > logits.gather(-1, tokens[..., None])).sum(-1)
        assert (rank[valid] < top_k).all()


@pytest.mark.parametrize(("temperature", "top_p", "top_k"), [(0.7, 0.8, 0), (1.3, 0.5, 7)])
def test_the_warpers_are_transformers_own(temperature, top_p, top_k):
    """Temperature, top-k, top-p applied as transformers' warpers apply them, in its order."""
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(0))
    expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    expected = TopPLogitsWarper(top_p)(None, expected)
    got = warp(logits, Sampling(False, temperature, top_p, top_k))
    assert torch.equal(got.isinf(), expected.isinf())
    finite = ~got.isinf()
    assert torch.allclose(got[finite], expected[finite])


def test_buckets_are_reused_and_the_least_recent_dropped(model):
    """Rows rounded up to the batch bucket and length to the length bucket: 5 and 7 rows of
    the same width share one bucket (the same cache tensors); a third shape drops the least
    recently used of two."""
    shape = decoder(model).bucket(5, 6, 10)
    assert (shape.rows, shape.length) == (8, 21)
    dec = decoder(model, max_buckets=2)
    ids, mask = prompts(7)
    dec.generate(ids[:5], mask[:5], 4, Sampling(greedy=True), log_probs=False)
    first = dec.buckets[(8, 14)]
    keys = first.cache.layers[0].keys.data_ptr()
    dec.generate(ids, mask, 4, Sampling(greedy=True), log_probs=False)
    assert list(dec.buckets) == [(8, 14)] and dec.buckets[(8, 14)] is first
    assert first.cache.layers[0].keys.data_ptr() == keys
    dec.generate(ids[:2], mask[:2], 4, Sampling(greedy=True), log_probs=False)  # (4, 14)
    dec.generate(ids, mask, 9, Sampling(greedy=True), log_probs=False)  # (8, 21)
    assert list(dec.buckets) == [(4, 14), (8, 21)]


def test_an_in_place_weight_copy_reaches_a_kept_bucket(model):
    """A sync copies weights into the model's tensors in place: the bucket (its cache and, on
    CUDA, its graph, which reads those tensors) is kept, and the tokens are the new weights'."""
    import copy

    ids, mask = prompts()
    local = copy.deepcopy(model)
    dec = decoder(local)
    before, _ = dec.generate(ids, mask, 10, Sampling(greedy=True), log_probs=False)
    bucket = dec.buckets[(8, 21)]
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.5)
        for name, tensor in local.state_dict().items():  # as weight_buckets.py fills them
            tensor.copy_(other.state_dict()[name])
    after, _ = dec.generate(ids, mask, 10, Sampling(greedy=True), log_probs=False)
    assert dec.buckets[(8, 21)] is bucket
    expected = generated(other, ids, mask, 10)[:, : after.shape[1]]
    assert torch.equal(after, expected)
    assert not torch.equal(before, after)


def test_the_engine_generates_the_same_batch_through_either_path(tiny_lm):
    """HFEngine with rollout.hf.static_cache: the same generated batch (every column) as with
    transformers' generate, greedy, on the shared tiny model."""
    from rlcore.config import replace_keys
    from rlcore.workers.reasoning.rollout import HFEngine

    config, dirs = tiny_lm
    eager = HFEngine(config, dirs.actor, CPU)
    static = HFEngine(
        replace_keys(config, {"rollout.hf.static_cache": True, "rollout.hf.batch_bucket": 4}),
        dirs.actor,
        CPU,
        model=eager.model,
    )
    rows = [eager.tokenizer(f"What is {i} + {3 * i}?")["input_ids"][: 3 + i % 5] for i in range(6)]
    ids, mask = left_pad(rows, eager.tokenizer.pad_token_id)
    batch = TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[len(ids)])
    a = eager.generate(batch, greedy=True, log_probs=True)
    assert static.collocated  # it generates with another engine's module, as with the actor's
    static.release_memory()  # (nothing held yet)
    static.generate(batch, greedy=True)
    assert static.decoder.buckets
    static.release_memory()  # while the actor trains: caches and graphs given back
    assert not static.decoder.buckets
    b = static.generate(batch, greedy=True, log_probs=True)  # made again
    assert set(a.keys()) == set(b.keys())
    for key in a.keys():  # noqa: SIM118 (a TensorDict iterates over its rows)
        if key == "rollout_log_probs":
            assert torch.allclose(a[key], b[key], atol=1e-5)
        else:
            assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["rollout.hf.batch_bucket=8"], "rollout.hf.static_cache is false"),
        (["rollout.hf.static_cache=true", "rollout.tools=[calculator]"], "multi-turn"),
        (
            [
                "rollout.hf.static_cache=true",
                "algorithm.group_size=4",
                "actor.model.share_group_prompts=true",
            ],
            "actor.model.share_group_prompts=false",
        ),
    ],
)
def test_what_the_static_loop_does_not_do_is_refused(overrides, words):
    from rlcore.config import load_config
    from rlcore.config.errors import ConfigError

    with pytest.raises(ConfigError, match=words):
        load_config("reasoning/tiny_arith_ppo", overrides)


def test_lora_adapters_act_in_the_static_loop(tiny_lm):
    """Under peft's wrapper the loop runs the adapters too: with nonzero adapters, the same
    greedy tokens as generate through the same wrapped model, and not the base model's."""
    from rlcore.config import replace_keys
    from rlcore.workers.reasoning.rollout import HFEngine

    config, dirs = tiny_lm
    config = replace_keys(config, {"actor.model.lora.rank": 4, "actor.model.lora.alpha": 8})
    eager = HFEngine(config, dirs.actor, CPU)
    with torch.no_grad():
        for name, p in eager.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    static_config = replace_keys(config, {"rollout.hf.static_cache": True})
    static = HFEngine(static_config, dirs.actor, CPU, model=eager.model)
    rows = [eager.tokenizer(f"{i} plus {5 * i}")["input_ids"] for i in range(4)]
    ids, mask = left_pad(rows, eager.tokenizer.pad_token_id)
    batch = TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[len(ids)])
    a = eager.generate(batch, greedy=True)["responses"]
    b = static.generate(batch, greedy=True)["responses"]
    assert torch.equal(a, b)
    with eager.model.disable_adapter():
        base = eager.generate(batch, greedy=True)["responses"]
    assert not torch.equal(base, b)


def test_the_decode_step_traces_whole_with_no_host_sync(model):
    """What a CUDA graph needs of the decode step: torch.compile traces it as one graph
    (fullgraph: no break, so no host read of a device value and no branch on one), and the
    traced step computes what the step computes."""
    import copy

    dec = decoder(copy.deepcopy(model))
    ids, mask = prompts(4)
    dec.generate(ids, mask, 3, Sampling(greedy=True), log_probs=False)
    bucket = next(iter(dec.buckets.values()))
    lengths = bucket.lengths()
    with torch.no_grad():
        dec._forward(bucket)
    expected, written = bucket.logits.clone(), bucket.lengths()
    bucket.set_lengths(lengths)
    torch._dynamo.reset()
    traced = torch.compile(dec._forward, backend="eager", fullgraph=True)
    with torch.no_grad():
        traced(bucket)
    assert torch.allclose(bucket.logits, expected, atol=1e-6)
    assert [int(n) for n in bucket.lengths()] == [int(n) for n in written]
    torch._dynamo.reset()


def test_grouped_query_decode_equals_attention_over_repeated_keys():
    """One query token per row, 6 query heads over 2 key/value heads, a padding mask: the
    packed attention equals softmax(q k^T / sqrt(d) + mask) v with each key/value head repeated
    for its 3 query heads (computed here by hand), and a longer query goes to the original."""
    from types import SimpleNamespace

    from rlcore.workers.reasoning.static_decode import grouped_query_decode

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, h, n, 8, generator=gen) for h, n in ((6, 1), (2, 10), (2, 10)))
    mask = torch.rand(3, 1, 1, 10, generator=gen) > 0.3
    mask[:, ..., -1] = True
    module = SimpleNamespace(num_key_value_groups=3)
    got, _ = grouped_query_decode(None)(module, q, k, v, mask, scaling=8**-0.5)
    keys, values = k.repeat_interleave(3, 1), v.repeat_interleave(3, 1)
    scores = (q @ keys.transpose(-1, -2)) * 8**-0.5
    expected = (scores.masked_fill(~mask, float("-inf")).softmax(-1) @ values).transpose(1, 2)
    assert got.shape == (3, 1, 6, 8)
    assert torch.allclose(got, expected, atol=1e-6)
    calls = []
    longer = grouped_query_decode(lambda *a, **kw: calls.append(a) or ("original", None))
    assert longer(module, torch.randn(3, 6, 2, 8), k, v, None)[0] == "original" and calls


def test_a_compiled_step_generates_what_the_plain_step_does(model):
    """rollout.hf.compile's path (here with dynamo's eager backend, which traces the step whole
    without inductor's minutes of C++ on this CPU): the same greedy tokens."""
    import copy

    ids, mask = prompts()
    plain, _ = decoder(model).generate(ids, mask, 9, Sampling(greedy=True), log_probs=False)
    torch._dynamo.reset()
    compiled = decoder(copy.deepcopy(model), compile_backend="eager")
    got, _ = compiled.generate(ids, mask, 9, Sampling(greedy=True), log_probs=False)
    torch._dynamo.reset()
    assert torch.equal(got, plain)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
def test_on_a_gpu_the_captured_graphs_generate_what_generate_does(model):
    """On CUDA (float32), the decode step captured once and replayed: the same greedy tokens as
    transformers' generate, one graph for the bucket, and after an in-place weight change the
    same graph replays the new weights."""
    import copy

    cuda = torch.device("cuda")
    local = copy.deepcopy(model).to(cuda)
    dec = StaticDecoder(
        local, [EOS], PAD, cuda, batch_bucket=4, length_bucket=7, max_buckets=2, cuda_graph=True
    )
    ids, mask = prompts()
    got, _ = dec.generate(ids, mask, 20, Sampling(greedy=True), log_probs=False)
    expected = generated(local, ids.to(cuda), mask.to(cuda), 20)[:, : got.shape[1]]
    assert torch.equal(got, expected) and dec.captures == 1
    # sampled tokens' recorded log-probs against a forward pass over prompt and response
    from rlcore.data.sequences import response_mask

    tokens, logp = dec.generate(ids, mask, 12, Sampling(False, 0.7), log_probs=True)
    kept = response_mask(tokens, [EOS])
    full_mask = torch.cat([mask.to(cuda), kept], 1)
    with torch.no_grad():
        logits = local(
            input_ids=torch.cat([ids.to(cuda), tokens], 1),
            attention_mask=full_mask,
            position_ids=position_ids(full_mask),
        ).logits[:, -tokens.shape[1] - 1 : -1]
    forward = torch.log_softmax(logits / 0.7, -1).gather(-1, tokens[..., None])[..., 0]
    assert torch.allclose(logp[kept.bool()], forward[kept.bool()], atol=1e-4)
    captured = dec.captures  # (the sampled call's shorter length: a bucket of its own)
    with torch.no_grad():
        for p in local.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    got, _ = dec.generate(ids, mask, 20, Sampling(greedy=True), log_probs=False)
    expected = generated(local, ids.to(cuda), mask.to(cuda), 20)[:, : got.shape[1]]
    assert torch.equal(got, expected) and dec.captures == captured
