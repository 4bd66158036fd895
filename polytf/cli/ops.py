"""``polytf ops``: the TensorFlow ops polytf supports, or how each op of a model runs.

Without ``--model``: every supported op, its category, run-time dtypes and whether it is
compiled or runs on the host (:func:`polytf.ops.coverage.op_rows`). With ``--model``: each
op of the model, its node count in the file and after the graph passes, and whether it is
compiled, runs on the host (and why) or is unsupported
(:func:`polytf.compiler.op_coverage.model_op_coverage`); exit status 1 when some op is
unsupported.
"""

from __future__ import annotations

import argparse

from rich.table import Table

from polytf.cli.console import stdout
from polytf.cli.model_options import model_source
from polytf.compiler.op_coverage import model_op_coverage
from polytf.errors import UnsupportedOpError
from polytf.ops.coverage import op_rows

__all__ = ["execute"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf ops``; returns the exit status."""
    if arguments.model:
        return show_model_coverage(arguments)
    table = Table(title="ops polytf supports")
    for column in ("op", "category", "run-time dtypes", "runs as"):
        table.add_column(column)
    for row in op_rows():
        how = "compiled" if row.compiled else "host (numpy reference)"
        table.add_row(row.op, row.category, ", ".join(row.dtypes), how)
    stdout.print(table)
    return 0


def show_model_coverage(arguments: argparse.Namespace) -> int:
    """Each op of the model after the graph passes: node counts and compiled / host (why) /
    unsupported; ops folded away or rewritten by the passes are listed as such.

    Raises:
        SystemExit: the passes leave a node that cannot be compiled.
    """
    try:
        coverage = model_op_coverage(model_source(arguments))
    except UnsupportedOpError as error:
        raise SystemExit(f"error: {error}") from None
    table = Table(title=f"ops of {arguments.model}")
    for column in ("op", "nodes in the file", "after the graph passes", "note"):
        table.add_column(column)
    for row in coverage.ops:
        after = ", ".join(f"{count} {status}" for status, count in row.after_passes.items()) or row.fate
        table.add_row(row.op, str(row.nodes_in_file), after, row.note)
    stdout.print(table)
    return 1 if coverage.unsupported_ops else 0
