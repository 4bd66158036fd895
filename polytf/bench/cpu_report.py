"""The Markdown of a CPU bench result (``polytf bench``, :mod:`polytf.bench.cpu_bench`).

The machine and its measured peak, one main table (a line per entry and thread count), then
a section per row: the profile totals, accuracy, tuning, and its convolution layers. Times
are seconds in the JSON and milliseconds here. Every ratio in the Markdown is polytf's time
over another system's (:data:`RATIO_CONVENTION`, stated once under the table): *best engine*
is the fastest of TensorFlow, XLA, OpenVINO and ONNX Runtime on the row
(:func:`polytf.bench.engines.ratio_to_best_engine`).
"""

from __future__ import annotations

import math
from typing import Any

from polytf.bench.engines import ENGINES, NOT_INSTALLED, PACKAGES, ratio_to_best_engine
from polytf.bench.machine import describe_blas, machine_summary
from polytf.bench.report_format import BASELINE_LABELS, ReportFormat, first_line, markdown_table, milliseconds, plural
from polytf.runtime.cpu.profile import DEPTHWISE, POSSIBLE_PERCENT_OF_PEAK

__all__ = [
    "CPU_REPORT",
    "RATIO_CONVENTION",
    "cpu_markdown",
    "columns",
    "peak_summary",
    "row_section",
    "format_gflops",
    "best_engine",
    "engines_note",
]

#: The one convention of the report's ratios.
RATIO_CONVENTION = (
    "Every ratio is polytf's time / the other system's time: below 1 polytf is faster, above 1 slower. "
    "*best engine* is the fastest of TensorFlow, XLA, OpenVINO (f32) and ONNX Runtime on the row "
    "(numpy is the reference, not an engine)."
)


def _ms(system: dict[str, Any] | None) -> str:
    return milliseconds((system or {}).get("median_s"))


def _ratio(value: float | None, spec: str = ".2f") -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return format(value, spec) if value >= 0.1 else f"{value:.2g}"


def format_gflops(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def _percent(value: float | None) -> str:
    """A % of peak, or "> 100%?" for one that cannot be (a timing error: see
    :data:`~polytf.runtime.cpu.profile.POSSIBLE_PERCENT_OF_PEAK`)."""
    if value is None or not math.isfinite(value):
        return "-"
    if value > POSSIBLE_PERCENT_OF_PEAK:
        return "> 100%?"
    return f"{value:.1f}%" if value >= 0.1 else f"{value:.2g}%"


def _flop_count(flops: int) -> str:
    """``7.40e9`` -> ``"7.40 GFLOP"``, ``1.9e5`` -> ``"0.189 MFLOP"``."""
    return f"{flops / 1e9:.3g} GFLOP" if flops >= 1e8 else f"{flops / 1e6:.3g} MFLOP"


def _executed_note(row: dict[str, Any]) -> str:
    """Where the tuned model executes fewer FLOPs than the graph's contractions (Winograd): how
    many, the FLOPs its GFLOP/s count."""
    executed = (row.get("executed_flops") or {}).get("polytf")
    if not executed or not row.get("flops") or executed == row["flops"]:
        return ""
    return f" as the graph writes them, {_flop_count(executed)} executed by the tuned kernels (what its GFLOP/s count)"


def _error(value: float | None) -> str:
    return f"{value:.2e}" if value is not None else "-"


def _tuning(tuning: dict[str, Any]) -> str:
    if not tuning:
        return "-"
    if tuning.get("new_trials", 0) == 0:
        return f"{tuning.get('wall_s', 0):.1f} (cached)"
    return f"{tuning.get('wall_s', 0):.1f}"


def _bold(cell: str) -> str:
    return cell if cell == "-" else f"**{cell}**"


def best_engine(row: dict[str, Any]) -> dict[str, Any]:
    """The row's ``ratio_to_best_engine`` (computed from its systems for results written before it existed)."""
    return row.get("ratio_to_best_engine") or ratio_to_best_engine(row.get("systems", {}))


def _system_cell(system: dict[str, Any] | None) -> str:
    """A system's time; ``not installed``, ``wrong`` or ``failed`` when it has an error instead (said below the table)."""
    error = (system or {}).get("error")
    if not error:
        return _ms(system)
    return NOT_INSTALLED if error.startswith(NOT_INSTALLED) else "wrong" if error.startswith("wrong result") else "failed"


def columns(rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Table columns as ``(title, row -> cell)``; TF, XLA, OpenVINO and ONNX Runtime columns only
    when some row has them."""
    tensorflow = any(s in row.get("systems", {}) for row in rows for s in ("tensorflow", "xla")) or not rows
    engines = any(s in row.get("systems", {}) for row in rows for s in ENGINES) or not rows
    compared = any(best_engine(row) for row in rows) or not rows

    def time(system):
        return lambda row: _system_cell(row.get("systems", {}).get(system))

    def to_tensorflow(key):
        return lambda row: _ratio((row.get("ratio_to_tensorflow") or {}).get(key))

    def to_best_engine(key):
        return lambda row: _ratio(best_engine(row).get(key))

    columns = [
        ("entry", lambda row: row["entry"]),
        ("threads", lambda row: str(row["threads"])),
        ("polytf ms", lambda row: "**failed**" if row.get("error") else _ms(row.get("systems", {}).get("polytf"))),
        ("untuned ms", time("polytf_untuned")),
        ("polytf kernels ms", time("polytf_kernels")),
        ("numpy ms", time("numpy")),
    ]
    if tensorflow:
        columns += [("TF ms", time("tensorflow")), ("XLA ms", time("xla"))]
    if engines:
        columns += [(f"{BASELINE_LABELS[engine]} ms", time(engine)) for engine in ENGINES]
    columns += [
        ("polytf GFLOP/s", lambda row: format_gflops(row.get("gflops", {}).get("polytf"))),
        ("% peak", lambda row: _percent(row.get("percent_of_peak", {}).get("polytf"))),
        ("call / kernels", lambda row: _ratio((row.get("profile") or {}).get("call_to_kernels_ratio"), ".3f")),
    ]
    if tensorflow:
        columns += [("untuned / TF", to_tensorflow("untuned")), ("tuned / TF", to_tensorflow("tuned"))]
    if compared:
        columns += [
            ("best engine", lambda row: BASELINE_LABELS.get(best_engine(row).get("engine"), "-")),
            ("untuned / best engine", to_best_engine("untuned")),
            ("tuned / best engine", lambda row: _bold(to_best_engine("tuned")(row))),
        ]
    columns += [
        ("tune s", lambda row: _tuning(row.get("tuning", {}))),
        ("max abs err vs numpy", lambda row: _error(row.get("max_abs_error"))),
    ]
    return columns


def cpu_markdown(result: dict[str, Any], png_name: str | None = None) -> str:
    """The Markdown report of a CPU result (see the module docstring)."""
    machine = result.get("machine", {})
    settings = result.get("settings", {})
    rows = result.get("rows", [])
    threads = sorted({row["threads"] for row in rows}) or settings.get("threads", [])
    lines = [
        "# polytf bench",
        "",
        f"**Machine:** {machine_summary(machine)}.",
        "",
        f"**Run:** {machine.get('date')}, polytf {machine.get('polytf')}"
        + (f" (commit `{machine['commit']}`)" if machine.get("commit") else "")
        + f", "
        f"threads {', '.join(map(str, threads))}; TensorFlow: {machine.get('tensorflow') or 'not used'}.",
        "",
        f"**float32 peak (measured):** {peak_summary(machine)}.",
        "",
    ]
    for count, libraries in sorted(machine.get("baseline_blas", {}).items(), key=lambda item: int(item[0])):
        lines.append(
            f"Baseline process with {count} thread(s): numpy's BLAS {describe_blas(libraries, machine.get('openblas_coretype'))}, {_blas_threads(libraries)} BLAS thread(s)."
        )
    budget = settings.get("time_budget_s")
    lines += [
        "",
        (
            f"polytf tuned within a time budget of {budget:g} s per model (trials handed to kernels by the task scheduler)"
            if budget
            else f"polytf tuned with {settings.get('trials_per_kernel')} trials per kernel"
        )
        + f" ({settings.get('cache')}); *untuned* is the same model built with default recipes (an empty cache). "
        f"Each time is the median of {settings.get('rounds')} round medians; a round is {settings.get('warmup')} untimed calls and "
        f"{settings.get('repeats')} timed calls of one system"
        + (
            f" (a model faster than that gets as many calls as fill {settings['min_round_s']:g} s, every system of its row the same: "
            "the row's *calls per round* below)"
            if settings.get("min_round_s")
            else ""
        )
        + ", rounds alternating between systems. Every call "
        "returns numpy arrays (polytf: `model(**inputs)`, copying inputs in and outputs out; TF/XLA: `tf.function` on the same GraphDef, "
        "on input tensors made once before timing, outputs fetched with `.numpy()`); "
        "*polytf kernels* is the model's kernels run in sequence on inputs bound once (no input checks, no output arrays); "
        "*call / kernels* is a whole call `model(**inputs)` over the time spent in the kernels inside it, one clock for both "
        "(median over the profile's calls): the runtime's overhead. GFLOP/s counts the contractions (MatMul, BatchMatMul, Einsum, "
        "Conv2D, depthwise; 2 FLOPs per multiply-add executed, padding taps excluded; a Winograd kernel executes its batched GEMM's, "
        "fewer than the convolution's); % peak is of the measured peak for the row's thread count.",
        "",
    ]
    lines += markdown_table(columns, rows)
    lines += [
        "",
        RATIO_CONVENTION
        + " A system whose outputs differ from TensorFlow's beyond the end-to-end tolerance is *wrong* and not timed.",
    ]
    lines += [f"- {row['entry']}, {row['threads']} thread(s): **failed**: {first_line(row['error'])}" for row in rows if row.get("error")]
    errors = [
        (row["entry"], row["threads"], system, data["error"])
        for row in rows
        for system, data in row.get("systems", {}).items()
        if data.get("error")
    ]
    lines += [
        f"- {entry}, {count} thread(s): {BASELINE_LABELS.get(system, system)} failed: {error}"
        for entry, count, system, error in errors
    ]
    lines += [f"- {note}" for note in result.get("notes", [])]
    lines.append(f"- {engines_note(machine, rows)}")
    if result.get("interrupted"):
        lines.append("- **Interrupted**: only the rows above finished.")
    if result.get("failure"):
        lines.append(f"- **Stopped by an error**: {result['failure']}")
    if png_name:
        lines += ["", f"![polytf time / each baseline's time]({png_name})"]
    for row in rows:
        if not row.get("error"):
            lines += [""] + row_section(row)
    return "\n".join(lines) + "\n"


def engines_note(machine: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """What the engine columns ran: versions and settings, or why they did not run."""
    versions = machine.get("engines") or {}
    if not versions or not any(s in row.get("systems", {}) for row in rows for s in ENGINES):
        return (
            "OpenVINO and ONNX Runtime not timed (they run beside TensorFlow, not with --no-tensorflow; "
            "pip install 'polytf[bench]')."
        )

    def version(engine: str) -> str:
        return ", ".join(f"{name} {versions.get(name) or NOT_INSTALLED}" for name in PACKAGES[engine])

    return (
        f"OpenVINO ({version('openvino')}): the GraphDef converted in memory (`openvino.convert_model`, weights kept float32), "
        "CPU plugin with INFERENCE_PRECISION_HINT=f32, PERFORMANCE_HINT=LATENCY and INFERENCE_NUM_THREADS = the row's threads. "
        f"ONNX Runtime, ORT ({version('onnxruntime')}): the GraphDef converted by tf2onnx at opset 17, CPUExecutionProvider, "
        "intra_op_num_threads = the row's threads, inter_op_num_threads=1, ORT_ENABLE_ALL. Both on the same inputs, bound once; "
        "their outputs checked against TensorFlow's."
    )


def peak_summary(machine: dict[str, Any]) -> str:
    """``"338 GFLOP/s on 2 threads, 172 GFLOP/s on 1 thread (FMA loop on <16 x float>, 24 chains
    per thread, LLVM CPU `emeraldrapids`)"``, or why there is none."""
    peaks = machine.get("fp32_peak") or {}
    if not peaks:
        return "not measured"
    ordered = sorted(peaks.values(), key=lambda peak: -peak["threads"])
    figures = ", ".join(f"{peak['gflops']:.0f} GFLOP/s on {peak['threads']} thread{'s' if peak['threads'] > 1 else ''}" for peak in ordered)
    first = ordered[0]
    return (
        f"{figures} (FMA loop on <{first['vector_lanes']} x float>, {first.get('accumulators', '?')} chains per thread, "
        f"LLVM CPU `{first['cpu_name']}`)"
    )


def row_section(row: dict[str, Any]) -> list[str]:
    """The Markdown section of one row: profile totals, accuracy, tuning, convolution layers."""
    profile = row.get("profile") or {}
    kernels = profile.get("kernels", [])
    percent = row.get("percent_of_peak", {})
    gflops = row.get("gflops", {})
    lines = [f"## {row['entry']}, {row['threads']} thread{'s' if row['threads'] > 1 else ''}", ""]
    if profile:
        # one figure per quantity: the whole call's time is the table's (its timing rounds); the
        # profile's own calls give the shares only, never a second time for the same call
        ratio = profile.get("call_to_kernels_ratio")
        share = f"{100 / ratio:.0f}% of a call" if ratio else "-"
        lines.append(
            f"- Whole call `model(**inputs)` {_ms(row.get('systems', {}).get('polytf'))} ms (the table's polytf ms). Its {plural(len(kernels), 'kernel')}, "
            f"each timed inside the profile's own calls, take {share}: call / sum of kernels {_ratio(ratio, '.3f')} "
            "(median over those calls of each call's ratio)."
        )
        if profile.get("alone_ratio"):
            lines.append(
                f"- The same kernels alone, each repeated with hot caches: their time in the calls / alone {_ratio(profile.get('alone_ratio'))} "
                "(above 1: the cost of caches shared with the other layers)."
            )
    lines.append(
        f"- polytf tuned {format_gflops(gflops.get('polytf'))} GFLOP/s ({_percent(percent.get('polytf'))} of peak), "
        f"untuned {format_gflops(gflops.get('polytf_untuned'))} GFLOP/s ({_percent(percent.get('polytf_untuned'))} of peak)"
        + (f"; {_flop_count(row['flops'])} per call" if row.get("flops") else "")
        + _executed_note(row)
        + "."
    )
    if row.get("tuned_is_untuned"):
        lines.append("- No tuned recipe was kept (each lost inside the model, or none beat its default): the tuned model is the untuned one, timed once for both.")
    to_tensorflow = row.get("ratio_to_tensorflow") or {}
    if to_tensorflow:
        lines.append(f"- Time / TensorFlow's: tuned {_ratio(to_tensorflow.get('tuned'))}, untuned {_ratio(to_tensorflow.get('untuned'))}.")
    engine = best_engine(row)
    if engine:
        name = BASELINE_LABELS.get(engine["engine"], engine["engine"])
        lines.append(
            f"- Time / the best engine's ({name}, {milliseconds(engine['engine_s'])} ms): "
            f"tuned {_ratio(engine.get('tuned'))}, untuned {_ratio(engine.get('untuned'))}."
        )
    baselines = {**(row.get("baseline_max_abs_error_vs_tensorflow") or {})}
    if baselines:
        lines.append(
            "- Max abs error of the baselines vs TensorFlow: "
            + ", ".join(f"{BASELINE_LABELS.get(system, system)} {_error(error)}" for system, error in baselines.items())
            + "."
        )
    versus_tensorflow = row.get("max_abs_error_vs_tensorflow") or {}
    lines.append(
        f"- Max abs error vs numpy: tuned {_error(row.get('max_abs_error'))}, untuned {_error(row.get('untuned_max_abs_error'))}"
        + (
            f"; vs TensorFlow: tuned {_error(versus_tensorflow.get('tuned'))}, untuned {_error(versus_tensorflow.get('untuned'))}."
            if versus_tensorflow
            else "."
        )
    )
    tuning = row.get("tuning", {})
    if tuning:
        lines.append(
            f"- Tuning: {tuning.get('wall_s', 0):.1f} s wall, {tuning.get('new_trials', 0)} new trials "
            f"({tuning.get('failed_trials', 0)} failed), {plural(row.get('kernels', len(kernels)), 'kernel')}."
            + (f" Timed with {row['calls_per_round']} calls per round." if row.get("calls_per_round") else "")
        )
    summary = row.get("convolutions") or {}
    if summary:
        order = sorted(summary, key=lambda key: (key == "depthwise", key))
        lines.append(
            "- Median % of peak of the Conv2D kernels by filter: "
            + ", ".join(f"{key} {_percent(summary[key]['median_percent_of_peak'])} ({plural(summary[key]['kernels'], 'kernel')})" for key in order)
            + "."
        )
    layers = [kernel for kernel in kernels if kernel.get("convolution_node")]
    if layers:
        lines += [
            "",
            f"<details><summary>{plural(len(layers), 'convolution layer')} (kernel inside the model: median ms, GFLOP/s, % of peak; alone with hot caches: ms)</summary>",
            "",
            "| layer | op | filter | output | ms | GFLOP/s | % peak | alone ms |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for kernel in layers:
            node, op = kernel["convolution_node"]
            filter_size = "x".join(map(str, kernel["filter_size"])) if kernel.get("filter_size") else "-"
            output = " ".join("x".join(map(str, shape)) for shape in kernel["output_shapes"])
            lines.append(
                f"| {node} | {DEPTHWISE if kernel['convolution'] == DEPTHWISE else op} | {filter_size} | {output} | "
                f"{kernel['median_s'] * 1e3:.3f} | {format_gflops(kernel.get('gflops'))} | {_percent(kernel.get('percent_of_peak'))} | "
                f"{milliseconds(kernel.get('alone_median_s'))} |"
            )
        lines += ["", "</details>"]
    return lines


def _blas_threads(libraries: list[dict[str, Any]]) -> str:
    counts = sorted({str(lib.get("num_threads")) for lib in libraries if lib.get("user_api") == "blas"})
    return "/".join(counts) or "?"


#: how a CPU result is written
CPU_REPORT = ReportFormat(
    title="polytf bench (ratios: polytf time / the other system's time, below 1: polytf faster)",
    columns=columns,
    markdown=cpu_markdown,
    row_label=lambda row: f"{row['entry']} ({row['threads']} threads)",
    chart_polytf_over_baseline=True,
)
