"""An op's facts live in its module under ``polytf/ops``: the graph passes, the lowering, the
binding plan and the runtime read op traits and never name an op. A string literal equal to an
op type of the table there (docstrings aside) is a fact that escaped its op."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import polytf
import polytf.autotune
from polytf.ops import supported_ops

PACKAGE = Path(polytf.__file__).parent
#: the packages (and modules) that read traits only
TRAIT_READERS = [PACKAGE / "passes", PACKAGE / "lowering", PACKAGE / "plan", PACKAGE / "runtime", Path(polytf.autotune.__file__).parent / "task_scheduler.py"]


def op_name_literals(source: str, ops: frozenset[str]) -> list[tuple[int, str]]:
    """``(line, literal)`` of every string constant of ``source`` equal to one of ``ops``, docstrings aside."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ops and id(node) not in docstrings
    )


def _modules() -> list[Path]:
    return sorted(path for place in TRAIT_READERS for path in ([place] if place.is_file() else place.rglob("*.py")))


@pytest.mark.parametrize("path", _modules(), ids=lambda path: path.relative_to(PACKAGE.parent).as_posix())
def test_no_op_name_literal_outside_the_op_modules(path):
    assert op_name_literals(path.read_text(), frozenset(supported_ops())) == []


def test_the_scan_finds_a_literal_but_not_a_docstring():
    source = '"""Folds ``Mul`` into ``Conv2D``."""\n\ndef f(node):\n    """Mul"""\n    return node.op == "Mul" or "Relu" in {"x"}\n'
    assert op_name_literals(source, frozenset({"Mul", "Relu", "Conv2D"})) == [(5, "Mul"), (5, "Relu")]
