"""The models: embodied actor-critics, causal LMs and value models, their Megatron conversion.

``ActorCritic`` loads on first use: a reasoning worker imports ``rlcore.models.lm``, and with it
this file, without the embodied side (gymnasium and the env adapters).
"""

from rlcore.lazy import lazy_exports

_EXPORTS = {"ActorCritic": "rlcore.models.actor_critic"}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("rlcore.models", _EXPORTS)
