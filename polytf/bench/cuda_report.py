"""The Markdown of a GPU bench result (``polytf bench --target cuda``, :mod:`polytf.bench.cuda_bench`).

The device and its FP32 peak, one table row per entry (ms, TFLOP/s, % of peak, the
baseline's ms and the ratio), then a section per row with its accuracy, tuning and
per-kernel times. Times are seconds in the JSON and milliseconds here.
"""

from __future__ import annotations

import math
from typing import Any

from polytf.bench.machine import machine_summary
from polytf.bench.report_format import BASELINE_LABELS, ReportFormat, first_line, markdown_table, milliseconds, plural

__all__ = ["CUDA_REPORT", "cuda_markdown", "columns", "device_summary", "BASELINE_TITLES"]

#: Column titles of the GPU baselines.
BASELINE_TITLES = {system: BASELINE_LABELS[system] for system in ("cublas", "cudnn")}


def _number(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _tflops(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def _percent(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}%"


def _system_ms(row: dict[str, Any], system: str) -> str:
    return milliseconds((row.get("systems", {}).get(system) or {}).get("median_s"))


def _baseline_system(row: dict[str, Any]) -> str | None:
    return next((s for s in BASELINE_TITLES if s in row.get("systems", {})), None)


def columns(rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Table columns as ``(title, row -> cell)``."""

    def baseline_ms(row):
        system = _baseline_system(row)
        return f"{_system_ms(row, system)} ({BASELINE_TITLES[system]})" if system else "-"

    def baseline_percent(row):
        system = _baseline_system(row)
        return _percent(row.get("percent_of_peak", {}).get(system)) if system else "-"

    return [
        ("entry", lambda row: row["entry"]),
        ("polytf ms", lambda row: "**failed**" if row.get("error") else _system_ms(row, "polytf")),
        ("untuned ms", lambda row: _system_ms(row, "polytf_untuned")),
        ("call ms", lambda row: _system_ms(row, "polytf_call")),
        ("polytf TFLOP/s", lambda row: _tflops(row.get("tflops", {}).get("polytf"))),
        ("% FP32 peak", lambda row: _percent(row.get("percent_of_peak", {}).get("polytf"))),
        ("baseline ms", baseline_ms),
        ("baseline % peak", baseline_percent),
        ("baseline / polytf", lambda row: _number(row.get("speedup", {}).get("best_baseline"))),
        ("max abs err", lambda row: _number(row.get("max_abs_error"), ".2e") if "max_abs_error" in row else "-"),
    ]


def device_summary(device: dict[str, Any]) -> str:
    """``"NVIDIA H100 80GB HBM3 (sm_90, 132 SMs at 1980 MHz): FP32 peak 66.9 TFLOP/s (no tensor cores)"``."""
    clock_mhz = device.get("clock_rate_khz", 0) / 1e3
    return (
        f"{device.get('name', '?')} ({device.get('compute_capability', '?')}, {device.get('multiprocessors', '?')} SMs at {clock_mhz:.0f} MHz): "
        f"FP32 peak {device.get('fp32_peak_tflops', 0):.1f} TFLOP/s (SMs x FP32 lanes x 2 x clock, no tensor cores); "
        f"driver {device.get('driver_version', '?')}, CUDA runtime {device.get('runtime_version', '?')}; {device.get('backend', '')}"
    )


def cuda_markdown(result: dict[str, Any], png_name: str | None = None) -> str:
    """The Markdown report of a GPU result (module docstring)."""
    device = result.get("device", {})
    settings = result.get("settings", {})
    machine = result.get("machine", {})
    rows = result.get("rows", [])
    budget = settings.get("time_budget_s")
    trials = settings.get("trials_per_kernel")
    lines = [
        "# polytf bench --target cuda",
        "",
        f"**Device:** {device_summary(device)}.",
        "",
        f"**Host:** {machine_summary(machine)}. **Run:** {machine.get('date')}, polytf {machine.get('polytf')}"
        + (f" (commit `{machine['commit']}`)" if machine.get("commit") else "")
        + f"; `{settings.get('command', '')}`.",
        "",
        (
            f"polytf tuned within a time budget of {budget:g} s per model"
            if budget
            else ("polytf untuned (default GPU recipes): --trials 0" if trials == 0 else f"polytf tuned with {trials or 20} trials per kernel")
        )
        + f" ({settings.get('cache')}). Each time is the median of {settings.get('rounds')} round medians of "
        f"{settings.get('repeats')} timed runs after {settings.get('warmup')} untimed ones, rounds alternating between systems. "
        "*polytf* and *untuned* are the model's kernels timed with CUDA events from the first kernel's start to the last one's end "
        "(inputs already on the device); *call* is a whole `model(**cupy_arrays)` by the wall clock, until the device is idle "
        "(the runtime's Python between launches included). TFLOP/s counts the contractions (2 FLOPs per multiply-add); "
        "% FP32 peak is of the device's FP32 peak above. Baselines (same device, FP32, TF32 off): cuBLAS through `cupy.matmul` "
        "for a MatMul, cuDNN through PyTorch for a convolution; models of several layers have none.",
        "",
    ]
    lines += markdown_table(columns, rows)
    lines.append("")
    lines += [f"- {row['entry']}: **failed**: {first_line(row['error'])}" for row in rows if row.get("error")]
    lines += [f"- {note}" for note in result.get("notes", [])]
    if result.get("interrupted"):
        lines.append("- **Interrupted**: only the rows above finished.")
    if result.get("failure"):
        lines.append(f"- **Stopped by an error**: {result['failure']}")
    if png_name and any(row.get("speedup") for row in rows):
        lines += ["", f"![baseline time / polytf time]({png_name})"]
    for row in rows:
        if not row.get("error"):
            lines += [""] + _row_section(row)
    return "\n".join(lines) + "\n"


def _row_section(row: dict[str, Any]) -> list[str]:
    tuning = row.get("tuning", {})
    lines = [
        f"## {row['entry']}",
        "",
        f"- {plural(row.get('kernels', 0), 'kernel')}"
        + (f", {len(row['host_nodes'])} node(s) on the host" if row.get("host_nodes") else "")
        + (f"; {row['flops'] / 1e9:.3g} GFLOP per call." if row.get("flops") else "."),
        f"- Max abs error vs {row.get('reference', 'the reference')}: tuned {_number(row.get('max_abs_error'), '.2e')}, "
        f"untuned {_number(row.get('untuned_max_abs_error'), '.2e')} (rtol 1e-4, atol 1e-5 x max|reference| + 1e-6).",
        f"- Baseline: {row.get('baseline', '-')}"
        + (f": {row['systems'][s]['label']}" if (s := _baseline_system(row)) and row["systems"][s].get("label") else "")
        + ".",
        f"- Tuning: {tuning.get('wall_s', 0):.1f} s, {tuning.get('new_trials', 0)} new trials ({tuning.get('failed_trials', 0)} failed).",
    ]
    profile = sorted(row.get("kernel_profile", []), key=lambda k: -k["median_s"])
    if profile:
        lines += [
            "",
            f"<details><summary>{plural(len(profile), 'kernel')} alone, slowest first (device ms, TFLOP/s, % FP32 peak, launch, recipe)</summary>",
            "",
            "| kernel | ops | ms | TFLOP/s | % peak | grid | block | shared bytes | recipe |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for kernel in profile:
            ops = "+".join(op for _, op in kernel["ops"])
            lines.append(
                f"| {kernel['kernel']} | {ops} | {milliseconds(kernel['median_s'])} | {_tflops(kernel.get('tflops'))} | {_percent(kernel.get('percent_of_peak'))} | "
                f"{'x'.join(map(str, kernel['grid']))} | {'x'.join(map(str, kernel['block']))} | {kernel['shared_memory_bytes']} | {kernel['recipe']} |"
            )
        lines += ["", "</details>"]
    return lines


#: how a GPU result is written
CUDA_REPORT = ReportFormat(
    title="polytf bench --target cuda (baseline / polytf above 1: polytf faster)",
    columns=columns,
    markdown=cuda_markdown,
    row_label=lambda row: row["entry"],
)
