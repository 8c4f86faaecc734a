"""The built-in ``calculator`` tool: exact arithmetic on a parsed expression, never ``eval``.

Numbers (integers and decimals) and ``+ - * / // % **`` with parentheses and unary signs are
read from Python's ``ast``; anything else (names, calls, attributes, strings) is refused. Every
value is a ``fractions.Fraction``, so ``0.1 + 0.2`` is ``3/10`` exactly; the answer is an integer,
or a decimal when it has a finite one of at most 30 digits, else ``p/q``. Powers and sizes are
bounded so that no expression takes long (``9**9**9`` is refused, not computed).
"""

from __future__ import annotations

import ast
from fractions import Fraction
from typing import Any, ClassVar

MAX_EXPONENT = 1000
MAX_DIGITS = 2000  # of any intermediate numerator or denominator
MAX_LENGTH = 1000  # characters of the expression


class CalculatorError(ValueError):
    """An expression the calculator does not evaluate: the message says why."""


class Calculator:
    name = "calculator"
    description = (
        "Evaluate an arithmetic expression exactly: numbers, + - * / // % ** and parentheses."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "the arithmetic expression, e.g. '1234 * (56 - 7) / 3'",
            }
        },
        "required": ["expression"],
    }

    def call(self, arguments: dict[str, Any]) -> str:
        return evaluate(str(arguments["expression"]))


def evaluate(expression: str) -> str:
    """``expression``'s exact value as text (see the module docstring)."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    return _text(_value(tree.body))


def _text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    places = max(twos, fives)
    if denominator == 1 and places <= 30:  # a finite decimal: write it exactly
        scaled = abs(value.numerator) * (10**places // value.denominator)
        digits = str(scaled).rjust(places + 1, "0")
        sign = "-" if value < 0 else ""
        return f"{sign}{digits[:-places]}.{digits[-places:]}".rstrip("0").rstrip(".")
    return f"{value.numerator}/{value.denominator}"


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_DIGITS * 3.33:
        raise CalculatorError(f"a number of more than {MAX_DIGITS} digits")
    return value


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
        return _bounded(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return _bounded(left + right)
        if isinstance(op, ast.Sub):
            return _bounded(left - right)
        if isinstance(op, ast.Mult):
            return _bounded(left * right)
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise CalculatorError("division by zero")
            if isinstance(op, ast.Div):
                return _bounded(left / right)
            return _bounded(
                Fraction(left // right) if isinstance(op, ast.FloorDiv) else left % right
            )
        if isinstance(op, ast.Pow):
            if right.denominator != 1:
                raise CalculatorError("only whole-number exponents are exact")
            if abs(right) > MAX_EXPONENT:
                raise CalculatorError(f"an exponent above {MAX_EXPONENT}")
            if left == 0 and right < 0:
                raise CalculatorError("division by zero")
            if left.numerator.bit_length() * abs(int(right)) > MAX_DIGITS * 3.33 + 64:
                raise CalculatorError(f"a number of more than {MAX_DIGITS} digits")
            return _bounded(left ** int(right))
    what = type(node).__name__
    raise CalculatorError(f"only numbers and + - * / // % ** are allowed (found {what})")
