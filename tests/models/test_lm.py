"""LoRA targets (``lora.target_modules``) the model lacks are named with the layers it has, in
one line, by the run (``with_lora``) and, for a model folder, by the dry run before it: peft
itself refuses only when no name matches, and otherwise adapts fewer layers than were named."""

import pytest
import torch

from rlcore.config import ConfigError, load_config
from rlcore.models.lm import check_lora_targets
from rlcore.placement import plan_for_config
from rlcore.runners.preflight import preflight
from tests.models.test_lm_policy import policy


def test_a_name_matches_a_whole_last_part_of_a_module_name_as_peft_matches():
    model = torch.nn.ModuleDict(
        {
            "block": torch.nn.ModuleDict(
                {"q_proj": torch.nn.Linear(2, 2), "norm": torch.nn.LayerNorm(2)}
            )
        }
    )
    check_lora_targets(model, ["q_proj", "block.q_proj"], "k")  # both name block.q_proj
    with pytest.raises(ConfigError) as refused:
        check_lora_targets(model, ["proj", "q_proj", "lock.q_proj"], "k")
    # "proj" and "lock.q_proj" end block.q_proj's name, not at a dot; a LayerNorm is not listed
    assert str(refused.value) == (
        "k: proj, lock.q_proj not in the model (ModuleDict), whose layers LoRA can adapt are "
        "named q_proj; name those to adapt"
    )


def test_lora_targets_the_model_lacks_are_named_with_the_layers_it_has():
    with pytest.raises(ConfigError) as refused:
        policy("actor.model.lm.lora.rank=4", "actor.model.lm.lora.target_modules=[q_proj,c_attn]")
    assert str(refused.value) == (
        "actor.model.lm.lora.target_modules: c_attn not in the model (Qwen2ForCausalLM), whose "
        "layers LoRA can adapt are named down_proj, embed_tokens, gate_proj, k_proj, lm_head, "
        "o_proj, q_proj, up_proj, v_proj; name those to adapt"
    )


def test_lora_targets_a_model_folder_lacks_are_refused_before_start(tmp_path, tiny_lm):
    cfg = load_config(
        "embodied/lm_policy_reach_ppo",
        [
            f"runner.output_dir={tmp_path}",
            "actor.model.type=lm",
            f"actor.model.lm.path={tiny_lm[1].actor}",
            "actor.model.lm.lora.rank=4",
            "actor.model.lm.lora.target_modules=[c_attn,k_proj]",
        ],
    )
    with pytest.raises(
        ConfigError, match=r"^actor\.model\.lm\.lora\.target_modules: c_attn not in"
    ):
        preflight(cfg, plan_for_config(cfg))
