"""Non-finite gradients: each such optimiser step is skipped and counted; more than
runner.max_skipped_steps in a row end the run naming the component."""

import pytest
import torch
from tensordict import TensorDict

from rlcore.workers.trainer import NonFiniteError, Trainer, UpdateSizes
from tests.lm_fixtures import SOLO


def fit(trainer, scale):
    batch = TensorDict({"x": torch.ones(4, 2), "mask": torch.ones(4)}, batch_size=[4])

    def loss_fn(module, micro, counts):
        loss = module(micro["x"]).sum() * scale
        return loss, {"loss": loss.detach()}

    return trainer.fit(batch, loss_fn, mask_key="mask")


def test_non_finite_steps_are_skipped_and_counted_and_too_many_in_a_row_stop():
    model = torch.nn.Linear(2, 1)
    trainer = Trainer(
        SOLO,
        model,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        sizes=UpdateSizes(1, 4, None),
        max_grad_norm=1.0,
        seed=0,
        max_skipped_steps=2,
    )
    before = model.weight.detach().clone()
    assert fit(trainer, float("nan"))["skipped_steps"] == 1
    assert fit(trainer, float("inf"))["skipped_steps"] == 2
    assert torch.equal(model.weight, before)  # skipped: nothing stepped
    assert fit(trainer, 1.0)["skipped_steps"] == 2  # a finite step: the run of skips ends
    assert not torch.equal(model.weight, before)
    fit(trainer, float("nan"))
    fit(trainer, float("nan"))
    with pytest.raises(
        NonFiniteError,
        match=r"test: 3 optimiser steps in a row had a NaN or "
        r"infinite gradient .*runner.max_skipped_steps=2",
    ):
        fit(trainer, float("nan"))
