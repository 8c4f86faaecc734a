"""Multi-turn runs end to end on the tiny model: bad input refused before start in one line,
and a run whose trajectories hold several turns resumes bit for bit from a checkpoint."""

import json
import shutil

import pytest

from rlcore.config.errors import ConfigError
from rlcore.placement import plan_for_config
from rlcore.runners.preflight import preflight
from rlcore.runners.supervisor import build_runner
from tests.lm_fixtures import assert_resumed_like_unbroken, resumed_at_two, tiny_config

TOOLS = ("rollout.tools=[calculator]", "data.chat_template=true", "warmup.stop_at_accuracy=null")

AGAIN = """
class Again:
    def respond(self, messages, answer):
        turns = sum(m["role"] == "assistant" for m in messages)
        return "Again." if turns < 2 else None
"""


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("rollout.max_turns=0",), "rollout.max_turns"),
        (("rollout.tool_timeout_s=3",), "rollout.tool_timeout_s: set, but no rollout.tools"),
        ((*TOOLS, "rollout.tool_processes=100000"), "tool_processes: 100000 is out of range"),
        ((*TOOLS, "rollout.tool_call_regex='CALL (\\w+)'"), "no named group name or arguments"),
        (("rollout.tools=[python]", *TOOLS[1:]), "the tools are named python; add calculator"),
        (("rollout.tools=[calculator]", TOOLS[2]), "set data.chat_template=true"),
        (TOOLS[:2], "warmup.stop_at_accuracy: its check decodes one turn"),
        (("warmup.steps=0", "warmup.examples=8"), "warmup.examples: set, but no warm-up runs"),
    ],
)
def test_bad_multi_turn_settings_are_refused_by_the_config(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        tiny_config(tmp_path, tmp_path, *overrides)


MY_CALCULATOR = """
class MyCalculator:
    name = "{name}"
    description = "evaluates arithmetic"
    parameters = {{"type": "object", "properties": {{"{argument}": {{"type": "string"}}}}}}

    def call(self, arguments):
        return str(eval(arguments["{argument}"], {{}}))
"""


@pytest.mark.parametrize(
    "name, argument, refusal",
    [
        ("calculator", "expression", None),  # the user's own class, declared calculator
        ("calc", "expression", "the tools are named calc; add calculator (or a tool of yours"),
        ("calculator", "expr", "calls give calculator {'expression': ...}, and the parameters"),
    ],
)
def test_the_warm_up_tool_is_found_by_the_name_a_tool_declares(tmp_path, name, argument, refusal):
    (tmp_path / "mine.py").write_text(MY_CALCULATOR.format(name=name, argument=argument))
    mine = f"rollout.tools=[{tmp_path}/mine.py:MyCalculator]"
    config = tiny_config(tmp_path, tmp_path, mine, *TOOLS[1:])  # the config takes any class
    if refusal is None:
        preflight(config, plan_for_config(config))
        return
    with pytest.raises(ConfigError) as error:
        preflight(config, plan_for_config(config))
    assert refusal in str(error.value) and len(str(error.value).splitlines()) == 1


def test_bad_tools_and_a_model_without_a_chat_template_are_refused(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    (tmp_path / "tools.py").write_text(
        "class NoCall:\n    name = 'x'\n    description = 'd'\n    parameters = {'type': 'object'}"
    )
    no_call = f"rollout.tools=[{tmp_path}/tools.py:NoCall]"
    config = tiny_config(tmp_path, tmp_path, no_call, "warmup.steps=0")
    with pytest.raises(ConfigError, match="NoCall: no method call") as error:
        preflight(config, plan_for_config(config))
    assert len(str(error.value).splitlines()) == 1
    bare = tmp_path / "bare"
    shutil.copytree(dirs.actor, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    settings = json.loads((bare / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(settings))
    model = (f"actor.model.path={bare}", "warmup.steps=0")
    config = tiny_config(tmp_path, tmp_path, TOOLS[0], *model)
    with pytest.raises(ConfigError, match=r"has no chat template.*rollout\.tool_call_regex"):
        preflight(config, plan_for_config(config))
    regex = "rollout.tool_call_regex='CALL (?P<name>\\w+) (?P<arguments>\\{.*\\})'"
    config = tiny_config(tmp_path, tmp_path, TOOLS[0], *model, "data.chat_template=false", regex)
    preflight(config, plan_for_config(config))  # a regex: accepted


def test_a_multi_turn_run_resumes_bit_for_bit(tmp_path):
    (tmp_path / "again.py").write_text(AGAIN)
    cache = tmp_path / "cache"
    common = (
        *TOOLS,
        f"rollout.interaction={tmp_path}/again.py:Again",
        "rollout.tool_processes=1",
        "data.max_response_length=48",
        "warmup.steps=80",
        "warmup.lr=0.005",
        "runner.checkpoint_every=1",
        "algorithm.use_kl_in_reward=true",
    )
    config = tiny_config(
        cache, tmp_path, *common, "runner.total_iterations=3", "runner.run_name=full"
    )
    seen = []
    runner = build_runner(config, plan_for_config(config))
    iterate = runner.iterate
    runner.iterate = lambda i: seen.append(iterate(i)) or seen[-1]
    runner.run()
    # trajectories of several turns: a tool's answer or the interaction's reply between them
    assert all(m["num_turns/max"] >= 2 for m in seen)
    assert all(
        m["tools/calls_per_trajectory"] + m.get("interaction/replies_per_trajectory", 0) > 0
        for m in seen
    )
    resumed_at_two(cache, tmp_path, *common).run()
    assert_resumed_like_unbroken(tmp_path)


def test_the_config_knows_the_built_in_tools_the_tools_package_has():
    from rlcore.config.checks.reasoning import BUILT_IN_TOOLS
    from rlcore.tools.protocol import BUILT_INS

    assert sorted(BUILT_IN_TOOLS) == sorted(BUILT_INS)
