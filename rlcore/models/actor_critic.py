"""Actor-critic: a trunk (shared, or one per head), a policy head and a value head. The trunk is
an MLP for vector observations and the Nature-DQN CNN for (H, W, C) images.

Policy heads: Categorical (Discrete), one Categorical per dimension (MultiDiscrete), one
Bernoulli per bit (MultiBinary, as SB3's ``BernoulliDistribution``: one logit per bit, log-probs
and entropies summed over the bits), and a Gaussian with a state-independent log-std (1-D Box).
Gaussian actions are sampled unbounded and clipped to the space's bounds only when sent to the
env, so log-probs stay those of the sample.

The heads compute log-probs and entropies in closed form rather than through
``torch.distributions``: building a validated ``Categorical`` costs ~100 us, more than the
64x64 MLP's forward pass on 16 observations (measured on these 2-core CPUs).
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import torch
from torch import nn

from rlcore.algorithms.stats import entropy_from_log_probs
from rlcore.config.errors import ConfigError
from rlcore.envs.vector import SpaceSpec

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _sigmoid_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


class _SigmoidTanh(torch.autograd.Function):
    """tanh(x) as 2 sigmoid(2x) - 1, with tanh's own backward ``g (1 - y^2)`` (one kernel)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = _sigmoid_tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)  # the kernel of torch.tanh's own backward


class Tanh(nn.Module):
    """``nn.Tanh``, computed through a sigmoid on CPU.

    On these AMD EPYC CPUs ``torch.tanh`` on 256 x 64 floats takes ~50 us and its backward ~30 us
    (a precise vector kernel), the sigmoid form ~20 us and ~10 us: a fifth of a CartPole PPO
    update step, measured. The two agree to float32 rounding (|error| < 1e-6); GPUs keep
    ``torch.tanh``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            return torch.tanh(x)
        return _SigmoidTanh.apply(x) if torch.is_grad_enabled() else _sigmoid_tanh(x)


ACTIVATIONS = {"tanh": Tanh, "relu": nn.ReLU}


def _mlp(sizes: list[int], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


class TwinMLP(nn.Module):
    """Two MLPs of the same sizes (the policy's and the value's trunks) run as one.

    Layer ``l`` of both is one ``[2, fan_in, fan_out]`` weight, so each layer is one batched
    matmul for both trunks instead of two: a separate-trunk CartPole update step spends
    ~20-30% less time in the trunks (measured). ``forward`` returns ``[2, ..., width]``:
    index 0 is the policy trunk's features, 1 the value trunk's. Each trunk is initialised as
    ``nn.Linear`` would be, on its own.
    """

    def __init__(self, sizes: list[int], activation: str) -> None:
        super().__init__()
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            weight, bias = torch.empty(2, fan_in, fan_out), torch.empty(2, 1, fan_out)
            for i in range(2):
                layer = nn.Linear(fan_in, fan_out)
                weight[i], bias[i, 0] = layer.weight.detach().T, layer.bias.detach()
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))
        self.activation = ACTIVATIONS[activation]()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead, flat = obs.shape[:-1], obs.reshape(-1, obs.shape[-1])
        hidden = flat.expand(2, *flat.shape)
        for weight, bias in zip(self.weights, self.biases, strict=True):
            hidden = self.activation(torch.baddbmm(bias, hidden, weight))
        return hidden.reshape(2, *lead, hidden.shape[-1])

    def orthogonal_(self, gain: float) -> None:
        """Each trunk's layers orthogonal with ``gain`` (as ``nn.Linear`` weights), zero biases."""
        with torch.no_grad():
            for weight, bias in zip(self.weights, self.biases, strict=True):
                for i in range(2):
                    weight[i] = nn.init.orthogonal_(
                        torch.empty(weight.shape[2], weight.shape[1]), gain
                    ).T
                bias.zero_()


# The Nature-DQN convolutions (8 stride 4, 4 stride 2, 3 stride 1) need images this large.
MIN_IMAGE_SIDE = 36


def check_image_shape(shape: tuple[int, ...], env_id: str | None) -> None:
    """A ConfigError naming ``env_id`` if its (H, W, C) images are too small for the CNN."""
    if len(shape) == 3 and min(shape[0], shape[1]) < MIN_IMAGE_SIDE:
        which = "the env" if env_id is None else f"'{env_id}'"
        raise ConfigError(
            f"env.id: {which} observes {shape[0]}x{shape[1]} images, smaller than the CNN "
            f"policy's minimum of {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} (the Nature-DQN "
            "convolutions): resize them (gymnasium.wrappers.ResizeObservation), or flatten "
            "them (FlattenObservation) for the MLP policy"
        )


class ImageEncoder(nn.Module):
    """The Nature-DQN convolutions (Mnih et al. 2015) on (H, W, C) images, then a dense layer."""

    def __init__(self, shape: tuple[int, int, int], scale: float, width: int) -> None:
        super().__init__()
        height, wide, channels = shape
        self.scale = scale
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        check_image_shape(shape, None)
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, channels, height, wide)).shape[1]
        self.dense = nn.Sequential(nn.Linear(flat, width), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        images = obs.movedim(-1, -3) * self.scale  # (..., H, W, C) -> (..., C, H, W)
        return self.dense(self.convs(images))


def _encoder(spec: SpaceSpec, hidden_sizes: list[int], activation: str) -> nn.Module:
    if len(spec.obs_shape) == 3:
        return ImageEncoder(spec.obs_shape, spec.obs_scale, hidden_sizes[-1])
    return _mlp([spec.obs_shape[0], *hidden_sizes], activation)


def _orthogonal(module: nn.Module, gain: float) -> None:
    for layer in module.modules():
        if isinstance(layer, TwinMLP):
            layer.orthogonal_(gain)
        elif isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


class ActorCritic(nn.Module):
    """``act`` samples (or picks the mode) for the env; ``evaluate`` scores stored actions."""

    def __init__(
        self,
        spec: SpaceSpec,
        hidden_sizes: list[int],
        activation: Literal["tanh", "relu"] = "tanh",
        shared_backbone: bool = True,
        ortho_init: bool = True,
        log_std_init: float = 0.0,
    ) -> None:
        super().__init__()
        self.spec = spec
        # Trunks: one shared; or two, run as one TwinMLP for vectors, two CNNs for images.
        self.shared_backbone = shared_backbone
        images = len(spec.obs_shape) == 3
        self.trunks: TwinMLP | None = None
        if shared_backbone or images:
            self.policy_trunk = _encoder(spec, hidden_sizes, activation)
            self.value_trunk = (
                self.policy_trunk if shared_backbone else _encoder(spec, hidden_sizes, activation)
            )
        else:
            self.trunks = TwinMLP([spec.obs_shape[0], *hidden_sizes], activation)
        width = hidden_sizes[-1]
        n_out = sum(spec.action_dims) if spec.action_kind != "box" else spec.action_dims[0]
        self.policy_head = nn.Linear(width, n_out)
        self.value_head = nn.Linear(width, 1)
        if spec.action_kind == "box":
            self.log_std = nn.Parameter(torch.full((spec.action_dims[0],), log_std_init))
        if ortho_init:  # the gains of Andrychowicz et al. 2021 / CleanRL: small policy output
            for trunk in self._trunk_modules():
                _orthogonal(trunk, math.sqrt(2))
            _orthogonal(self.policy_head, 0.01)
            _orthogonal(self.value_head, 1.0)

    def _trunk_modules(self) -> list[nn.Module]:
        if self.trunks is not None:
            return [self.trunks]
        return (
            [self.policy_trunk] if self.shared_backbone else [self.policy_trunk, self.value_trunk]
        )

    def features(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The trunks' outputs: ``(policy features, value features)``."""
        if self.trunks is not None:
            both = self.trunks(obs)
            return both[0], both[1]
        policy = self.policy_trunk(obs)
        return policy, policy if self.shared_backbone else self.value_trunk(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value_head(self.features(obs)[1]).squeeze(-1)

    def _heads(self, obs: torch.Tensor):
        policy, value = self.features(obs)
        return self.policy_head(policy), self.value_head(value).squeeze(-1)

    def _log_prob_entropy(self, out: torch.Tensor, actions: torch.Tensor, entropy: bool = True):
        """Log-prob of ``actions`` and (when asked) entropy under the head's output ``out``."""
        if self.spec.action_kind == "box":
            log_std = self.log_std.expand_as(out)
            z = (actions - out) * torch.exp(-log_std)
            log_prob = (-0.5 * z * z - log_std - HALF_LOG_2PI).sum(-1)
            return log_prob, (0.5 + HALF_LOG_2PI + log_std).sum(-1) if entropy else None
        if self.spec.action_kind == "discrete":
            return self._categorical(out, actions, entropy)
        if self.spec.action_kind == "multi_binary":
            return self._bernoulli(out, actions, entropy)
        parts = out.split(list(self.spec.action_dims), -1)
        pairs = [self._categorical(p, actions[..., i], entropy) for i, p in enumerate(parts)]
        log_prob = sum(p[0] for p in pairs)
        return log_prob, sum(p[1] for p in pairs) if entropy else None

    @staticmethod
    def _categorical(logits: torch.Tensor, actions: torch.Tensor, entropy: bool):
        log_p = logits.log_softmax(-1)
        log_prob = log_p.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return log_prob, entropy_from_log_probs(log_p) if entropy else None

    @staticmethod
    def _bernoulli(logits: torch.Tensor, actions: torch.Tensor, entropy: bool):
        """Independent bits, ``[..., n]`` logits and 0/1 actions: log p(a) = a log s(l) +
        (1 - a) log s(-l), s the sigmoid; entropy -p log p - (1 - p) log(1 - p); both summed."""
        log_p, log_q = nn.functional.logsigmoid(logits), nn.functional.logsigmoid(-logits)
        log_prob = (actions * log_p + (1 - actions) * log_q).sum(-1)
        if not entropy:
            return log_prob, None
        p = torch.sigmoid(logits)
        return log_prob, -(p * log_p + (1 - p) * log_q).sum(-1)

    def _sample(self, out: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        if self.spec.action_kind == "box":
            return torch.normal(out, self.log_std.exp().expand_as(out), generator=generator)
        if self.spec.action_kind == "multi_binary":
            return torch.bernoulli(torch.sigmoid(out), generator=generator)
        return self._per_dimension(
            out, lambda logits: torch.multinomial(logits.softmax(-1), 1, generator=generator)
        )

    def _mode(self, out: torch.Tensor) -> torch.Tensor:
        if self.spec.action_kind == "box":
            return out
        if self.spec.action_kind == "multi_binary":  # each bit's likelier value (0 on a tie)
            return (out > 0).to(out.dtype)
        return self._per_dimension(out, lambda logits: logits.argmax(-1, keepdim=True))

    def _per_dimension(self, out: torch.Tensor, pick) -> torch.Tensor:
        """One index per Categorical (``pick`` maps ``[..., n]`` logits to ``[..., 1]``):
        ``[...]`` for Discrete, ``[..., dims]`` for MultiDiscrete."""
        parts = out.split(list(self.spec.action_dims), -1)
        action = torch.cat([pick(part) for part in parts], -1)
        return action.squeeze(-1) if self.spec.action_kind == "discrete" else action

    def act(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ):
        """``(action, log_prob, value)`` for a batch of observations; samples are drawn from
        ``generator`` (torch's global one when None)."""
        out, value = self._heads(obs)
        action = self._mode(out) if deterministic else self._sample(out, generator)
        log_prob, _ = self._log_prob_entropy(out, action, entropy=False)
        return action, log_prob, value

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor):
        """``(log_prob, entropy, value)`` of stored ``actions`` under the current parameters."""
        out, value = self._heads(obs)
        log_prob, entropy = self._log_prob_entropy(out, actions)
        return log_prob, entropy, value

    def forward(self, obs: torch.Tensor, actions: torch.Tensor):
        """``evaluate``: training goes through ``forward`` so that DDP sees it."""
        return self.evaluate(obs, actions)
