"""Load time: cold (empty cache) and warm (every kernel cached) ``polytf.load`` per model,
with the phase breakdown, beside OpenVINO's ``convert_model`` + ``compile_model`` of the same
.pb on the same machine.

Usage::

    python results/load_time.py [--models resnet50,mobilenet_v2,...] [--models-dir DIR]
        [--repeats 3] [--out results/load_time.md]

Every measurement is a fresh process (``python results/load_time.py --child ...``) that
imports numpy and polytf first (not timed), then times:

- ``load_s``: the ``polytf.load(model)`` call, polytf's modules already imported (the phase
  timers below import the modules they wrap before the clock starts); importing polytf's
  compiler modules, which a first ``polytf.load`` in a process also pays, is timed
  separately (``compiler_import_s``, in a second warm run without phase timers, whose load
  time is reported too);
- the phases inside it, by wrapping the functions the load calls, in the modules that call
  them: reading the GraphDef, shape inference, graph passes, lowering (partition, lowering,
  buffer placement), default recipes (search-space analysis: isl dependences), compiling
  in parallel (the worker pool's wall time), and in this process: isl scheduling and AST,
  LLVM IR emission, LLVM optimisation, code generation, linking object code, and building
  the model (buffer plan, weights packed once);
- the output on a fixed input, saved, so that the warm load's output is compared bit for
  bit with the cold load's;
- ``fresh_s`` (a third warm run, ``warm-fresh``): the load as a user meets it, in a fresh
  process, the clock started before ``import polytf`` (numpy, polytf's modules and the load);
  the ratio of issue 47 is this against OpenVINO's convert and compile.

Child processes run with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` unset), as an
installed package has it; one untimed warm-up process per model writes it first.

Cold: an empty cache directory, default recipes. Warm: the cache directory the cold run
filled. OpenVINO: ``ov.convert_model(pb)`` then ``Core().compile_model(model, "CPU",
{INFERENCE_NUM_THREADS, PERFORMANCE_HINT=LATENCY, INFERENCE_PRECISION_HINT=f32})`` with no
``CACHE_DIR`` (its cold compile; ``openvino`` is a benchmark-only dependency). Medians of
``--repeats`` runs; systems alternate within each repeat. Writes a Markdown report naming
the machine and thread count.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("cifar_cnn", "resnet50", "mobilenet_v2", "inception_v3", "densenet121", "transformer_encoder")
#: phases timed inside polytf.load: (column, module, attribute path of the function)
PHASES = (
    ("read_s", "polytf.compiler.preparation", "load_graph"),
    ("types_s", "polytf.compiler.preparation", "infer_types"),
    ("passes_s", "polytf.compiler.preparation", "optimize"),
    ("lowering_s", "polytf.compiler.preparation", "lower_with_fallback"),
    ("placement_s", "polytf.compiler.preparation", "place_in_consumer_buffers"),
    ("records_s", "polytf.compiler.loading", "stored_recipes"),
    ("default_recipes_s", "polytf.targets.cpu", "CpuTarget.search_space"),
    ("parallel_compile_s", "polytf.compiler.code_cache", "KernelCodeCache.prefetch"),
    ("isl_schedule_s", "polytf.schedules.builder", "schedule_scop"),
    ("isl_ast_s", "polytf.schedules.builder", "build_ast"),
    ("ir_emission_s", "polytf.targets.cpu", "CpuTarget.emit"),
    ("llvm_opt_s", "polytf.targets.cpu", "CpuTarget.optimise"),
    ("codegen_s", "polytf.targets.cpu", "CpuTarget.compile_object"),
    ("link_s", "polytf.targets.cpu", "CpuTarget.link_object"),
    ("model_build_s", "polytf.runtime.cpu.compiled_model", "CompiledModel.__init__"),
    ("kept_entries_s", "polytf.compiler.load_cache", "LoadCache._load"),
    ("packing_s", "polytf.runtime.cpu.compiled_model", "CompiledModel.pack_constants"),
)
#: shown in the report's breakdown, in this order (codegen_s there is compile_object less optimise)
BREAKDOWN = (
    "read_s", "types_s", "passes_s", "lowering_s", "default_recipes_s", "parallel_compile_s", "isl_schedule_s", "ir_emission_s", "llvm_opt_s",
    "codegen_s", "link_s", "model_build_s", "kept_entries_s", "packing_s",
)


def _wrap(totals: dict, column: str, module_name: str, attribute: str) -> None:
    import importlib

    module = importlib.import_module(module_name)
    owner, name = (module, attribute) if "." not in attribute else (getattr(module, attribute.split(".")[0]), attribute.split(".")[1])
    original = getattr(owner, name)
    depth = [0]

    def timed(*args, **kwargs):
        depth[0] += 1
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:  # a recursive or nested call counts once
                totals[column] = totals.get(column, 0.0) + time.perf_counter() - started

    setattr(owner, name, timed)


def child(model: str, cache_dir: str, output: str, preimport: bool, threads: int) -> dict:
    """One load in this process; returns seconds (the child side of the script)."""
    import numpy as np

    import polytf

    result = {}
    if preimport:
        started = time.perf_counter()
        import polytf.compiler.loading  # noqa: F401 - timed: the compiler's modules

        result["compiler_import_s"] = time.perf_counter() - started
    totals: dict = {}
    if not preimport:
        for column, module_name, attribute in PHASES:
            _wrap(totals, column, module_name, attribute)
    started = time.perf_counter()
    loaded = polytf.load(model, cache_dir=cache_dir, threads=threads)
    result["load_s"] = time.perf_counter() - started
    if "llvm_opt_s" in totals and "codegen_s" in totals:
        totals["codegen_s"] -= totals["llvm_opt_s"]
    result.update(totals)
    name, spec = next(iter(loaded.input_types.items()))
    x = np.random.default_rng(0).standard_normal(spec.shape).astype(spec.dtype)
    outputs = loaded(**{name: x})
    np.save(output, next(iter(outputs.values())))
    result["kernels"] = len(loaded.kernels)
    return result


def fresh_child(model: str, cache_dir: str, threads: int) -> dict:
    """A warm load as a user meets it: the clock starts before ``import polytf``."""
    started = time.perf_counter()
    import polytf

    polytf.load(model, cache_dir=cache_dir, threads=threads, progress=False)
    return {"fresh_s": time.perf_counter() - started}


def openvino_child(model: str, threads: int) -> dict:
    started = time.perf_counter()
    import openvino as ov

    import_s = time.perf_counter() - started
    started = time.perf_counter()
    converted = ov.convert_model(model)
    converted_s = time.perf_counter() - started
    ov.Core().compile_model(converted, "CPU", {"INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})
    return {"convert_s": converted_s, "load_s": time.perf_counter() - started, "import_s": import_s}


def _run_child(arguments: list[str]) -> dict:
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc kept
    completed = subprocess.run([sys.executable, __file__, "--child", *arguments], capture_output=True, text=True, timeout=1800, env=environment)
    if completed.returncode != 0:
        raise RuntimeError(f"child {arguments} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _machine() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "?")
    return f"{model}, LLVM CPU `{llvm.get_host_cpu_name()}`, {len(os.sched_getaffinity(0))} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--models-dir", default="models", help="where MODEL.pb are (written with python -m polytf.model_zoo MODEL -o DIR/MODEL.pb)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--no-openvino", action="store_true")
    parser.add_argument("--out", default="results/load_time.md")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child is not None:
        kind, *rest = arguments.child
        if kind == "openvino":
            print(json.dumps(openvino_child(rest[0], int(rest[1]))))
        elif kind == "warm-fresh":
            print(json.dumps(fresh_child(rest[0], rest[1], int(rest[2]))))
        else:
            print(json.dumps(child(rest[0], rest[1], rest[2], kind == "warm-preimport", int(rest[3]))))
        return

    rows = []
    for name in arguments.models.split(","):
        model = str(Path(arguments.models_dir) / f"{name}.pb")
        with tempfile.TemporaryDirectory() as work:  # untimed: writes the bytecode cache of every module a load imports
            _run_child(["cold", model, str(Path(work) / "cache"), str(Path(work) / "out.npy"), str(arguments.threads)])
        runs: dict[str, list[dict]] = {"cold": [], "warm": [], "warm_preimport": [], "fresh": [], "openvino": []}
        identical = True
        for repeat in range(arguments.repeats):
            with tempfile.TemporaryDirectory() as work:
                cache = str(Path(work) / "cache")
                runs["cold"].append(_run_child(["cold", model, cache, str(Path(work) / "cold.npy"), str(arguments.threads)]))
                runs["warm"].append(_run_child(["warm", model, cache, str(Path(work) / "warm.npy"), str(arguments.threads)]))
                runs["warm_preimport"].append(_run_child(["warm-preimport", model, cache, str(Path(work) / "warm2.npy"), str(arguments.threads)]))
                runs["fresh"].append(_run_child(["warm-fresh", model, cache, str(arguments.threads)]))
                cold, warm = (Path(work) / "cold.npy").read_bytes(), (Path(work) / "warm.npy").read_bytes()
                identical = identical and cold == warm
            if not arguments.no_openvino:
                runs["openvino"].append(_run_child(["openvino", model, str(arguments.threads)]))
            print(f"{name} repeat {repeat + 1}: cold {runs['cold'][-1]['load_s']:.2f} s, warm {runs['warm'][-1]['load_s']:.2f} s"
                  + (f", OpenVINO {runs['openvino'][-1]['load_s']:.2f} s" if runs["openvino"] else ""), file=sys.stderr)

        def median(kind: str, column: str) -> float:
            values = [run.get(column, 0.0) for run in runs[kind]]
            return statistics.median(values) if values else float("nan")

        rows.append({
            "model": name,
            "kernels": runs["cold"][0]["kernels"],
            "identical": identical,
            **{f"cold_{column}": median("cold", column) for column in ("load_s", *BREAKDOWN)},
            **{f"warm_{column}": median("warm", column) for column in ("load_s", *BREAKDOWN)},
            "warm_compiled_load_s": median("warm_preimport", "load_s"),
            "compiler_import_s": median("warm_preimport", "compiler_import_s"),
            "openvino_s": median("openvino", "load_s"),
            "openvino_convert_s": median("openvino", "convert_s"),
            "openvino_import_s": median("openvino", "import_s"),
            "fresh_s": median("fresh", "fresh_s"),
        })
    write_report(rows, arguments)


def write_report(rows: list[dict], arguments: argparse.Namespace) -> None:
    lines = [
        "# Load time: cold and warm `polytf.load`, and OpenVINO's compile of the same .pb",
        "",
        f"{datetime.date.today()}; {_machine()}; {arguments.threads} threads; medians of {arguments.repeats} fresh processes per cell "
        "(systems alternate); Python's bytecode cache on. Written by `python results/load_time.py`.",
        "",
        "## Warm load as a user meets it (issue 47)",
        "",
        "A fresh process: the clock starts before `import polytf` (numpy and polytf's modules imported, the model loaded from the cache a cold load",
        "filled: kernels linked from their object code, the prepared model and the packed weights mapped from the cache). OpenVINO: `convert_model`",
        "+ `compile_model` (its import not counted; the last column adds it).",
        "",
        "| model | warm load, `import polytf` included | OpenVINO convert+compile | warm / OpenVINO | `import openvino` + convert+compile | warm / that |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        with_import = row["openvino_s"] + row["openvino_import_s"]
        lines.append(
            f"| {row['model']} | {row['fresh_s']:.3f} s | {row['openvino_s']:.3f} s | {row['fresh_s'] / row['openvino_s']:.2f} | "
            f"{with_import:.3f} s | {row['fresh_s'] / with_import:.2f} |"
        )
    lines += [
        "",
        "## Cold and warm loads, polytf's modules imported first",
        "",
        "numpy and `import polytf` done before the clock starts.",
        "",
        "- **cold**: empty cache, default recipes: every distinct kernel compiled (this process and one worker process per extra CPU).",
        "- **warm**: the cache the cold load filled: every kernel linked from its cached object code, the prepared model and packed "
        "weights mapped from the cache (`kept entries`). Load columns exclude "
        "importing polytf's modules (the phase timers import them first); a first `polytf.load` in a process also pays "
        "`compiler import` (polytf's compiler modules, numpy already imported). `warm, no phase timers` is a second warm run.",
        "- **OpenVINO**: `convert_model(pb)` + `compile_model(..., 'CPU', f32, LATENCY)`, no `CACHE_DIR`.",
        "- **identical**: the warm load's output on a fixed input equals the cold load's bit for bit.",
        "",
        "| model | kernels | cold load | OpenVINO convert+compile | cold / OpenVINO | warm load | warm, no phase timers | compiler import | identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = row["cold_load_s"] / row["openvino_s"] if row["openvino_s"] == row["openvino_s"] else float("nan")
        lines.append(
            f"| {row['model']} | {row['kernels']} | {row['cold_load_s']:.2f} s | {row['openvino_s']:.2f} s | {ratio:.2f} | "
            f"{row['warm_load_s']:.3f} s | {row['warm_compiled_load_s']:.3f} s | {row['compiler_import_s']:.3f} s | {'yes' if row['identical'] else '**no**'} |"
        )
    for kind in ("cold", "warm"):
        lines += ["", f"## Phases of the {kind} load (seconds, medians)", ""]
        header = ["model", "total", *(column[:-2].replace("_", " ") for column in BREAKDOWN)]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for row in rows:
            lines.append("| " + " | ".join([row["model"], f"{row[f'{kind}_load_s']:.3f}", *(f"{row[f'{kind}_{column}']:.3f}" for column in BREAKDOWN)]) + " |")
    lines += [
        "",
        "In the cold load, `parallel compile` is the wall time of compiling the missing kernels in this process and the workers;",
        "`isl schedule`, `ir emission`, `llvm opt` and `codegen` count only the kernels compiled in this process (the workers' share is not seen here).",
        "",
    ]
    Path(arguments.out).write_text("\n".join(lines))
    (Path(arguments.out).with_suffix(".json")).write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
