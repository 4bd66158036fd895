"""The Keras layer sweep as a report: how each layer setting compiles, and its time against
OpenVINO on the same one-layer model; then the models built from these layers (U-Nets with
transposed convolutions, a Swin block, a video classifier, a Conv3D layer) with their
kernels' share of the machine's measured float32 peak.

Usage::

    python results/keras_layers.py [--threads 2] [--rounds 7] [--out results/keras_layers.md]

Each layer setting of :mod:`polytf.model_zoo.keras_layers` is frozen, loaded by polytf
(default recipes, host fallback allowed: *compiled* when no node runs on the host, else
*host* with the host ops, *refused* with the first line of the error) and by OpenVINO
(``convert_model`` + ``compile_model``, f32, LATENCY, the same threads). Times: medians of
``--rounds`` rounds, each round a median of as many calls as fill 20 ms (at most 1000),
polytf and OpenVINO alternating. Models: the same, plus polytf's per-kernel profile
(:func:`polytf.runtime.cpu.profile.profile_model`): GFLOP/s and % of the peak measured by
:func:`polytf.bench.peak.measure_fp32_peak` for each transposed convolution's kernel (the
convolution over its output phases, whose FLOPs count the phases' zero taps: 16 for the 9
useful ones of a 3x3 filter of stride 2), else the slowest convolution kernels. Writes
Markdown naming the machine and thread count.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

MODELS = ("transposed_unet", "unet", "swin_block", "video_cnn")
#: a Conv3D layer (3x3x3, 32 -> 32 channels, SAME) over a 16 x 56 x 56 clip: issue 48's bench row
CONV3D_SHAPE, CONV3D_FILTER = (1, 16, 56, 56, 32), (3, 3, 3, 32, 32)


def _median_time(call, budget_s: float = 0.02) -> float:
    """Seconds per call: as many calls as fill ``budget_s`` (at most 1000), after one warm-up."""
    call()
    start, count = time.perf_counter(), 0
    while count < 1000 and time.perf_counter() - start < budget_s:
        call()
        count += 1
    return (time.perf_counter() - start) / count


def _alternate(polytf_call, openvino_call, rounds: int) -> tuple[float, float]:
    for _ in range(3):
        polytf_call(), openvino_call()
    polytf_s, openvino_s = [], []
    for _ in range(rounds):
        polytf_s.append(_median_time(polytf_call))
        openvino_s.append(_median_time(openvino_call))
    return statistics.median(polytf_s), statistics.median(openvino_s)


def _ratio(polytf_s: float | None, openvino_s: float | None) -> str:
    return f"{polytf_s / openvino_s:.2f}" if polytf_s and openvino_s else "-"


def _one(path: Path, feeds_of, threads: int, rounds: int, cache: Path):
    """Load ``path`` once and time it against OpenVINO on ``feeds_of(model)``: ``(model, status,
    polytf s, OpenVINO s or None, note, feeds)``."""
    import polytf
    from polytf.bench.openvino_baseline import openvino_function

    model = polytf.load(path, cache_dir=cache, threads=threads, progress=False)
    feeds = feeds_of(model)
    status = "compiled" if not model.host_nodes else "host (" + ", ".join(sorted({node.op for node in model.host_nodes})) + ")"
    try:
        openvino_call = openvino_function(path, feeds, ["Identity"], threads)
    except Exception as error:  # noqa: BLE001 - a layer OpenVINO cannot convert is reported so
        return model, status, _median_time(lambda: model(**feeds)), None, str(error).splitlines()[0], feeds
    polytf_s, openvino_s = _alternate(lambda: model(**feeds), openvino_call, rounds)
    return model, status, polytf_s, openvino_s, "", feeds


def _conv3d_layer(path: Path) -> Path:
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.keras_models import import_tensorflow

    tf = import_tensorflow()
    weights = np.random.default_rng(0).standard_normal(CONV3D_FILTER).astype(np.float32) * 0.1
    graph = freeze_to_graphdef(lambda x: tf.nn.conv3d(x, weights, [1, 1, 1, 1, 1], "SAME"), [("input", CONV3D_SHAPE)])
    path.write_bytes(graph.SerializeToString())
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="results/keras_layers.md")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names (default: every case)")
    args = parser.parse_args()

    from polytf.bench.machine import cpu_model_name
    from polytf.bench.peak import measure_fp32_peak
    from polytf.model_zoo import write_model
    from polytf.model_zoo.keras_layers import CASES, IDENTITY_AT_INFERENCE, KNOWN_GAPS, NOT_SWEPT, case_inputs, freeze_case
    from polytf.model_zoo.language_models import zoo_inputs
    from polytf.runtime.cpu.profile import profile_model
    from polytf.targets.cpu import CpuTarget

    work = Path(tempfile.mkdtemp(prefix="keras_layers_"))
    only = [part for part in args.only.split(",") if part]
    rows = []
    for index, case in enumerate(CASES):
        if only and not any(part in case.name for part in only):
            continue
        path = freeze_case(case, work / f"case{index}.pb")
        try:
            _, status, polytf_s, openvino_s, note, _ = _one(path, lambda model, case=case: {"input": case_inputs(case)}, args.threads, args.rounds, work / f"cache{index}")
        except Exception as error:  # noqa: BLE001 - a refused layer is a row of the report
            status, polytf_s, openvino_s, note = "refused", None, None, str(error).splitlines()[0][:160]
        if case.name in KNOWN_GAPS:
            note = KNOWN_GAPS[case.name]
        rows.append((case, status, polytf_s, openvino_s, note))
        print(f"{case.name}: {status} {polytf_s} {openvino_s}", flush=True)

    peak = measure_fp32_peak(args.threads).gflops
    model_rows = []
    for name in (*MODELS, "conv3d_layer"):
        if only:
            break
        path = _conv3d_layer(work / "conv3d_layer.pb") if name == "conv3d_layer" else write_model(name, work / f"{name}.pb")
        feeds_of = lambda model: zoo_inputs(model.input_types, seed=3)  # noqa: E731 - one expression, named for the call below
        model, status, polytf_s, openvino_s, note, feeds = _one(path, feeds_of, args.threads, args.rounds, work / f"cache_{name}")
        profile = profile_model(model, feeds, repeats=20, peak_gflops=peak, alone=False)
        convolutions = [k for k in profile.kernels if k.flops and any(op.startswith(("Conv", "MatMul")) for _, op in k.ops)]
        # a transposed convolution's kernel: the convolution over its output phases (its node is named '<node>/phases')
        transposed = [k for k in convolutions if any(node.endswith("/phases") for node, _ in k.ops)]
        shown = transposed or sorted(convolutions, key=lambda k: -k.median_s)[:3]
        detail = "; ".join(
            f"{k.name.split('_', 1)[0]} {'+'.join(op for _, op in k.ops[:2])}{' (transposed)' if k in transposed else ''} "
            f"{k.flops / k.median_s / 1e9:.0f} GFLOP/s ({100 * k.flops / k.median_s / 1e9 / peak:.0f}%)"
            for k in shown
        )
        model_rows.append((name, status, polytf_s, openvino_s, detail or note))
        print(f"{name}: {polytf_s} {openvino_s} {detail}", flush=True)

    target = CpuTarget()
    lines = [
        "# Keras layers: the sweep, and models built from its layers",
        "",
        f"{datetime.date.today()}; {cpu_model_name()}, LLVM CPU `{target.cpu_name}`; {args.threads} threads; measured float32 peak {peak:.0f} GFLOP/s. "
        f"Written by `python results/keras_layers.py`. polytf: default recipes (untuned). OpenVINO: f32, LATENCY hint, the same threads. "
        f"Times: medians of {args.rounds} alternating rounds, each a median over 20 ms of calls.",
        "",
        "## The sweep: one-layer models",
        "",
        "*compiled*: no node on the host (`fallback=False` loads it); *host*: nodes run by their numpy reference; *refused*: not loaded. "
        "`tests/e2e/test_keras_layers.py` checks each compiled setting against TensorFlow.",
        "",
        "| layer | setting | input | polytf | polytf µs | OpenVINO µs | polytf / OpenVINO | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, status, polytf_s, openvino_s, note in rows:
        cells = [case.layer, case.setting or "-", "x".join(map(str, case.shape)) + ("" if case.dtype == "float32" else f" {case.dtype}"), status,
                 f"{polytf_s * 1e6:.1f}" if polytf_s else "-", f"{openvino_s * 1e6:.1f}" if openvino_s else "-", _ratio(polytf_s, openvino_s), note]
        lines.append("| " + " | ".join(cells) + " |")
    compiled = sum(status == "compiled" for _, status, *_ in rows)
    ratios = [p / o for _, status, p, o, _ in rows if p and o]
    lines += [
        "",
        f"{len(rows)} settings of {len({case.layer for case, *_ in rows})} layers: {compiled} compiled, "
        f"{sum(status.startswith('host') for _, status, *_ in rows)} with host nodes, {sum(status == 'refused' for _, status, *_ in rows)} refused. "
        f"polytf / OpenVINO: median {statistics.median(ratios):.2f}, worst {max(ratios):.2f}, {sum(r > 1.5 for r in ratios)} above 1.5." if ratios else "",
        "",
        "Identity at inference (not swept): " + ", ".join(f"`{name}`" for name in IDENTITY_AT_INFERENCE) + ".",
        "",
        "Not swept: " + "; ".join(f"`{name}` ({why})" for name, why in NOT_SWEPT.items()) + ".",
        "",
        "## Models",
        "",
        "| model | polytf | polytf ms | OpenVINO ms | polytf / OpenVINO | transposed convolutions (else the slowest convolutions): GFLOP/s executed in the model, % of peak |",
        "|---|---|---|---|---|---|",
    ]
    for name, status, polytf_s, openvino_s, detail in model_rows:
        lines.append(f"| {name} | {status} | {polytf_s * 1e3:.3f} | {openvino_s * 1e3:.3f} | {_ratio(polytf_s, openvino_s)} | {detail} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
