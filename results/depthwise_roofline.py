"""Depthwise convolutions against the roofline: each depthwise kernel of MobileNetV2 (and,
with ``--efficientnet``, EfficientNetB0) at batch 1, against the machine's measured memory
bandwidth and float32 FMA peak.

The model is built with its untuned default recipes (``polytf.load`` on an empty cache) and
profiled inside whole calls (:func:`polytf.runtime.cpu.profile.profile_model`: each kernel finds
the caches as the kernels before it left them). For every kernel whose convolution is
depthwise (its op's weight layout says so) the report gives:

- the in-model median time;
- its compulsory bytes: every array it reads or writes once (input, filter, bias, output;
  float32), i.e. the traffic of a kernel that streams each operand exactly once;
- GB/s = compulsory bytes / time, and % of the measured memory bandwidth (STREAM triad in
  generated code, :mod:`polytf.bench.memory_bandwidth`, 3 arrays of 4 x L3, write-allocate
  not counted, best of 5);
- GFLOP/s (2 per multiply-add executed, padding taps excluded) and % of the measured FMA
  peak (:mod:`polytf.bench.peak`);
- the bound: the kernel's arithmetic intensity (FLOPs / compulsory byte) against the machine
  balance (peak / bandwidth): below it the kernel is memory bound and is judged by % of
  bandwidth (issue 28's target: at least 60%), above it by % of peak (target: at least 40%);
- alone, hot caches: the kernel called repeatedly on its own with its default recipe (the
  depthwise micro-kernel, input read in place), and as polytf compiled it before: the
  generic register-tile micro-kernel of :mod:`polytf.targets.microkernel` (the depthwise
  one switched off in this script) with the zero-padded input copy (``pad=True``) where the
  convolution pads, medians of calls alternating between the two, in this run.

Usage (a quiet machine; about 2 minutes for MobileNetV2 on 2 threads):

    python results/depthwise_roofline.py --threads 2 [--efficientnet] [--out results/depthwise_roofline]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import polytf
from polytf.bench.machine import describe_machine, machine_summary
from polytf.bench.memory_bandwidth import measure_memory_bandwidth
from polytf.bench.peak import measure_fp32_peak
from polytf.model_zoo.freeze import write_model
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.runtime.cpu.profile import DEPTHWISE, profile_model
from polytf.targets import llvm_codegen
from polytf.targets.cpu import CpuTarget
from polytf.targets.depthwise_pattern import match_depthwise

#: alternating rounds of the alone-timing, and calls per round
ROUNDS, CALLS = 7, 10


def compulsory_bytes(scop) -> int:
    """Bytes of every array the kernel reads or writes (not its temporaries), float32 or not."""
    return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in scop.arrays if a.role in ("input", "output"))


def compile_before(scop, recipe, target: CpuTarget):
    """The kernel as polytf compiled it before the depthwise micro-kernel: the generic
    emitter (the depthwise plan switched off while compiling) with the zero-padded input copy
    where the convolution pads (the analytic default then)."""
    padded = dataclasses.replace(recipe, pad=True) if scop.statements[1].constraints else recipe
    original = llvm_codegen.depthwise_plan
    llvm_codegen.depthwise_plan = lambda scop, ast: None
    try:
        return target.compile(scop, padded)
    finally:
        llvm_codegen.depthwise_plan = original


def alone_medians(scop, recipe, threads: int, target: CpuTarget) -> dict:
    """Median seconds of the kernel called alone, now (``"default"``) and before
    (:func:`compile_before`), rounds alternating between them; the outputs are checked
    against each other."""
    rng = np.random.default_rng(0)
    inputs = {a.name: rng.standard_normal(a.shape).astype(a.dtype) for a in scop.arrays if a.role == "input"}
    tables, outputs = {}, {}
    for name, compiled in (("default", target.compile(scop, recipe)), ("before", compile_before(scop, recipe, target))):
        bench = KernelBench(scop=scop, inputs=inputs, expected={})
        table = bench.table(compiled)
        table.run(threads)
        outputs[name] = [bench.arrays[bench.index[a.name]].copy() for a in scop.arrays if a.role == "output"]
        tables[name] = table
    first = next(iter(outputs.values()))
    for name, arrays in outputs.items():
        for got, expected in zip(arrays, first):
            if not np.allclose(got, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()) + 1e-6):
                raise SystemExit(f"kernel {scop.name}: recipe {name!r} disagrees with {next(iter(outputs))!r}")
    samples = {name: [] for name in tables}
    for _ in range(ROUNDS):
        for name, table in tables.items():
            for _ in range(CALLS):
                begin = time.perf_counter()
                table.run(threads)
                samples[name].append(time.perf_counter() - begin)
    return {name: statistics.median(values) for name, values in samples.items()}


def model_rows(name: str, threads: int, peak_gflops: float, bandwidth_gb_per_s: float, repeats: int) -> tuple[list[dict], dict]:
    target = CpuTarget()
    with tempfile.TemporaryDirectory() as directory:
        path = write_model(name, Path(directory) / f"{name}.pb", batch=1)
        began = time.perf_counter()
        model = polytf.load(path, cache_dir=Path(directory) / "cache", threads=threads)
        load_s = time.perf_counter() - began
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(t.shape).astype(np.float32) for name, t in model.input_types.items()}
    profile = profile_model(model, inputs, repeats=repeats, peak_gflops=peak_gflops, alone=False)
    balance = peak_gflops / bandwidth_gb_per_s
    rows = []
    for kernel, row in zip(model.kernels, profile.kernels):
        if row.convolution != DEPTHWISE:
            continue
        scop = kernel.scop
        moved = compulsory_bytes(scop)
        gb_per_s = moved / row.median_s / 1e9
        intensity = row.flops / moved
        memory_bound = intensity < balance
        alone = alone_medians(scop, kernel.recipe, threads, target)
        rows.append(
            {
                "kernel": scop.name,
                "node": row.convolution_node[0] if row.convolution_node else "",
                "filter": "x".join(map(str, row.filter_size or ())),
                "output": "x".join(map(str, row.output_shapes[0])) if row.output_shapes else "",
                "micro_kernel": match_depthwise(scop) is not None and not kernel.recipe.pad,
                "median_ms": row.median_s * 1e3,
                "bytes": moved,
                "gb_per_s": gb_per_s,
                "percent_of_bandwidth": 100 * gb_per_s / bandwidth_gb_per_s,
                "gflops": row.gflops,
                "percent_of_peak": row.percent_of_peak,
                "intensity": intensity,
                "bound": "memory" if memory_bound else "compute",
                "meets_target": (100 * gb_per_s / bandwidth_gb_per_s >= 60) if memory_bound else (row.percent_of_peak >= 40),
                "alone_ms": alone["default"] * 1e3,
                "alone_before_ms": alone["before"] * 1e3,
                "recipe": row.recipe,
            }
        )
    return rows, {"load_s": load_s, "call_ms": profile.call_s * 1e3, "kernels": len(model.kernels)}


def markdown(result: dict) -> str:
    bandwidth, peak = result["bandwidth"], result["peak"]
    lines = [
        "# Depthwise convolutions against the roofline",
        "",
        f"Machine: {result['machine_summary']}. Threads: {result['threads']}. polytf {result['machine']['polytf']} "
        f"(commit {result['machine']['commit']}), {result['machine']['date']}.",
        "",
        f"- **Memory bandwidth (measured):** {bandwidth['gb_per_s']:.1f} GB/s on {bandwidth['threads']} thread(s): STREAM triad "
        f"`a = b + s*c` generated with llvmlite on <{bandwidth['vector_lanes']} x float>, 3 arrays of "
        f"{bandwidth['array_bytes'] / 2**20:.0f} MiB (4 x L3), best of 5 calls, 12 bytes per element counted (write-allocate not counted, as STREAM).",
        f"- **float32 FMA peak (measured):** {peak['gflops']:.1f} GFLOP/s on {peak['threads']} thread(s), LLVM CPU `{peak['cpu_name']}`.",
        f"- **Machine balance:** {result['balance']:.1f} FLOP/byte: a kernel of lower arithmetic intensity is memory bound "
        "(judged by % of bandwidth, target >= 60%), a higher one compute bound (% of peak, target >= 40%).",
        "",
        "Times: *in model* is the kernel's median inside whole model calls (untuned default recipes, fresh cache); "
        "*alone* are medians of the kernel called by itself with hot caches, rounds alternating between its default recipe "
        "and the kernel as compiled before the depthwise micro-kernel (generic register-tile micro-kernel, zero-padded input "
        "copy where the convolution pads). Compulsory bytes: every array read or written once (input, filter, bias, output). "
        "GB/s and GFLOP/s are of the in-model time; above 100% of the bandwidth a kernel found its operands in the caches "
        "(the previous kernel's output in L2/L3), not in memory.",
        "",
    ]
    for model in result["models"]:
        rows = model["rows"]
        lines += [
            f"## {model['name']} (batch 1): {len(rows)} depthwise kernels of {model['summary']['kernels']}; "
            f"whole call {model['summary']['call_ms']:.2f} ms",
            "",
            "| kernel | filter | output | micro-kernel | in model ms | compulsory KiB | GB/s | % bandwidth | GFLOP/s | % peak | FLOP/byte | bound | target met | alone ms | alone, before ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            lines.append(
                f"| {row['node'] or row['kernel']} | {row['filter']} | {row['output']} | {'yes' if row['micro_kernel'] else 'no'} | "
                f"{row['median_ms']:.3f} | {row['bytes'] / 1024:.0f} | {row['gb_per_s']:.1f} | {row['percent_of_bandwidth']:.0f}% | "
                f"{row['gflops']:.1f} | {row['percent_of_peak']:.1f}% | {row['intensity']:.2f} | {row['bound']} | "
                f"{'yes' if row['meets_target'] else '**no**'} | {row['alone_ms']:.3f} | {row['alone_before_ms']:.3f} |"
            )
        met = sum(row["meets_target"] for row in rows)
        speedups = [row["alone_before_ms"] / row["alone_ms"] for row in rows if row["alone_ms"] > 0]
        lines += [
            "",
            f"- {met} of {len(rows)} kernels meet the target of their bound; median % of bandwidth "
            f"{statistics.median(r['percent_of_bandwidth'] for r in rows):.0f}%, median % of peak "
            f"{statistics.median(r['percent_of_peak'] for r in rows):.1f}%.",
            f"- Alone, before / default (geometric mean of the speed-ups): {float(np.exp(np.mean(np.log(speedups)))):.2f}x.",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20, help="timed whole calls of the profile")
    parser.add_argument("--efficientnet", action="store_true", help="also EfficientNetB0 (about a minute more)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("depthwise_roofline")))
    arguments = parser.parse_args()
    peak = measure_fp32_peak(arguments.threads)
    bandwidth = measure_memory_bandwidth(arguments.threads)
    machine = describe_machine()
    result = {
        "threads": arguments.threads,
        "machine": machine,
        "machine_summary": machine_summary(machine),
        "peak": peak.to_dict(),
        "bandwidth": bandwidth.to_dict(),
        "balance": peak.gflops / bandwidth.gb_per_s,
        "models": [],
    }
    for name in ["mobilenet_v2"] + (["efficientnet_b0"] if arguments.efficientnet else []):
        rows, summary = model_rows(name, arguments.threads, peak.gflops, bandwidth.gb_per_s, arguments.repeats)
        result["models"].append({"name": name, "rows": rows, "summary": summary})
    out = Path(arguments.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
