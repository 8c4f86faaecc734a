"""The reasoning summary compares what both validations measured; a run that trained writes its
summary even when building it fails."""

import json
from types import SimpleNamespace

from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.runners.progress import Progress
from rlcore.runners.reasoning_metrics import summary
from tests.runners.test_resume import config


def test_the_summary_compares_only_a_metric_both_validations_have():
    data = type("Prompts", (), {"dropped": 0, "__len__": lambda self: 4})()
    progress = Progress(
        iteration=3,
        first_eval={"val/reward_mean": 0.25, "val/accuracy": 0.5},  # verdicts then...
        last_eval={"val/reward_mean": 0.75},  # ...none later (a custom reward's choice)
    )
    runner = SimpleNamespace(
        progress=progress,
        train_set=data,
        val_set=data,
        generated_tokens=0,
        models=SimpleNamespace(actor="m"),
        plan=SimpleNamespace(layout="p"),
        changed_data=[],
        pipeline=None,
    )
    out = summary(runner, 1.0, {})
    assert (out["val_reward_mean_before"], out["val_reward_mean_after"]) == (0.25, 0.75)
    assert "val_accuracy_before" not in out
    progress.last_eval["val/accuracy"] = 1.0
    out = summary(runner, 1.0, {})
    assert (out["val_accuracy_before"], out["val_accuracy_after"]) == (0.5, 1.0)


def test_a_run_that_trained_writes_its_summary_even_when_building_it_fails(
    tmp_path, monkeypatch, capsys
):
    def broken(self, wall_s, means):
        raise KeyError("val/accuracy")

    monkeypatch.setattr(EmbodiedRunner, "summary", broken)
    cfg = config(tmp_path, "runner.run_name=r")
    summary = EmbodiedRunner(cfg, plan_for_config(cfg)).run()
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert written == summary
    assert written["iterations"] == 6 and written["summary_error"] == "KeyError: 'val/accuracy'"
    assert "the run's summary could not be completed (KeyError" in capsys.readouterr().err
