"""How a bench report is written for one backend, and the cells both formats share.

A :class:`ReportFormat` is the Markdown of a result, the columns of its table (the same in
the Markdown and on the terminal) and the name of a row in messages:
:data:`polytf.bench.cpu_report.CPU_REPORT` and :data:`polytf.bench.cuda_report.CUDA_REPORT`;
:mod:`polytf.bench.report` writes every result (JSON, chart, Markdown) through the format
of its target.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table

__all__ = ["ReportFormat", "BASELINE_LABELS", "milliseconds", "plural", "first_line", "markdown_table", "summary_table"]

#: Column titles of the baselines (CPU, then GPU).
BASELINE_LABELS = {
    "numpy": "numpy",
    "tensorflow": "TF",
    "xla": "XLA",
    "openvino": "OpenVINO",
    "onnxruntime": "ORT",
    "cublas": "cuBLAS",
    "cudnn": "cuDNN",
}

#: ``columns(rows) -> [(title, row -> cell)]``
Columns = Callable[[list[dict[str, Any]]], list[tuple[str, Callable[[dict[str, Any]], str]]]]


@dataclass(frozen=True)
class ReportFormat:
    """How the results of one backend are written.

    Attributes:
        title: the title of the summary table printed at the end of a run.
        columns: the table's columns for these rows, as ``(title, row -> cell)``.
        markdown: ``markdown(result, png_name)``: the whole Markdown report.
        row_label: how a failed row is named in messages (``"mlp:64 (2 threads)"``).
        chart_polytf_over_baseline: the chart shows polytf time / baseline time (below 1:
            polytf faster), the report's ratios' convention; else baseline time / polytf time.
    """

    title: str
    columns: Columns
    markdown: Callable[[dict[str, Any], str | None], str]
    row_label: Callable[[dict[str, Any]], str]
    chart_polytf_over_baseline: bool = False


def milliseconds(seconds: float | None) -> str:
    """Seconds as milliseconds with three decimals (``"-"`` when there is no finite time)."""
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3f}"


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def first_line(message: str) -> str:
    """The first line of a (multi-line) error message, with a pointer to the rest in the JSON."""
    lines = str(message).strip().splitlines() or [""]
    return lines[0] + (f" (and {len(lines) - 1} more lines: see the JSON)" if len(lines) > 1 else "")


def markdown_table(columns: Columns, rows: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of ``rows``: a line per row (a placeholder line without rows)."""
    chosen = columns(rows)
    lines = ["| " + " | ".join(title for title, _ in chosen) + " |", "|" + "---|" * len(chosen)]
    lines += ["| " + " | ".join(cell(row) for _, cell in chosen) + " |" for row in rows]
    if not rows:
        lines.append("| (no finished rows) |" + " |" * (len(chosen) - 1))
    return lines


def summary_table(report: ReportFormat, rows: list[dict[str, Any]]) -> Table:
    """The report's table for the terminal."""
    table = Table(title=report.title)
    chosen = report.columns(rows)
    for title, _ in chosen:
        table.add_column(title, justify="left" if title == "entry" else "right")
    for row in rows:
        table.add_row(*(cell(row).replace("**", "") for _, cell in chosen))  # Markdown bold: plain here
    return table
