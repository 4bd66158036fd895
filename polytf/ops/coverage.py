"""The supported-op table, generated from the op table (for ``polytf ops`` and README.md),
and the ops the graph passes rewrite into others.

``python -m polytf.ops.coverage README.md`` rewrites the table between the README's
``<!-- supported ops -->`` and ``<!-- end supported ops -->`` markers; a test fails when the
committed table differs from the op table.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from polytf.ops.definition import CATEGORIES, CONTRACTION, ELEMENTWISE, NO_OUTPUT, REDUCTION, SOURCE, VIEW
from polytf.ops.table import lookup, supported_ops

__all__ = ["OpRow", "op_rows", "runs_as", "markdown_table", "rewrite_readme", "rewritten_ops", "BEGIN_MARKER", "END_MARKER"]

BEGIN_MARKER = "<!-- supported ops -->"
END_MARKER = "<!-- end supported ops -->"


@dataclass(frozen=True)
class OpRow:
    """One supported op.

    Attributes:
        op: TensorFlow op type.
        category: its :data:`~polytf.ops.definition.CATEGORIES` entry.
        dtypes: dtypes it takes in run-time tensors.
        compiled: it has a lowering (else it runs on the host through its numpy reference,
            or is folded when its inputs are constants).
        source: where its semantics come from.
    """

    op: str
    category: str
    dtypes: tuple[str, ...]
    compiled: bool
    source: str


def op_rows() -> list[OpRow]:
    """Every supported op, by category then name."""
    rows = []
    for op in supported_ops():
        definition = lookup(op)
        compiled = definition.lower is not None or definition.category not in (ELEMENTWISE, CONTRACTION, REDUCTION)
        rows.append(OpRow(op, definition.category, tuple(definition.dtypes), compiled, definition.source))
    order = {category: k for k, category in enumerate(CATEGORIES)}
    return sorted(rows, key=lambda row: (order.get(row.category, 99), row.op))


def runs_as(row: OpRow) -> str:
    """How the op's nodes run, in the words of README's table and ``polytf ops``."""
    if row.category == SOURCE:
        return "input / constant"
    if row.category in (VIEW, NO_OUTPUT):
        return "no code (view)"
    return "compiled" if row.compiled else "host (numpy reference)"


def markdown_table() -> str:
    """The table README.md carries: op, category, run-time dtypes, how it runs, source."""
    lines = ["| op | category | run-time dtypes | runs as | semantics from |", "|---|---|---|---|---|"]
    for row in op_rows():
        lines.append(f"| {row.op} | {row.category} | {', '.join(row.dtypes)} | {runs_as(row)} | {row.source} |")
    return "\n".join(lines)


def rewritten_ops() -> dict[str, str]:
    """The ops the graph passes rewrite into compiled ops (``OpDefinition.expand``), each
    with a note saying into what, by op type."""
    return {
        op: f"compiled as {definition.expand.result} (expansion pass)"
        for op in supported_ops()
        if (definition := lookup(op)).expand is not None
    }


def rewrite_readme(path: str | Path) -> bool:
    """Replace the table between the markers of ``path``; returns whether the file changed.

    Raises:
        ValueError: the markers are missing.
    """
    file = Path(path)
    text = file.read_text()
    if BEGIN_MARKER not in text or END_MARKER not in text:
        raise ValueError(f"{file} has no {BEGIN_MARKER} ... {END_MARKER} section")
    head, rest = text.split(BEGIN_MARKER, 1)
    _, tail = rest.split(END_MARKER, 1)
    updated = f"{head}{BEGIN_MARKER}\n{markdown_table()}\n{END_MARKER}{tail}"
    if updated != text:
        file.write_text(updated)
    return updated != text


if __name__ == "__main__":  # pragma: no cover
    target = sys.argv[1] if len(sys.argv) > 1 else "README.md"
    print(f"{target}: {'updated' if rewrite_readme(target) else 'already current'}")
