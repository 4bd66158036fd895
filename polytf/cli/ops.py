"""``polytf ops``: the TensorFlow ops polytf supports, or how each op of a model runs.

Without ``--model``: every supported op, its category, run-time dtypes and how its nodes run
(:func:`polytf.ops.coverage.runs_as`: compiled, on the host, input / constant, no code). With
``--model``: per op of the model, its nodes in the file (and those the graph passes made) and
how many are compiled, on the host, no code, rewritten by which pass, unsupported or not
reached, with the reasons (:func:`polytf.compiler.op_coverage.model_op_coverage`); then one
``error:`` line on stderr per problem (an unsupported op, a node shape inference rejects, each
naming its node) and exit status 1 when the model cannot be compiled as it is.
"""

from __future__ import annotations

import argparse
from collections import Counter

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from polytf.cli.console import console, stdout
from polytf.cli.model_options import model_source
from polytf.compiler.op_coverage import STATUSES, ModelCoverage, OpCoverage, model_op_coverage
from polytf.errors import PolytfError
from polytf.ops.coverage import op_rows, runs_as

__all__ = ["execute"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf ops``; returns the exit status."""
    if arguments.model:
        return show_model_coverage(arguments)
    table = Table(title="ops polytf supports")
    for column in ("op", "category", "run-time dtypes", "runs as"):
        table.add_column(column)
    for row in op_rows():
        table.add_row(row.op, row.category, ", ".join(row.dtypes), runs_as(row))
    stdout.print(table)
    return 0


def show_model_coverage(arguments: argparse.Namespace) -> int:
    """Print how each op of the model runs (module docstring); returns 1 when some node is
    unsupported or not reached, else 0.

    Raises:
        SystemExit: the model file cannot be read (nothing to report on).
    """
    try:
        coverage = model_op_coverage(model_source(arguments), fallback=arguments.fallback)
    except PolytfError as error:
        raise SystemExit(f"error: {error}") from None
    table = Table(title=f"ops of {arguments.model}")
    for column in ("op", "nodes", "how they run", "why"):
        table.add_column(column)
    for row in coverage.ops:
        how = ", ".join(f"{count} {label}" for label, count in row.statuses.items())
        table.add_row(Text(row.op), Text(node_counts(row)), Text(how), Text("; ".join(row.reasons)))
    stdout.print(table)
    stdout.print(summary(coverage), markup=False, highlight=False, soft_wrap=True)
    for error in coverage.errors:
        console.print(f"[bold red]error:[/] {escape(error)}", highlight=False, soft_wrap=True)
    return 0 if coverage.compiles else 1


def node_counts(row: OpCoverage) -> str:
    """``"3"``, or ``"0 + 2 made by op expansion"`` for nodes the graph passes made."""
    made = ", ".join(f"{count} made by {pass_name}" for pass_name, count in row.made_by_passes.items())
    return f"{row.nodes_in_file} + {made}" if made else str(row.nodes_in_file)


def summary(coverage: ModelCoverage) -> str:
    """One line: the file's nodes by status, e.g. ``"12 nodes in the file: 5 compiled, 7 no code"``."""
    counts = Counter(node.status for node in coverage.nodes if not node.made_by)
    parts = [f"{counts[status]} {status}" for status in STATUSES if counts[status]]
    return f"{sum(counts.values())} nodes in the file: {', '.join(parts)}"
