"""Writing a benchmark result as ``OUT.json`` (every raw number), ``OUT.md`` and ``OUT.png``
(per row, polytf against each baseline: on the CPU polytf time / baseline time, the CPU
report's one convention; on the GPU baseline time / polytf time), for either backend.

The result is a JSON-serialisable dict made by :func:`polytf.bench.runner.run_bench`:

* ``machine``: see :func:`polytf.bench.machine.describe_machine`; on the CPU plus
  ``baseline_blas`` (thread count -> BLAS libraries as the baseline process saw them),
  ``tensorflow``, ``fp32_peak`` (thread count -> :class:`polytf.bench.peak.PeakMeasurement`
  fields) and ``engines`` (OpenVINO's, ONNX Runtime's, tf2onnx's and onnx's versions,
  ``None``: not installed);
* ``settings``: entries, trials, rounds, repeats, warm-up calls, cache, time budget, command;
* ``rows``: on the CPU one per (entry, threads), with ``systems`` (system -> ``median_s`` and
  ``round_medians_s``, or ``error``; ``polytf`` is the tuned model, ``polytf_untuned`` the
  model with default recipes; the baselines ``numpy``, ``tensorflow``, ``xla``, ``openvino``,
  ``onnxruntime``), ``gflops`` and ``percent_of_peak`` per system, ``speedup``
  (baseline time / polytf time), ``ratio_to_tensorflow`` (polytf time / TF time, tuned and
  untuned), ``ratio_to_best_engine`` (the fastest of TF, XLA, OpenVINO and ONNX Runtime, its
  time, and polytf time / that time, tuned and untuned), ``baseline_max_abs_error_vs_numpy``
  and ``baseline_max_abs_error_vs_tensorflow`` (per baseline), ``tuning``, ``max_abs_error``
  and ``untuned_max_abs_error`` (vs numpy),
  ``max_abs_error_vs_tensorflow`` (tuned and untuned), ``profile``
  (:meth:`polytf.runtime.cpu.profile.ModelProfile.to_dict` of the tuned model) and
  ``convolutions`` (median % of peak of Conv2D kernels by filter size); or, for a row polytf
  could not build or tune, ``error``;
* ``notes``, ``interrupted``, ``failure``.

A GPU result (:mod:`polytf.bench.cuda_bench`) has ``"target": "cuda"`` and a ``device``; its
rows time ``polytf``, ``polytf_untuned``, ``polytf_call`` and a ``cublas`` or ``cudnn``
baseline, with ``tflops`` and ``percent_of_peak`` of the device's FP32 peak.

The JSON and the chart are the same for both; the Markdown, the terminal's summary table
and the names of failed rows are the target's :class:`~polytf.bench.report_format.ReportFormat`
(:data:`~polytf.bench.cpu_report.CPU_REPORT`, :data:`~polytf.bench.cuda_report.CUDA_REPORT`).
Times are seconds in the JSON and milliseconds in the Markdown.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.markup import escape

from polytf.bench.cpu_report import CPU_REPORT
from polytf.bench.cuda_report import CUDA_REPORT
from polytf.bench.report_format import BASELINE_LABELS, ReportFormat, first_line, summary_table

__all__ = ["REPORT_FORMATS", "report_format", "markdown", "write_chart", "write_report", "conclude_run"]

#: the target a result names (``"target"``; none: the CPU) -> how it is written
REPORT_FORMATS: dict[str, ReportFormat] = {"cpu": CPU_REPORT, "cuda": CUDA_REPORT}


def report_format(result: dict[str, Any]) -> ReportFormat:
    """The format of ``result``, by the target it names."""
    return REPORT_FORMATS[result.get("target", "cpu")]


def markdown(result: dict[str, Any], png_name: str | None = None) -> str:
    """The Markdown report of ``result`` (its target's format)."""
    return report_format(result).markdown(result, png_name)


def write_chart(result: dict[str, Any], path: Path) -> Path:
    """Bar chart (PNG, matplotlib's Agg backend): per row, baseline time / polytf time for each
    baseline (polytf time / baseline time where the format says so:
    :attr:`~polytf.bench.report_format.ReportFormat.chart_polytf_over_baseline`), on a log scale
    with a line at 1.0."""
    import matplotlib  # an optional dependency (polytf[bench]): imported when a chart is drawn
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inverse = report_format(result).chart_polytf_over_baseline
    rows = result.get("rows", [])
    systems = [s for s in BASELINE_LABELS if any(row.get("speedup", {}).get(s) for row in rows)]
    figure, axes = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) + 2.5), 4.5), dpi=110)
    width = 0.8 / max(1, len(systems))
    values_seen = [1.0]
    for index, system in enumerate(systems):
        positions, heights = [], []
        for position, row in enumerate(rows):
            value = row.get("speedup", {}).get(system)
            if value and math.isfinite(value) and value > 0:
                positions.append(position + (index - (len(systems) - 1) / 2) * width)
                heights.append(1 / value if inverse else value)
        values_seen += heights
        bars = axes.bar(positions, heights, width=width, label=f"vs {BASELINE_LABELS[system]}")
        # upright labels (a bar is narrower than "0.93" written across): neighbours never overlap
        axes.bar_label(bars, labels=[f"{h:.2f}" for h in heights], fontsize=7, padding=2, rotation=90)
    axes.axhline(1.0, color="black", linewidth=1)
    axes.set_yscale("log")
    plain = matplotlib.ticker.FormatStrFormatter("%g")  # 0.5, 1, 2 rather than 5x10^-1
    axes.yaxis.set_major_formatter(plain)
    # minor ticks labelled at 2 and 5 only (0.2, 0.5, 2, 5): every minor label crowded the axis
    axes.yaxis.set_minor_formatter(
        matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}" if round(value / 10 ** math.floor(math.log10(value))) in (2, 5) else "")
    )
    axes.set_ylim(min(values_seen) / 1.5, max(values_seen) * 2.0)  # room above the tallest bar for its label
    axes.set_xticks(
        range(len(rows)), [row["entry"] if row.get("target") == "cuda" else f"{row['entry']}\n{row['threads']} thr" for row in rows], fontsize=8, rotation=20, ha="right"
    )
    axes.set_ylabel(
        "polytf time / baseline time (below 1: polytf faster)" if inverse else "speedup of polytf (baseline time / polytf time)"
    )
    machine = result.get("machine", {})
    where = (
        f"{result['device'].get('name', '?')} ({result['device'].get('compute_capability', '?')})"
        if result.get("device")
        else f"{machine.get('cpu', '?')} ({machine.get('llvm_cpu', {}).get('name', '?')})"
    )
    axes.set_title(f"polytf bench on {where}, {str(machine.get('date', ''))[:10]}", fontsize=9)
    if systems:
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, never over them
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def write_report(result: dict[str, Any], out: str | Path) -> tuple[Path, Path, Path]:
    """Write ``OUT.json``, ``OUT.md`` and ``OUT.png`` (``out`` without suffix; folders are
    created) and return their paths."""
    base = Path(out)
    if base.suffix in (".md", ".json", ".png"):
        base = base.with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = (base.with_name(base.name + suffix) for suffix in (".json", ".md", ".png"))
    json_path.write_text(json.dumps(_finite(result), indent=2, default=_json_default, allow_nan=False) + "\n")
    write_chart(result, png_path)
    md_path.write_text(markdown(result, png_path.name))
    return md_path, json_path, png_path


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (strict JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def conclude_run(result: dict[str, Any], out: str | Path, code: int, console: Any, stdout: Any) -> int:
    """The end of a ``polytf bench`` run: write the report, print the summary table, say
    whether it was interrupted and which rows failed (named by the result's format).

    Args:
        code: the run's exit code so far (0, or 130 when interrupted).

    Returns:
        ``code``, or 1 when it was 0 and some rows failed.
    """
    report = report_format(result)
    paths = write_report(result, out)
    if result["rows"]:
        stdout.print(summary_table(report, result["rows"]))
    if code == 130:
        console.print(f"[yellow]interrupted: {len(result['rows'])} finished row(s) written[/]")
    stdout.print(f"wrote {', '.join(str(p) for p in paths)}")
    failed = [row for row in result["rows"] if row.get("error")]
    if failed and code == 0:
        console.print(
            f"[bold red]error:[/] {len(failed)} of {len(result['rows'])} row(s) failed: "
            + "; ".join(escape(f"{report.row_label(row)}: {first_line(row['error'])}") for row in failed),
            highlight=False,
        )
        code = 1
    return code
