"""An op's facts live in its module under ``polytf/ops``: the graph passes, the lowering, the
schedules, the targets, the storage, the binding plan, the runtime, the compile driver, the
tuner, the export and the CLI read op traits and never name an op. A string literal equal to
an op type of the table there (docstrings aside) is a fact that escaped its op. (The frontend
and the graph IR name the GraphDef's structural nodes; the model zoo and the bench name the ops
they write or stand a library call in for.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import polytf
import polytf.autotune
import polytf.schedules
import polytf.targets
from polytf.ops import supported_ops

PACKAGE = Path(polytf.__file__).parent
#: the packages that read traits only
TRAIT_READERS = [
    *(PACKAGE / name for name in ("passes", "lowering", "storage", "plan", "runtime", "compiler", "export", "cli")),
    *(Path(package.__file__).parent for package in (polytf.schedules, polytf.targets, polytf.autotune)),
]


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
    return sorted(path for place in TRAIT_READERS for path in place.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda path: "/".join(path.parts[-2:]))
def test_no_op_name_literal_outside_the_op_modules(path):
    assert op_name_literals(path.read_text(), frozenset(supported_ops())) == []


def test_the_scan_finds_a_literal_but_not_a_docstring():
    source = '"""Folds ``Mul`` into ``Conv2D``."""\n\ndef f(node):\n    """Mul"""\n    return node.op == "Mul" or "Relu" in {"x"}\n'
    assert op_name_literals(source, frozenset({"Mul", "Relu", "Conv2D"})) == [(5, "Mul"), (5, "Relu")]
