"""actor.model.cls: a user's policy class computes what the built-in actor-critic computes for
the same weights (a second implementation), and a class that breaks the protocol is refused in
one line before anything starts."""

import numpy as np
import pytest
import torch

from rlcore.config.errors import ConfigError
from rlcore.envs import SpaceSpec
from rlcore.models import ActorCritic
from rlcore.models.user_policy import UserPolicy, check_user_policy, load_policy_class

FILE = __file__.replace("test_user_policy.py", "user_policies.py")
DISCRETE = SpaceSpec((4,), "discrete", (2,))
BOX = SpaceSpec((3,), "box", (2,), np.full(2, -1.0, np.float32), np.ones(2, np.float32))


@pytest.mark.parametrize("spec", [DISCRETE, BOX], ids=["discrete", "box"])
def test_a_user_class_scores_as_the_built_in_with_the_same_weights(spec):
    torch.manual_seed(0)
    built_in = ActorCritic(spec, [64, 64], "tanh", shared_backbone=True)
    user = UserPolicy(load_policy_class(f"{FILE}:SharedMLP"), spec)
    ours = built_in.state_dict()
    names = {
        "net.trunk.0": "policy_trunk.0",
        "net.trunk.2": "policy_trunk.2",
        "net.policy": "policy_head",
        "net.critic": "value_head",
    }
    state = {}
    for key in user.state_dict():
        head, _, leaf = key.rpartition(".")
        state[key] = ours[f"{names[head]}.{leaf}" if head in names else "log_std"]
    user.load_state_dict(state)
    obs = torch.randn(16, *spec.obs_shape)
    actions, _, _ = built_in.act(obs, generator=torch.Generator().manual_seed(1))
    for a, b in zip(built_in.evaluate(obs, actions), user.evaluate(obs, actions), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(built_in.value(obs), user.value(obs))
    # deterministic actions: the mode; sampled ones: from the given generator, repeatably
    torch.testing.assert_close(
        user.act(obs, deterministic=True)[0], built_in.act(obs, deterministic=True)[0]
    )
    first = user.act(obs, generator=torch.Generator().manual_seed(5))
    again = user.act(obs, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))


@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("NoIndependent", BOX, r"log_prob must be \[B\] \(got \(2, 2\)"),
        ("ColumnValues", DISCRETE, r"values must be \[B\] \(got \(2, 1\)"),
        ("Logits", DISCRETE, "must be a torch.distributions.Distribution, not Tensor"),
        ("Nope", DISCRETE, "defines no torch.nn.Module class 'Nope'"),
    ],
)
def test_a_class_that_breaks_the_protocol_is_refused_in_one_line(name, spec, message):
    with pytest.raises(ConfigError, match=message) as error:
        check_user_policy(f"{FILE}:{name}", spec)
    assert str(error.value).startswith("actor.model.cls: ") and "\n" not in str(error.value)
