"""The placement grammar: what each value means, and every rule's error."""

import pytest

from rlcore.placement import PlacementError, parse_value
from rlcore.placement.grammar import split_key


def slots(value, num_devices=8, per_node=4):
    return [
        (s.rank, s.devices, s.share) for s in parse_value("actor", value, num_devices, per_node)
    ]


def test_all_is_one_process_per_device():
    assert slots("all", num_devices=3) == [(0, (0,), 1.0), (1, (1,), 1.0), (2, (2,), 1.0)]


def test_single_rank_as_int_or_string():
    assert slots(3) == slots("3") == [(0, (3,), 1.0)]


def test_range_and_list_of_ranges_in_order():
    assert [d for _, d, _ in slots("0-1,4-5")] == [(0,), (1,), (4,), (5,)]
    assert [d for _, d, _ in slots(" 2 - 3 ")] == [(2,), (3,)]


def test_more_processes_than_devices_share_them_in_rank_order():
    assert slots("0-1:0-3") == [
        (0, (0,), 0.5),
        (1, (0,), 0.5),
        (2, (1,), 0.5),
        (3, (1,), 0.5),
    ]


def test_fewer_processes_than_devices_span_consecutive_devices():
    assert slots("0-7:0-3") == [
        (0, (0, 1), 1.0),
        (1, (2, 3), 1.0),
        (2, (4, 5), 1.0),
        (3, (6, 7), 1.0),
    ]


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("0-8", "is out of range: the cluster has 8 devices (ranks 0-7)"),
        ("9", "is out of range"),
        ("0-3,2-5", "lists rank(s) twice"),
        ("3-1", "has the reversed range 3-1; write 1-3"),
        ("", "has an empty range"),
        ("0-1,", "has an empty range"),
        ("gpu0", "has 'gpu0', which is not a rank or a range a-b"),
        ("0-", "has '0-', which is not a rank or a range a-b"),
        ("0-2:0-3", "puts 4 processes on 3 devices: 3 must divide 4"),
        ("0-5:0-3", "spreads 4 processes over 6 devices: 4 must divide 6"),
        ("0-3:1-4", "must number its processes 0-3, in order"),
        ("1-4:0-1", "makes process 1 span devices [3, 4] on nodes [0, 1]"),
    ],
)
def test_each_rule_names_the_key_value_and_rule(value, rule):
    with pytest.raises(PlacementError) as caught:
        parse_value("actor", value, 8, 4)
    message = str(caught.value)
    assert message.startswith(f"cluster.component_placement.actor: {value!r} ")
    assert rule in message
    assert "\n" not in message


def test_fused_components_on_the_command_line_are_joined_by_plus(capsys):
    from rlcore.cli import main
    from rlcore.config import load_config
    from rlcore.placement import plan_for_config

    args = ["cluster.devices_per_node=4", "cluster.device=cpu"]
    plus = load_config(
        "reasoning/tiny_arith_ppo",
        [*args, "cluster.component_placement={actor+critic+ref:0-1,rollout+reward:2-3}"],
    )
    assert split_key("actor+critic+ref") == ["actor", "critic", "ref"]
    plan = plan_for_config(plus)
    assert [p.components for p in plan.processes()] == [
        ("actor", "critic"),
        ("actor", "critic"),
        ("rollout", "reward"),
        ("rollout", "reward"),
    ]
    assert "ref" in plan.skipped  # (placed with them, not used by this config: no KL)
    # the quoted form, which Hydra's override grammar refuses, says how to write it
    with pytest.raises(SystemExit):
        main(["placement", "reasoning/tiny_arith_ppo", 'cluster.component_placement={"a,b":0}'])
    assert "written actor+ref on the command line" in capsys.readouterr().err
