"""The embodied mode's components: the envs, the policy acting on them, the actor-critic's
update."""
