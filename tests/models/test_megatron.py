"""Megatron-core models from Hugging Face weights (megatron-core 0.16.1 on the CPU, through the
test-only shim in tests/megatron_shim.py): the converted model computes the Hugging Face model's
logits and values, and the conversion round-trips. Tensor-parallel size 2 against size 1 is
tested in tests/workers/test_megatron_backend.py, in the one spawn of its 2-rank checks."""

import pytest
import torch
import torch.distributed as dist

from rlcore.models import megatron as mg
from tests.megatron_shim import megatron_on_cpu
from tests.workers.test_lm_actor import free_port

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # no Apex / Transformer Engine

VOCAB = 67  # odd: 2 ranks pad it to 68


def hf_model(kind: str):
    """A small random Hugging Face model: Qwen2 tied / untied, Llama, or a Qwen2 value model."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen2ForTokenClassification,
    )

    shape = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=64)  # fmt: skip
    torch.manual_seed(0)
    if kind == "llama":
        config = LlamaConfig(**shape, tie_word_embeddings=False, rope_parameters={
            "rope_type": "default", "rope_theta": 5000.0})  # fmt: skip
        return config, LlamaForCausalLM(config).eval()
    config = Qwen2Config(**shape, tie_word_embeddings=kind == "tied", num_labels=1)
    if kind == "value":
        model = Qwen2ForTokenClassification(config).eval()
        torch.nn.init.normal_(model.score.weight)  # a head that reads the trunk
        torch.nn.init.normal_(model.score.bias)
        return config, model
    return config, Qwen2ForCausalLM(config).eval()


def megatron_model(kind, config, hf, tp_rank=0, tp_size=1):
    value = kind == "value"
    model = mg.build_gpt(config, tp_size, torch.float32, value_head=value)
    state = mg.to_megatron(hf.state_dict(), config, tp_rank, tp_size, value_head=value)
    model.load_state_dict(state, strict=True)
    return model


def outputs(kind, config, model, ids):
    out = model(ids, None, attention_mask=None)
    return out if kind == "value" else mg.full_logits(out, config.vocab_size)


def init_group(rank, world, port):
    from megatron.core import parallel_state

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)


def close_group():
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


KINDS = ["tied", "untied", "llama", "value"]


def test_converted_models_compute_the_hugging_face_outputs_and_convert_back():
    """Each kind on one rank: the logits (values) equal transformers' to float tolerance, and the
    Megatron weights convert back to the very tensors they came from."""
    init_group(0, 1, free_port())
    try:
        ids = torch.randint(0, VOCAB, (3, 9), generator=torch.Generator().manual_seed(1))
        for kind in KINDS:
            config, hf = hf_model(kind)
            model = megatron_model(kind, config, hf)
            with megatron_on_cpu(), torch.no_grad():
                got = outputs(kind, config, model, ids)
                want = hf(input_ids=ids).logits
            assert got.shape == want.shape, kind
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (kind, (got - want).abs().max())
            back = mg.to_hf([model.state_dict()], config, value_head=kind == "value")
            original = hf.state_dict()
            assert back.keys() == original.keys(), kind
            assert all(torch.equal(back[k], v) for k, v in original.items()), kind
    finally:
        close_group()


def loss_of(kind, out, ids):
    """A loss that reads every output: weighted log-probs of the next tokens, or values."""
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(2))
    if kind == "value":
        return (out[..., 0] * weights).sum() + out.square().mean()
    log_probs = torch.log_softmax(out[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    return -(log_probs * weights[:, 1:]).sum()


def adamw(parameters):
    """AdamW with an eps well above float noise: the key biases' gradient is 0 in exact
    arithmetic (a constant added to every score of a query), ~1e-9 in float32, and Adam's
    g / (|g| + eps) would turn that noise into steps of lr x O(1) of either sign."""
    return torch.optim.AdamW(parameters, lr=1e-2, weight_decay=0.1, eps=1e-4)


def step(kind, config, model, ids):
    """Outputs, gradients and weights after one AdamW step (elementwise: the same on shards)."""
    optimizer = adamw(model.parameters())
    out = outputs(kind, config, model, ids)
    loss_of(kind, out, ids).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    optimizer.step()
    return out.detach(), grads, {n: p.detach().clone() for n, p in model.named_parameters()}


def conversion_step(kind, ids, tp_rank, tp_size):
    """This rank's outputs, gradients and weights after one AdamW step of a converted model
    (Megatron's model-parallel state set up with ``tp_size``; in tests/workers/
    test_megatron_backend.py, which runs every 2-rank check in one spawn)."""
    config, hf = hf_model(kind)
    return step(kind, config, megatron_model(kind, config, hf, tp_rank, tp_size), ids)


def check_against_one_process(kind, ids, ranks):
    """``ranks``' ``conversion_step`` results, converted back, against the Hugging Face model's
    own outputs, gradients and AdamW step."""
    config, hf = hf_model(kind)
    optimizer = adamw(hf.parameters())
    want_out = hf(input_ids=ids).logits
    loss_of(kind, want_out, ids).backward()
    want_grads = {n: p.grad.clone() for n, p in hf.named_parameters()}
    optimizer.step()
    want_after = dict(hf.named_parameters())
    outs, grads, after = zip(*ranks, strict=True)
    assert torch.equal(outs[0], outs[1]), kind  # every rank gathers the whole output
    assert torch.allclose(outs[0], want_out, atol=1e-5), kind
    value = kind == "value"
    grads = mg.to_hf(list(grads), config, value_head=value)
    after = mg.to_hf(list(after), config, value_head=value)
    assert grads["model.embed_tokens.weight"].shape[0] == VOCAB  # the padded row cut off
    for name, grad in want_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-5, rtol=1e-4), (kind, name)
        # a step is lr = 1e-2; the float noise in the gradients moves it by 1e-6 here
        assert torch.allclose(after[name], want_after[name], atol=1e-5), (kind, name)
    before = dict(hf_model(kind)[1].named_parameters())
    assert any(not torch.equal(p, before[n]) for n, p in want_after.items())  # it stepped
