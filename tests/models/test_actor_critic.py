"""ActorCritic: log-probs and entropies match hand-computed distributions; actions fit the env."""

import math

import numpy as np
import pytest
import torch

from rlcore.config import ConfigError
from rlcore.envs.vector import SpaceSpec
from rlcore.models import ActorCritic
from rlcore.workers.embodied.env_worker import env_action

DISCRETE = SpaceSpec((3,), "discrete", (4,))
MULTI = SpaceSpec((3,), "multi_discrete", (2, 3))
BOX = SpaceSpec((3,), "box", (2,), np.array([-1.0, -2.0]), np.array([1.0, 2.0]))


def logits_of(model, obs):
    return model.policy_head(model.features(obs)[0])


def test_discrete_log_prob_and_entropy_are_the_softmax_ones():
    torch.manual_seed(0)
    model = ActorCritic(DISCRETE, [8], ortho_init=False)
    obs = torch.randn(5, 3)
    actions = torch.tensor([0, 1, 2, 3, 1])
    log_prob, entropy, value = model.evaluate(obs, actions)
    logp_all = torch.log_softmax(logits_of(model, obs), -1)
    assert torch.allclose(log_prob, logp_all[torch.arange(5), actions])
    assert torch.allclose(entropy, -(logp_all.exp() * logp_all).sum(-1))
    assert value.shape == (5,)


def test_multi_discrete_sums_the_per_dimension_log_probs():
    torch.manual_seed(1)
    model = ActorCritic(MULTI, [8], ortho_init=False)
    obs = torch.randn(4, 3)
    actions = torch.tensor([[0, 2], [1, 0], [1, 1], [0, 0]])
    log_prob, _, _ = model.evaluate(obs, actions)
    logits = logits_of(model, obs)
    first, second = torch.log_softmax(logits[:, :2], -1), torch.log_softmax(logits[:, 2:], -1)
    expected = first[torch.arange(4), actions[:, 0]] + second[torch.arange(4), actions[:, 1]]
    assert torch.allclose(log_prob, expected)


def test_gaussian_log_prob_matches_the_closed_form():
    torch.manual_seed(2)
    model = ActorCritic(BOX, [8], ortho_init=False, log_std_init=math.log(0.5))
    obs = torch.randn(3, 3)
    actions = torch.randn(3, 2)
    log_prob, entropy, _ = model.evaluate(obs, actions)
    mean, std = logits_of(model, obs), 0.5
    expected = (
        -((actions - mean) ** 2) / (2 * std**2) - math.log(std) - 0.5 * math.log(2 * math.pi)
    ).sum(-1)
    assert torch.allclose(log_prob, expected, atol=1e-6)
    assert torch.allclose(
        entropy, torch.full((3,), 2 * (0.5 + 0.5 * math.log(2 * math.pi) + math.log(std)))
    )


def test_gaussian_actions_are_clipped_only_on_the_way_to_the_env():
    raw = torch.tensor([[5.0, -5.0], [0.5, 0.5]])
    assert env_action(BOX, raw).tolist() == [[1.0, -2.0], [0.5, 0.5]]


def test_deterministic_actions_are_the_mode():
    torch.manual_seed(3)
    model = ActorCritic(DISCRETE, [8], ortho_init=False)
    obs = torch.randn(6, 3)
    action, _, _ = model.act(obs, deterministic=True)
    assert torch.equal(action, logits_of(model, obs).argmax(-1))
    box = ActorCritic(BOX, [8], ortho_init=False)
    action, _, _ = box.act(obs, deterministic=True)
    assert torch.equal(action, logits_of(box, obs))


@pytest.mark.parametrize("shared", [True, False])
def test_shared_backbone_shares_parameters_and_separate_does_not(shared):
    model = ActorCritic(DISCRETE, [8, 8], shared_backbone=shared)
    trunk = (3 * 8 + 8) + (8 * 8 + 8)
    heads = (8 * 4 + 4) + (8 + 1)
    assert sum(p.numel() for p in model.parameters()) == heads + trunk * (1 if shared else 2)
    # Does any single weight move both the logits and the value? Only through a shared trunk.
    logits, value = model._heads(torch.randn(5, 3))
    params = list(model.parameters())
    by_value = torch.autograd.grad(value.sum(), params, retain_graph=True, allow_unused=True)
    by_logits = torch.autograd.grad(logits.sum(), params, allow_unused=True)
    both = [
        bool(((v != 0) & (g != 0)).any())
        for v, g in zip(by_value, by_logits, strict=True)
        if v is not None and g is not None
    ]
    assert any(both) == shared


def test_separate_trunks_are_each_the_plain_mlp_of_their_weights():
    from rlcore.models.actor_critic import TwinMLP

    torch.manual_seed(7)
    twin = TwinMLP([3, 5, 4], "tanh")
    obs = torch.randn(6, 3)
    out = twin(obs)
    for i in range(2):
        hidden = obs
        for weight, bias in zip(twin.weights, twin.biases, strict=True):
            hidden = torch.tanh(hidden @ weight[i] + bias[i, 0])
        assert torch.allclose(out[i], hidden, atol=1e-6)
    assert twin(obs[None]).shape == (2, 1, 6, 4)  # leading dims are kept


def test_separate_trunks_get_orthogonal_layers_each():
    model = ActorCritic(DISCRETE, [64, 64], shared_backbone=False)
    for weight in model.trunks.weights:
        for i in range(2):
            w = weight[i].detach().double()  # [fan_in, fan_out]
            small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
            assert torch.allclose(small, 2 * torch.eye(len(small), dtype=torch.float64), atol=1e-5)
    assert not torch.equal(model.trunks.weights[0][0], model.trunks.weights[0][1])


def test_orthogonal_init_gives_a_near_uniform_initial_policy():
    torch.manual_seed(4)
    model = ActorCritic(DISCRETE, [64, 64])
    probs = torch.softmax(logits_of(model, torch.randn(32, 3)), -1)
    assert (probs - 0.25).abs().max() < 0.05  # the 0.01-gain policy head


def test_images_get_the_cnn_trunk_scaled_to_unit_range():
    spec = SpaceSpec((40, 40, 3), "discrete", (2,), obs_scale=1 / 255)
    model = ActorCritic(spec, [32])
    assert any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    obs = torch.full((2, 40, 40, 3), 255.0)
    action, _, value = model.act(obs)
    assert action.shape == (2,) and value.shape == (2,)
    # the encoder sees obs / 255: an all-255 image equals an all-1 image without the scaling
    encoder = model.policy_trunk
    expected = encoder.dense(encoder.convs(torch.ones(2, 3, 40, 40)))
    assert torch.allclose(encoder(obs), expected, atol=1e-5)


def test_too_small_images_are_refused_with_the_size_needed():
    with pytest.raises(
        ConfigError, match="observes 20x20 images, smaller than the CNN policy's minimum of 36x36"
    ):
        ActorCritic(SpaceSpec((20, 20, 3), "discrete", (2,)), [32])


def test_tanh_activation_matches_torch_tanh_and_its_gradient():
    from rlcore.models.actor_critic import Tanh

    x = torch.linspace(-12, 12, 2001, dtype=torch.float32, requires_grad=True)
    y = Tanh()(x)
    assert torch.allclose(y, torch.tanh(x.detach()), atol=1e-6, rtol=0)
    y.sum().backward()
    expected = 1 - torch.tanh(x.detach()) ** 2  # d tanh / dx
    assert torch.allclose(x.grad, expected, atol=2e-6, rtol=0)


@pytest.mark.parametrize("spec", [DISCRETE, MULTI])
def test_sampled_categorical_actions_follow_the_softmax(spec):
    torch.manual_seed(5)
    model = ActorCritic(spec, [8], ortho_init=False)
    obs = torch.randn(1, 3).expand(20000, 3)
    action, log_prob, _ = model.act(obs)
    logits = logits_of(model, obs[:1])[0]
    parts = logits.split(list(spec.action_dims))
    picks = action.reshape(20000, -1)
    for dim, part in enumerate(parts):
        probs = torch.softmax(part, -1)
        freq = torch.bincount(picks[:, dim], minlength=len(probs)).float() / 20000
        assert (freq - probs).abs().max() < 0.015  # ~4 standard errors at n=20000
    # the log-prob returned is the one of the action returned
    again, _, _ = model.evaluate(obs, action)
    assert torch.allclose(log_prob, again)


def test_sampled_gaussian_actions_have_the_head_mean_and_std():
    torch.manual_seed(6)
    model = ActorCritic(BOX, [8], ortho_init=False, log_std_init=math.log(0.3))
    obs = torch.randn(1, 3).expand(20000, 3)
    action, _, _ = model.act(obs)
    mean = logits_of(model, obs[:1])[0]
    assert torch.allclose(action.mean(0), mean, atol=0.015)  # se 0.3 / sqrt(20000) = 0.002
    assert torch.allclose(action.std(0), torch.full((2,), 0.3), atol=0.01)


def test_images_with_separate_trunks_get_two_cnns():
    spec = SpaceSpec((40, 40, 3), "discrete", (2,), obs_scale=1 / 255)
    model = ActorCritic(spec, [32], shared_backbone=False)
    assert model.policy_trunk is not model.value_trunk
    action, _, value = model.act(torch.zeros(3, 40, 40, 3))
    assert action.shape == (3,) and value.shape == (3,)


BITS = SpaceSpec((3,), "multi_binary", (4,))


def test_multi_binary_log_prob_and_entropy_are_the_bernoulli_ones_summed():
    torch.manual_seed(3)
    model = ActorCritic(BITS, [8], ortho_init=False)
    obs = torch.randn(6, 3)
    actions = torch.randint(0, 2, (6, 4)).float()
    log_prob, entropy, _ = model.evaluate(obs, actions)
    # by hand, bit by bit, with torch.distributions.Bernoulli as the second implementation
    p = torch.sigmoid(logits_of(model, obs))
    hand = (actions * p.log() + (1 - actions) * (1 - p).log()).sum(-1)
    bernoulli = torch.distributions.Bernoulli(probs=p)
    assert torch.allclose(log_prob, hand, atol=1e-6)
    assert torch.allclose(log_prob, bernoulli.log_prob(actions).sum(-1), atol=1e-6)
    assert torch.allclose(entropy, bernoulli.entropy().sum(-1), atol=1e-6)
    assert torch.allclose(entropy, -(p * p.log() + (1 - p) * (1 - p).log()).sum(-1), atol=1e-6)


def test_multi_binary_samples_each_bit_at_its_sigmoid_and_the_mode_is_the_likelier():
    torch.manual_seed(4)
    model = ActorCritic(BITS, [8], ortho_init=False)
    with torch.no_grad():
        model.policy_head.weight.zero_()
        model.policy_head.bias.copy_(torch.tensor([2.0, -1.0, 0.0, -3.0]))
    obs = torch.randn(20000, 3)
    actions, _, _ = model.act(obs, generator=torch.Generator().manual_seed(0))
    assert set(actions.unique().tolist()) <= {0.0, 1.0} and actions.shape == (20000, 4)
    expected = torch.sigmoid(torch.tensor([2.0, -1.0, 0.0, -3.0]))
    assert torch.allclose(actions.mean(0), expected, atol=0.015)  # 4 sigma of a mean of 20k
    mode, _, _ = model.act(obs[:2], deterministic=True)
    assert mode.tolist() == [[1.0, 0.0, 0.0, 0.0]] * 2
    sent = env_action(BITS, actions[:3])
    assert sent.dtype == np.int8 and sent.tolist() == actions[:3].int().tolist()
