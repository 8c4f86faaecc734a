"""The fused log-probs (``actor.model.use_fused_kernels``): computed from the hidden states and
the LM head a chunk of positions at a time, they give the values and gradients of the logits
computed whole (``log_softmax``, gather, entropy), keep no ``[N, V]`` tensor for the backward
pass, and give a transformers model's log-probs, entropies and parameter gradients of the plain
pass, padded, packed and with shared prompts; models they cannot serve are refused."""

import pytest
import torch
from tensordict import TensorDict

from rlcore.config.errors import ConfigError
from rlcore.data.sequences import left_pad, position_ids
from rlcore.models.forward import inner_model, response_log_probs
from rlcore.models.fused_head import TokenStats, check_fused_head, fused_log_probs

N, H, V = 10, 6, 13


def plain(hidden, weight, bias, tokens, temperature):
    """The reference: whole logits, ``log_softmax``, gather, entropy, sum of squares."""
    logits = (hidden @ weight.T + (0 if bias is None else bias)) / temperature
    logp_all = torch.log_softmax(logits, -1)
    p = logp_all.exp()
    return (
        logp_all.gather(-1, tokens[:, None]).squeeze(-1),
        -(p * logp_all).sum(-1),
        p.square().sum(-1),
    )


def inputs(dtype, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.randn(V, H, generator=gen, dtype=dtype).requires_grad_()
    b = torch.randn(V, generator=gen, dtype=dtype).requires_grad_() if bias else None
    return hidden, weight, b, torch.randint(0, V, (N,), generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [None, 1, 3, 4, N])  # 3 and 4 do not divide N
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy", [True, False])
def test_fused_values_and_gradients_are_the_whole_logits(dtype, chunk, temperature, entropy):
    hidden, weight, bias, tokens = inputs(dtype)
    gen = torch.Generator().manual_seed(1)
    a, c = torch.randn(N, generator=gen, dtype=dtype), torch.randn(N, generator=gen, dtype=dtype)
    want_logp, want_ent, _ = plain(hidden, weight, bias, tokens, temperature)
    want_loss = (a * want_logp).sum() + ((c * want_ent).sum() if entropy else 0)
    want = torch.autograd.grad(want_loss, (hidden, weight, bias))
    stats = TokenStats(temperature, chunk, entropy)
    logp, ent, sums = fused_log_probs(hidden, weight, bias, tokens, stats)
    assert sums is None and (ent is None) == (not entropy)
    loss = (a * logp).sum() + ((c * ent).sum() if entropy else 0)
    got = torch.autograd.grad(loss, (hidden, weight, bias))
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(logp, want_logp.detach(), **tol)
    if entropy:
        torch.testing.assert_close(ent, want_ent.detach(), **tol)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **tol)


def test_the_compiled_chunk_math_gives_the_whole_logits_values_and_gradients(monkeypatch):
    """``TokenStats.compiled`` (``actor.use_torch_compile``): each chunk's math goes through
    torch.compile; here with a backend that records the graphs dynamo hands it and runs them
    (the compiled call path; inductor's kernels are what benchmarks/gpu_check.py measures)."""
    import rlcore.models.compiling as compiling

    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    monkeypatch.setattr(compiling, "COMPILE_BACKEND", recording)
    torch._dynamo.reset()
    try:
        for temperature, chunk in ((1.0, 4), (0.7, 3)):
            hidden, weight, bias, tokens = inputs(torch.float32, seed=int(chunk))
            gen = torch.Generator().manual_seed(1)
            a, c = torch.randn(N, generator=gen), torch.randn(N, generator=gen)
            want_logp, want_ent, want_sums = plain(hidden, weight, bias, tokens, temperature)
            want = torch.autograd.grad((a * want_logp + c * want_ent).sum(), (hidden, weight, bias))
            stats = TokenStats(temperature, chunk, True, compiled=True)
            logp, ent, _ = fused_log_probs(hidden, weight, bias, tokens, stats)
            got = torch.autograd.grad((a * logp + c * ent).sum(), (hidden, weight, bias))
            tol = {"rtol": 1e-6, "atol": 1e-6}
            torch.testing.assert_close(logp, want_logp.detach(), **tol)
            torch.testing.assert_close(ent, want_ent.detach(), **tol)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, **tol)
            with torch.no_grad():
                squares = TokenStats(temperature, chunk, True, True, compiled=True)
                sums = fused_log_probs(hidden, weight, bias, tokens, squares)[2]
            torch.testing.assert_close(sums, want_sums.detach(), **tol)
        # the forward's and the backward's chunk math were compiled (and what ran is above)
        assert len(graphs) >= 2
    finally:
        torch._dynamo.reset()


def test_fused_gradients_pass_a_float64_gradient_check():
    hidden, weight, bias, tokens = inputs(torch.float64, seed=2)
    for stats in (TokenStats(0.6, 3), TokenStats(1.0, None, entropy=False)):
        assert torch.autograd.gradcheck(
            lambda h, w, b, s=stats: tuple(
                t for t in fused_log_probs(h, w, b, tokens, s) if t is not None
            ),
            (hidden, weight, bias),
        )


def test_sum_pi_squared_is_the_softmaxs_and_forward_only():
    hidden, weight, _, tokens = inputs(torch.float32, bias=False)
    stats = TokenStats(0.8, 4, entropy=False, sum_pi_squared=True)
    with torch.no_grad():
        logp, ent, sums = fused_log_probs(hidden, weight, None, tokens, stats)
    want_logp, _, want_sums = plain(hidden, weight, None, tokens, 0.8)
    assert ent is None
    torch.testing.assert_close(logp, want_logp, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sums, want_sums, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="forward only"):
        fused_log_probs(hidden, weight, None, tokens, stats)


def largest_saved(fn) -> int:
    """Elements of the largest tensor autograd saves for the backward pass of ``fn()``."""
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return max(sizes)


def test_the_fused_pass_keeps_no_tensor_of_the_vocabulary_per_position():
    """The plain pass keeps the ``[N, V]`` logits (and their float32 copies), the fused one
    the hidden states and the weight alone (benchmarks/logits_memory.py --fused measures)."""
    n, h, v = 64, 8, 512
    hidden = torch.randn(n, h, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(v, h, dtype=torch.bfloat16, requires_grad=True)
    tokens = torch.randint(0, v, (n,))
    stats = TokenStats(0.9, 16)

    def whole():
        logits = (hidden @ weight.T).float() / 0.9
        return torch.log_softmax(logits, -1).gather(-1, tokens[:, None])

    assert largest_saved(whole) == n * v
    assert largest_saved(lambda: fused_log_probs(hidden, weight, None, tokens, stats)) == v * h


# --- a transformers model's passes ---------------------------------------------------------


def tiny_model(kind: str, **extra):
    import transformers

    shape = dict(
        vocab_size=97,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        **extra,
    )
    torch.manual_seed(0)
    if kind == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**shape))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape))
    return model.float().eval()


def response_batch(groups: int = 3, group: int = 2, width: int = 6) -> TensorDict:
    """Rows of left-padded prompts (``group`` rows each) and right-padded responses of uneven
    lengths, as the rollout lays them out."""
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 97, (2 + 2 * i,), generator=gen).tolist() for i in range(groups)]
    ids, mask = left_pad([p for p in prompts for _ in range(group)], 0)
    rows = len(ids)
    responses = torch.randint(1, 97, (rows, width), generator=gen)
    ends = torch.tensor([width, 2, 4, 1, 5, 3][:rows])[:, None]
    response_mask = (torch.arange(width) < ends).long()
    responses = responses * response_mask
    attention = torch.cat([mask, response_mask], 1)
    return TensorDict(
        {
            "input_ids": torch.cat([ids, responses], 1),
            "attention_mask": attention,
            "position_ids": position_ids(attention),
            "responses": responses,
            "response_mask": response_mask,
        },
        batch_size=[rows],
    )


def pass_of(model, batch, fused, layout):
    stats = TokenStats(0.7, 5)
    logp, ent, _ = response_log_probs(
        model,
        batch,
        stats,
        packed=layout == "packed",
        share_prompts=layout == "shared",
        fused=fused,
    )
    gen = torch.Generator().manual_seed(4)
    mask = batch["response_mask"]
    a, c = torch.randn(logp.shape, generator=gen), torch.randn(logp.shape, generator=gen)
    loss = (a * logp * mask).sum() + 0.1 * (c * ent * mask).sum()
    model.zero_grad()
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    with torch.no_grad():
        _, _, sums = response_log_probs(
            model, batch, TokenStats(0.7, 5, False, True), layout == "packed", fused=fused
        )
    return logp.detach(), ent.detach(), sums, grads


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("layout", ["padded", "packed", "shared"])
def test_a_models_fused_pass_gives_the_plain_log_probs_entropies_and_gradients(kind, layout):
    model, batch = tiny_model(kind), response_batch()
    check_fused_head(model)
    want = pass_of(model, batch, False, layout)
    got = pass_of(model, batch, True, layout)
    assert "forward" not in vars(model.lm_head)  # the class's forward again
    assert got[3].keys() == want[3].keys() and "lm_head.weight" in want[3]
    for g, w in zip(got[:3], want[:3], strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    for name, w in want[3].items():
        torch.testing.assert_close(got[3][name], w, rtol=1e-5, atol=1e-6, msg=name)


def test_a_lora_adapter_on_the_lm_head_is_refused():
    import peft

    model = tiny_model("qwen2")
    adapted = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    with pytest.raises(ConfigError, match=r"use_fused_kernels: .* not a plain torch\.nn\.Linear"):
        check_fused_head(inner_model(adapted))
    # adapters elsewhere leave the head plain: the fused pass reads it through peft
    check_fused_head(inner_model(peft.get_peft_model(tiny_model("qwen2"), peft.LoraConfig(r=2))))


def test_a_model_that_changes_its_logits_after_the_head_is_refused():
    import transformers

    config = transformers.Gemma2Config(
        vocab_size=97,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    with pytest.raises(ConfigError, match=r"final_logit_softcapping.*set it false"):
        check_fused_head(transformers.Gemma2ForCausalLM(config))
