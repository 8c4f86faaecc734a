"""Environment adapters and the env plug-in registry.

``env.id`` may be a gymnasium id (``CartPole-v1``), a name registered with ``register_env``, or a
``module.path:ClassName`` entry point, so users plug in their own env with no change to rlcore.
ManiSkill3 tasks are gymnasium ids ``maniskill/<Task>`` (rlcore/envs/maniskill.py, which imports
``mani_skill`` only when one is made).
"""

from rlcore.envs import color_reach, maniskill  # register color_reach and the maniskill/ ids
from rlcore.envs.registry import EnvError, make_env, register_env, registered_envs, resolve_env
from rlcore.envs.vector import (
    SpaceSpec,
    check_output,
    make_vector_env,
    space_spec,
    tensor_device,
)

__all__ = [
    "EnvError",
    "SpaceSpec",
    "check_output",
    "color_reach",
    "make_env",
    "make_vector_env",
    "maniskill",
    "register_env",
    "registered_envs",
    "resolve_env",
    "space_spec",
    "tensor_device",
]
