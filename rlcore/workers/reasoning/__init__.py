"""The reasoning mode's components: the LM actor, critic and reference, the rollout engines
(``hf``, its static decode loop, ``sglang``) and the multi-turn agent loop."""
