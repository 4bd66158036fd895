"""The GPU check's report: ``gpu_check.json`` (everything, seconds) and ``gpu_check.md`` (the
same as tables, milliseconds), both rewritten after every step so that a run cut short leaves
a report of how far it got.

The JSON holds ``device``, ``versions``, ``steps`` (each step's status, seconds and detail),
``tests`` (each GPU test's outcome), ``rows`` (each bench row's record,
:func:`polytf.bench.gpu_check_rows.measure_row`) and ``planned_rows`` (every row it meant to
run), with the command, its start, elapsed seconds and whether it finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from polytf.bench.report_format import markdown_table, milliseconds

__all__ = ["write_report", "check_markdown", "JSON_NAME", "MARKDOWN_NAME"]

JSON_NAME = "gpu_check.json"
MARKDOWN_NAME = "gpu_check.md"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _device_line(device: dict[str, Any]) -> str:
    if not device:
        return "not read"
    text = (
        f"{device.get('name')} ({device.get('compute_capability')}, {device.get('multiprocessors')} SMs at "
        f"{device.get('clock_rate_khz', 0) / 1e3:.0f} MHz, FP32 peak {device.get('fp32_peak_tflops', 0):.1f} TFLOP/s without tensor cores"
    )
    if device.get("memory_gib"):
        text += f", {device['memory_gib']:.1f} GiB"
    text += f"); driver {device.get('driver_version')}, CUDA runtime {device.get('runtime_version')}"
    if device.get("cudnn_version"):
        text += f", cuDNN {device['cudnn_version']}"
    if device.get("emulated"):
        text += f"; **emulated** on the CPU ({device.get('emulated_on')}): times are CPU times"
    return text


def _format(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _bench_columns(peak_tflops: float):
    """The bench table's columns, as ``(title, row -> cell)`` (:func:`markdown_table`)."""

    def throughput(row: dict[str, Any]) -> float | None:
        flops, seconds = row.get("flops"), row.get("polytf_s")
        return flops / seconds / 1e12 if flops and seconds else None

    def percent(row: dict[str, Any]) -> str:
        tflops = throughput(row)
        return f"{100 * tflops / peak_tflops:.1f}%" if tflops is not None and peak_tflops else "-"

    def columns(rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        return [
            ("row", lambda row: _cell(row["row"])),
            ("status", lambda row: row["status"]),
            ("kernels", lambda row: str(row.get("kernels", "-"))),
            ("compile s", lambda row: _format(row.get("compile_s"), ".1f")),
            ("polytf ms", lambda row: milliseconds(row.get("polytf_s"))),
            ("TFLOP/s", lambda row: _format(throughput(row), ".2f")),
            ("% FP32 peak", percent),
            ("baseline", lambda row: _cell(row.get("baseline", {}).get("system", "-"))),
            ("baseline ms", lambda row: milliseconds(row.get("baseline", {}).get("median_s"))),
            ("baseline / polytf", lambda row: _format(row.get("baseline_over_polytf"), ".2f")),
            ("max abs err", lambda row: _format(row.get("max_abs_error"), ".2e")),
        ]

    return columns


def _bench_lines(report: dict[str, Any]) -> list[str]:
    peak = float(report.get("device", {}).get("fp32_peak_tflops") or 0)
    lines = markdown_table(_bench_columns(peak), report.get("rows", []))
    notes: list[str] = []
    unmeasured: dict[str, list[str]] = {}  # a baseline's note -> the rows it was not timed in
    for row in report.get("rows", []):
        baseline = row.get("baseline", {})
        if row.get("error"):
            notes.append(f"- {row['row']}: **{row['status']}**: {_first_line(row['error'], 400)}")
        if baseline.get("note") and not baseline.get("median_s"):
            unmeasured.setdefault(baseline["note"], []).append(row["row"])
    for note, labels in unmeasured.items():
        notes.append(f"- baseline {note}: " + ("every row" if len(labels) == len(report["rows"]) else ", ".join(labels)))
    rows = {row["row"] for row in report.get("rows", [])}
    not_run = [label for label in report.get("planned_rows", []) if label not in rows]
    if not_run:
        notes.append(f"- not run ({report.get('stopped') or 'cut short'}): {', '.join(not_run)}")
    return lines + [""] + notes


def _test_lines(tests: dict[str, Any]) -> list[str]:
    if not tests:
        return ["not run"]
    lines = [f"`{tests.get('command', '')}`: {tests.get('summary', '')} (exit {tests.get('returncode')})", ""]
    outcomes = tests.get("outcomes", [])
    if outcomes:
        lines += ["| test | outcome | s | message |", "|---|---|---|---|"]
        lines += [
            f"| {_cell(t['test'])} | {t['outcome']} | {t.get('seconds', 0):.2f} | {_cell(_first_line(t.get('message', '')))} |" for t in outcomes
        ]
    return lines


def check_markdown(report: dict[str, Any]) -> str:
    """The Markdown of a GPU check report (module docstring)."""
    device = report.get("device", {})
    versions = ", ".join(f"{name} {version}" for name, version in report.get("versions", {}).items() if version)
    state = "finished" if report.get("finished") else f"**cut short** ({report.get('stopped') or 'still running or killed'})"
    lines = [
        f"# polytf GPU check{' (dry run)' if report.get('dry_run') else ''}: {device.get('name', '?')}",
        "",
        f"**Device:** {_device_line(device)}.",
        "",
        f"**Versions:** {versions or 'not read'}.",
        "",
        f"**Run:** {report.get('started')}, commit `{report.get('commit') or 'unknown'}`; `{report.get('command')}`; "
        f"{report.get('elapsed_s', 0):.0f} s of a {report.get('time_limit_s', 0):.0f} s limit, {state}.",
        "",
        "## Steps",
        "",
        "| step | status | s | detail |",
        "|---|---|---|---|",
    ]
    lines += [f"| {s['step']} | {s['status']} | {s.get('seconds', 0):.1f} | {_cell(_first_line(s.get('detail', ''), 300))} |" for s in report.get("steps", [])]
    lines += ["", "## GPU tests", ""] + _test_lines(report.get("tests", {}))
    lines += [
        "",
        "## Bench",
        "",
        "Default GPU recipes (untuned). Each output is checked against the CPU reference (numpy, float64 accumulation; "
        "rtol 1e-4, atol 1e-5 x max|reference| + 1e-6) before anything is timed. *polytf ms*: the model's kernels, CUDA events "
        "from the first kernel's start to the last one's end, median of the runs after warm-up; the baseline likewise "
        "(cuBLAS through `cupy.matmul`, cuDNN through PyTorch, or the same model in PyTorch; FP32, TF32 off). "
        "*baseline / polytf* above 1: polytf faster.",
        "",
    ]
    lines += _bench_lines(report)
    for row in report.get("rows", []):
        if row.get("slowest_kernels"):
            kernels = ", ".join(f"{k['kernel']} {milliseconds(k['median_s'])} ms" for k in row["slowest_kernels"])
            lines.append(f"- {row['row']}: slowest kernels alone: {kernels}")
    return "\n".join(lines) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def write_report(report: dict[str, Any], folder: Path) -> None:
    """Write ``gpu_check.json`` and ``gpu_check.md`` into ``folder`` (each replaced whole)."""
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomically(folder / JSON_NAME, json.dumps(report, indent=1, default=str) + "\n")
    _write_atomically(folder / MARKDOWN_NAME, check_markdown(report))
