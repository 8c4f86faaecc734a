"""torch.compile's settings for what ``use_torch_compile`` compiles: the decoder layers
(``lm.compile_layers``) and the fused log-probs' chunk math (``fused_head``)."""

from __future__ import annotations

# the backend (tests trace with "eager" or a recording one: inductor's C++ build is slow on CPUs)
COMPILE_BACKEND = "inductor"

# Compiled graphs one code object keeps: the actor's, the reference's and the critic's layers
# share it, and each pass differs in what dynamo guards on (gradients on or off, parameters that
# require them or not, the first shapes before they turn dynamic): 8, torch's default, was spent
# in two iterations of one process (then every pass ran uncompiled, with a warning)
RECOMPILE_LIMIT = 64


def room_for_every_pass() -> None:
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
