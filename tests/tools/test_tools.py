"""The tool plug-ins: the calculator's exact arithmetic, the call parser on malformed, nested
and partial calls, the protocol checks, and the python interpreter's limits, each ending in a
counted tool error from the pool (never in the run's process)."""

import sys
from pathlib import Path

import pytest

from rlcore.config.errors import ConfigError
from rlcore.tools.calculator import CalculatorError, evaluate
from rlcore.tools.calls import Call, CallParser, hermes_calls
from rlcore.tools.pool import ToolPool
from rlcore.tools.protocol import load_interaction, load_tools


@pytest.mark.parametrize(
    "expression, value",
    [
        ("1234 * 5678", "7006652"),  # 1234 * 5678 = 7,006,652
        ("0.1 + 0.2", "0.3"),  # exact, not 0.30000000000000004
        ("7 / 3", "7/3"),
        ("1 / 8", "0.125"),
        ("-2 ** 3", "-8"),
        ("(1 + 2) * -3", "-9"),
        ("10 // 3 + 10 % 3", "4"),
        ("2 ** -2", "0.25"),
        ("99999999999 * 99999999999", "9999999999800000000001"),
    ],
)
def test_the_calculator_is_exact(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('ls')",
        "x + 1",
        "'a' * 3",
        "9 ** 9 ** 9",
        "1 / 0",
        "2 ** 0.5",
        "1 +",
    ],
)
def test_the_calculator_refuses_what_is_not_bounded_arithmetic(expression):
    with pytest.raises(CalculatorError):
        evaluate(expression)


def test_hermes_calls_in_order_with_string_arguments():
    text = (
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}'
        "</tool_call> and <tool_call>\n"
        '{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}\n</tool_call>'
    )
    assert hermes_calls(text) == [
        Call("calculator", {"expression": "2+2"}),
        Call("python", {"code": "print(1)"}),
    ]
    assert hermes_calls("no call here") == []


@pytest.mark.parametrize(
    "text, why",
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>', "not JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "needs a 'name'"),
        ('<tool_call>{"name": "c", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
        ('<tool_call>["calculator"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "calculator", "arguments": {}', "never closed"),  # partial
        ('<tool_call><tool_call>{"name": "c", "arguments": {}}</tool_call></tool_call>', "inside"),
    ],
)
def test_malformed_nested_and_partial_calls_are_errors_not_crashes(text, why):
    (call,) = hermes_calls(text)
    assert call.error is not None and why in call.error


def test_a_regex_finds_calls_in_another_format():
    parser = CallParser(r"CALL (?P<name>\w+)\((?P<arguments>\{.*?\})\)")
    assert parser.parse('x CALL calculator({"expression": "3*4"}) y CALL f({bad})') == [
        Call("calculator", {"expression": "3*4"}),
        Call("", error=parser.parse("CALL f({bad})")[0].error),
    ]
    assert "not JSON" in parser.parse("CALL f({bad})")[0].error


def write(tmp_path, source):
    path = tmp_path / "my_tools.py"
    path.write_text(source)
    return str(path)


GOOD = """
class Echo:
    name = "echo"
    description = "says it back"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}
    def call(self, arguments):
        return arguments["text"]
"""


HEAD = "class Echo:\n    name = 'echo'\n    description = 'd'\n"
CALL = "    def call(self, a):\n        return ''\n"


@pytest.mark.parametrize(
    "body, message",
    [
        (HEAD + "    parameters = {'type': 'object'}\n", "no method call"),
        ("class Echo:\n    name = 3\n", "'name' must be a string"),
        (HEAD + "    parameters = {'type': 'string'}\n" + CALL, '"type": "object"'),
        (
            HEAD + "    parameters = {'type': 'object', 'properties': 3}\n" + CALL,
            "not a valid JSON",
        ),
        ("class Echo:\n    def __init__(self, x):\n        pass\n", "built with no arguments"),
    ],
)
def test_a_class_that_breaks_the_protocol_is_refused_in_one_line(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError, match=r"rollout\.tools: ") as error:
        load_tools([f"{path}:Echo"])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_duplicate_names_and_missing_classes_are_refused(tmp_path):
    path = write(tmp_path, GOOD + "\nclass Again(Echo):\n    pass\n")
    assert list(load_tools([f"{path}:Echo", "calculator"])) == ["echo", "calculator"]
    with pytest.raises(ConfigError, match="both named 'echo'"):
        load_tools([f"{path}:Echo", f"{path}:Again"])
    with pytest.raises(ConfigError, match="defines no class 'Nope'"):
        load_tools([f"{path}:Nope"])
    with pytest.raises(ConfigError, match="not 'module:Class'"):
        load_tools(["calculator2"])
    with pytest.raises(ConfigError, match="no method respond"):
        load_interaction(f"{path}:Echo")


LIMITS = {
    "infinite loop": ("while True: pass", "timed out after 2 s"),
    "memory bomb": ("x = bytearray(8 << 30)", "MemoryError"),
    "network": ("import socket; socket.create_connection(('10.0.0.1', 80), 1)", "unreachable"),
    # The sandbox sees no host folder (more escapes: tests/tools/test_python_sandbox.py).
    "write outside": (f"open({sys.prefix!r} + '/planted.txt', 'w').write('x')", "No such file"),
}


def test_the_interpreters_limits_end_in_counted_errors_and_the_pool_goes_on(tmp_path):
    path = write(
        tmp_path,
        "from rlcore.tools.python import PythonInterpreter\n"
        "class Quick(PythonInterpreter):\n    timeout_s = 2.0\n",
    )
    pool = ToolPool((f"{path}:Quick",), None, processes=2, timeout_s=10.0)
    try:
        cases = list(LIMITS.values())
        calls = [Call("python", {"code": code}) for code, _ in cases]
        calls.append(Call("python", {"code": "open('mine.txt', 'w').write('ok'); print(6 * 7)"}))
        results = pool.call(calls)
        for (name, (_, said)), result in zip(LIMITS.items(), results, strict=False):
            assert result.error and said in result.text, (name, result.text)
        assert not results[-1].error and results[-1].text == "42\n"  # its own folder: allowed
        assert not (Path(sys.prefix) / "planted.txt").exists()
    finally:
        pool.close()


def test_a_call_past_the_pools_deadline_is_a_counted_timeout(tmp_path):
    path = write(
        tmp_path,
        "import time\nclass Slow:\n    name = 'slow'\n    description = 'd'\n"
        "    parameters = {'type': 'object'}\n"
        "    def call(self, arguments):\n        time.sleep(60)\n",
    )
    pool = ToolPool((f"{path}:Slow", "calculator"), None, processes=1, timeout_s=1.0)
    try:
        slow, bad, unknown, right = pool.call(
            [
                Call("slow", {}),
                Call("calculator", {"expr": "1"}),
                Call("nope", {}),
                Call("calculator", {"expression": "6*7"}),
            ]
        )
        assert slow.timed_out and slow.error and "took over 1 s" in slow.text
        assert bad.error and "'expression' is a required property" in bad.text
        assert unknown.error and "unknown tool 'nope'" in unknown.text
        assert (right.text, right.error) == ("42", False)
    finally:
        pool.close()
