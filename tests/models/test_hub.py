"""Which model paths are hub ids: a local path is never downloaded, nor is ``hf download``
suggested for it (the 0.5B config names models/Qwen2.5-0.5B-Instruct, a folder of the user's)."""

import pytest

from rlcore.config import ConfigError, load_config
from rlcore.models.hub import is_hub_id
from rlcore.placement import plan_for_config
from rlcore.runners.preflight import preflight


def test_org_slash_name_is_a_hub_id_unless_it_is_a_path_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    assert is_hub_id("Qwen/Qwen2.5-0.5B-Instruct")
    assert not is_hub_id("mine/Qwen2.5-0.5B-Instruct")  # in a folder here
    # the hub's own pages (huggingface.co/models, /datasets, /spaces): no org has these names
    assert not is_hub_id("models/Qwen2.5-0.5B-Instruct")
    assert not is_hub_id("datasets/gsm8k")
    assert not is_hub_id("./Qwen/x") and not is_hub_id("Qwen") and not is_hub_id("a/b/c")


def test_the_half_billion_config_without_its_model_names_the_folder_not_a_download(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = load_config("reasoning/qwen2.5-0.5b_gsm8k_ppo", [f"runner.output_dir={tmp_path}"])
    with pytest.raises(ConfigError) as error:
        preflight(config, plan_for_config(config))
    lines = str(error.value).splitlines()
    model = [line for line in lines if line.startswith("actor.model.path")]
    assert model == [
        "actor.model.path: models/Qwen2.5-0.5B-Instruct is not a directory; give a local "
        "Hugging Face model folder, or a hub id (org/name: from the local cache, or downloaded)"
    ]
    assert not [line for line in lines if "hf download" in line]
