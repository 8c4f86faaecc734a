"""Which passes an iteration runs before its update (rlcore/runners/passes.py): the old
log-prob pass is skipped exactly when the rollout's log-probs are the old ones."""

import pytest

from rlcore.config import load_config
from rlcore.runners.passes import Passes

ASYNC = [
    "runner.max_staleness=1",
    "cluster.devices_per_node=2",
    "cluster.component_placement={actor:0,ref:0,critic:1,rollout:1,reward:1}",
]


class ApartRollout:
    """A rollout in a process of its own: it never samples with the actor's module."""

    def generates_with_the_actor(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("overrides", "passes"),
    [
        (ASYNC, ["values"]),  # bypass_mode null, asynchronous: the rollout's log-probs
        ([*ASYNC, "algorithm.rollout_correction.bypass_mode=false"], ["logprob", "values"]),
        ([*ASYNC, "algorithm.rollout_correction.rollout_is=token"], ["logprob", "values"]),
        ([], ["logprob", "values"]),  # synchronous, apart: recomputed as before
    ],
)
def test_an_asynchronous_run_skips_the_old_log_prob_pass_unless_it_asks_for_it(overrides, passes):
    config = load_config("reasoning/tiny_arith_ppo", overrides)
    made = Passes(config, actor=object(), rollout=ApartRollout(), ref=None, critic=object())
    assert [timer for timer, *_ in made.calls] == passes
    # an asynchronous rollout returns its log-probs (reused, or the behaviour policy's)
    assert made.record_log_probs is bool(overrides)
