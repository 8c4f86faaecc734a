"""benchmarks/same_results.py compares two runs' outcomes leaf by leaf (issue 49's "same
results"): a tensor by its bytes, a float exactly, a key present on one side only. No run starts
here; the records are written by hand."""

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location(
        "same_results", ROOT / "benchmarks" / "same_results.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


same = _module()


def _job(weight: torch.Tensor, loss: float, **summary) -> dict:
    content = same.flatten({"model": {"w": weight}, "steps": 3})
    return {
        "outcome": {
            "summary": {"iterations": 3, **summary},
            "checkpoint": {"files": {"actor/model.safetensors": {"content": content}}},
            "metrics": {"actor/pg_loss": [[1, loss]]},
        }
    }


def test_equal_outcomes_have_no_differences():
    w = torch.tensor([1.0, 2.0])
    assert same.differences(_job(w, 0.5), _job(w.clone(), 0.5)) == []


def test_a_tensor_one_ulp_apart_is_named_by_its_path():
    w = torch.tensor([1.0, 2.0])
    nudged = w.clone()
    nudged[1] = torch.nextafter(nudged[1], torch.tensor(3.0))
    found = same.differences(_job(w, 0.5), _job(nudged, 0.5))
    assert len(found) == 1
    assert found[0].startswith("checkpoint.files.actor/model.safetensors.content.model.w:")


def test_a_tensor_of_another_dtype_with_equal_values_differs():
    w = torch.tensor([1.0, 2.0])
    assert len(same.differences(_job(w, 0.5), _job(w.double(), 0.5))) == 1


def test_floats_compare_exactly_and_an_int_is_not_a_float():
    w = torch.tensor([1.0])
    assert len(same.differences(_job(w, 0.5), _job(w, 0.5 + 2**-40))) == 1
    assert len(same.differences(_job(w, 1.0), _job(w, 1))) == 1
    nan = float("nan")
    assert same.differences(_job(w, nan), _job(w, nan)) == []


def test_a_key_on_one_side_only_is_a_difference():
    w = torch.tensor([1.0])
    found = same.differences(_job(w, 0.5), _job(w, 0.5, restarts=0))
    assert found == ["summary.restarts: only after (0)"]


def test_a_failed_job_differs_from_a_finished_one():
    w = torch.tensor([1.0])
    assert same.differences(_job(w, 0.5), {"error": "exit status 1: boom"})


def test_long_lists_are_kept_by_digest_short_ones_by_value():
    flat = same.flatten({"short": [1, 2], "long": list(range(9))})
    assert flat["short"] == [1, 2]
    assert flat["long"].startswith("list[9] ")
    assert same.flatten({"long": list(range(9))}) != same.flatten({"long": [*range(8), 9]})
