"""Policy networks for the embodied runner."""

from rlcore.models.actor_critic import ActorCritic

__all__ = ["ActorCritic"]
