"""The validator's line for another framework's key with no rlcore counterpart: named as theirs,
with the alias beside it only where the key is a misspelling of one."""

from rlcore.config.foreign.unmapped import FOREIGN_KEY_SECTIONS, in_foreign_section, no_counterpart

LISTED = "keys rlcore accepts are listed in docs/config.md)"


def test_a_key_under_verls_own_section_is_named_as_verls():
    assert in_foreign_section("trainer.balance_batch") == (
        f"trainer.balance_batch: verl's key has no rlcore counterpart (the verl {LISTED}"
    )
    # (with the way on where rlcore has one)
    assert in_foreign_section("trainer.total_epochs") == (
        "trainer.total_epochs: verl's key has no rlcore counterpart; a run here is counted in "
        "iterations (one batch each): give trainer.total_training_steps (runner.total_iterations) "
        f"instead (the verl {LISTED}"
    )


def test_a_misspelt_alias_under_verls_own_section_gets_the_alias_as_a_hint():
    assert in_foreign_section("trainer.nnode") == (
        "trainer.nnode: verl's key has no rlcore counterpart; did you mean 'trainer.nnodes'? "
        f"(the verl {LISTED}"
    )


def test_keys_under_rlcores_sections_are_named_by_the_list_that_holds_them():
    assert in_foreign_section("algorithm.gamma") is None
    assert no_counterpart("actor.global_batch_size") == (
        "actor.global_batch_size: RLinf's key (RLinf's examples/embodiment/config/"
        f"maniskill_ppo_mlp.yaml) has no rlcore counterpart (the RLinf {LISTED}"
    )
    assert no_counterpart("data.truncation") == (
        f"data.truncation: verl's key (verl 0.9.1) has no rlcore counterpart (the verl {LISTED}"
    )
    assert no_counterpart("algorithm.gamma_typo") is None


def test_every_parent_of_a_listed_key_is_a_foreign_key_section():
    assert {"data.custom_cls", "env.train.init_params", "env.train"} <= FOREIGN_KEY_SECTIONS
    assert "data.truncation" not in FOREIGN_KEY_SECTIONS  # (a leaf, not a section)
