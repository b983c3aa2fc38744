"""Ready-made tools for demos and tests."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

from runnertrace.runners.native.tools import FunctionTool

__all__ = ["calculator", "evaluate_arithmetic"]

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}


def evaluate_arithmetic(expression: str) -> int | float:
    """Evaluate + - * / ** % over numbers, without ``eval`` (only arithmetic nodes)."""

    def visit(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return visit(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = visit(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](visit(node.left), visit(node.right))
        raise ValueError(f"unsupported expression: {ast.unparse(node)!r}")

    result = visit(ast.parse(expression, mode="eval"))
    return int(result) if float(result).is_integer() else result


def _calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression, e.g. "1234 * 5678". Supports + - * / ** %.
    """
    return str(evaluate_arithmetic(expression))


calculator = FunctionTool(_calculator, name="calculator")
