"""The models: embodied actor-critics, causal LMs and value models, their Megatron conversion.

``ActorCritic`` loads on first use: a reasoning worker imports ``rlcore.models.lm``, and with it
this file, without the embodied side (gymnasium and the env adapters).
"""

from rlcore.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "actor_critic": ("ActorCritic",),
    },
)
