"""Megatron-core models from Hugging Face weights (megatron-core 0.16.1 on the CPU, through the
test-only shim in tests/megatron_shim.py): the converted model computes the Hugging Face model's
logits and values, and the conversion round-trips. Tensor-parallel size 2 against size 1 is
tested in tests/workers/test_megatron_backend.py, in the one spawn of its 2-rank checks."""

import pytest
import torch
import torch.distributed as dist

from rlcore.models import megatron as mg
from tests.megatron_shim import megatron_on_cpu
from tests.rank_pool import free_port

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

    shape = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    if kind == "llama":
        config = LlamaConfig(
            **shape,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
        )
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

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
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


@pytest.mark.parametrize("tp_size", [1, 2])
def test_pipeline_stages_hold_their_layers_and_join_back(tp_size):
    """2 pipeline stages of the 2-layer models: the first holds the embedding and layer 0 (as its
    layer 0), the last layer 1 (also as its layer 0), the final norm and the output layer (a tied
    model's last stage a copy of the embedding); the stages' tensors, converted back and joined,
    are the Hugging Face state dict exactly."""
    for kind in KINDS:
        config, hf = hf_model(kind)
        original = hf.state_dict()
        value = kind == "value"
        stages = [
            [mg.to_megatron(original, config, r, tp_size, value, stage, 2) for r in range(tp_size)]
            for stage in (0, 1)
        ]
        first, last = stages[0][0], stages[1][0]
        layer = "decoder.layers.0.self_attention.linear_proj.weight"
        assert "embedding.word_embeddings.weight" in first and layer in first, kind
        assert not any(k.startswith("decoder.layers.1.") for s in (first, last) for k in s), kind
        assert "decoder.final_layernorm.weight" not in first and "output_layer.weight" not in first
        assert "embedding.word_embeddings.weight" not in last, kind
        assert "decoder.final_layernorm.weight" in last and "output_layer.weight" in last, kind
        want = original["model.layers.1.self_attn.o_proj.weight"].chunk(tp_size, 1)[0]
        assert torch.equal(last[layer], want), kind  # the last stage's layer 0 is layer 1
        if kind == "tied":
            embedding = first["embedding.word_embeddings.weight"]
            assert torch.equal(last["output_layer.weight"], embedding)
        parts = [mg.to_hf(shards, config, value, stage, 2) for stage, shards in enumerate(stages)]
        assert not parts[0].keys() & parts[1].keys(), kind
        back = mg.merge_stages(parts, config, value)
        assert back.keys() == original.keys(), kind
        assert all(torch.equal(back[k], v) for k, v in original.items()), kind


def test_the_pipeline_size_must_divide_the_layers():
    from rlcore.config import ConfigError

    config, _ = hf_model("tied")  # 2 layers
    mg.check_pipeline_parallel(config, 2, "actor.megatron.pipeline_parallel_size")
    with pytest.raises(
        ConfigError,
        match=r"^actor.megatron.pipeline_parallel_size: 3 does not "
        r"divide the model's 2 layers",
    ):
        mg.check_pipeline_parallel(config, 3, "actor.megatron.pipeline_parallel_size")
