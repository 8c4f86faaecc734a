"""The Trainer's optimiser and schedule come from the component's optim section; non-finite
gradients: each such optimiser step is skipped and counted, and more than
runner.max_skipped_steps in a row end the run naming the component."""

import math

import pytest
import torch
from tensordict import TensorDict

from rlcore.config.sections import OptimConfig
from rlcore.workers.training.trainer import NonFiniteError, Trainer, UpdateSizes
from tests.lm_fixtures import SOLO


def fit(trainer, scale, rows=4):
    batch = TensorDict({"x": torch.ones(rows, 2), "mask": torch.ones(rows)}, batch_size=[rows])

    def loss_fn(module, micro, counts):
        loss = module(micro["x"]).sum() * scale
        return loss, {"loss": loss.detach()}

    return trainer.fit(batch, loss_fn, mask_key="mask")


def trainer_of(optim, updates=10, sizes=None, **options):
    sizes = sizes or UpdateSizes(1, 4, None)
    return Trainer(
        SOLO, torch.nn.Linear(2, 1), optim=optim, updates=updates, sizes=sizes, seed=0, **options
    )


def test_non_finite_steps_are_skipped_and_counted_and_too_many_in_a_row_stop():
    trainer = trainer_of(OptimConfig(name="adam", lr=0.1), max_skipped_steps=2)
    model = trainer.model
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


@pytest.mark.parametrize(
    ("name", "kind", "weight_decay"),
    [("adam", torch.optim.Adam, 0.0), ("adamw", torch.optim.AdamW, 0.1)],
)
def test_the_optimiser_is_the_one_its_section_names(name, kind, weight_decay):
    optim = OptimConfig(name=name, lr=0.02, eps=1e-6, weight_decay=weight_decay)
    group = trainer_of(optim).optimizer.param_groups[0]
    assert type(trainer_of(optim).optimizer) is kind
    assert (group["lr"], group["eps"], group["weight_decay"]) == (0.02, 1e-6, weight_decay)


def lrs(optim, updates, steps_per_update):
    """The learning rate each optimiser step of ``updates`` fits is taken at."""
    sizes = UpdateSizes(1, 4 // steps_per_update, None)  # mini-batches of the 4 rows
    trainer = trainer_of(optim, updates=updates, sizes=sizes)
    seen = []
    for _ in range(updates):
        seen.append(trainer.optimizer.param_groups[0]["lr"])
        fit(trainer, 1.0)
    return seen, trainer


@pytest.mark.parametrize(
    ("decay", "factor"),
    [
        ("constant", lambda u, total: 1.0),
        ("linear", lambda u, total: 1 - u / total),
        ("cosine", lambda u, total: 0.5 * (1 + math.cos(math.pi * u / total))),
    ],
)
def test_the_decay_moves_once_per_update_to_its_closed_form(decay, factor):
    total = 5
    first_of_each, _ = lrs(OptimConfig(lr=0.1, decay=decay), total, steps_per_update=2)
    assert first_of_each == pytest.approx([0.1 * factor(u, total) for u in range(total)])


def test_an_update_holds_its_rate_over_its_optimiser_steps_and_warm_up_counts_steps():
    optim = OptimConfig(lr=0.1, decay="linear", warmup_steps=3)
    sizes = UpdateSizes(1, 2, None)  # 2 optimiser steps per update of 4 rows
    trainer = trainer_of(optim, updates=4, sizes=sizes)
    taken = []

    def loss_fn(module, micro, counts):
        taken.append(trainer.optimizer.param_groups[0]["lr"])
        loss = module(micro["x"]).sum()
        return loss, {"loss": loss.detach()}

    batch = TensorDict({"x": torch.ones(4, 2), "mask": torch.ones(4)}, batch_size=[4])
    for _ in range(3):
        trainer.fit(batch, loss_fn, mask_key="mask")
    # optimiser step k (from 0) rises as (k + 1) / 3 up to 1; update u decays as 1 - u / 4
    want = [0.1 * min(1, (k + 1) / 3) * (1 - (k // 2) / 4) for k in range(6)]
    assert taken == pytest.approx(want)


def test_the_schedule_resumes_where_it_stopped(tmp_path):
    optim = OptimConfig(lr=0.1, decay="cosine", warmup_steps=2)
    a = trainer_of(optim, updates=6)
    for _ in range(3):
        fit(a, 1.0)
    a.save(tmp_path)
    b = trainer_of(optim, updates=6)
    b.load(tmp_path)
    assert b.updates == a.updates == 3
    for _ in range(2):
        fit(a, 1.0)
        fit(b, 1.0)
        assert b.optimizer.param_groups[0]["lr"] == a.optimizer.param_groups[0]["lr"]
    assert torch.equal(a.model.weight, b.model.weight)
