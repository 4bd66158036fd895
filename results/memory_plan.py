"""The memory plan per model: workspace and weight bytes before and after, the AOT workspace,
and the peak RSS of a fresh process doing ``polytf.load`` + calls: writes results/memory_plan.md.

Usage::

    python results/memory_plan.py [--models mobilenet_v2,resnet50,densenet121,efficientnet_b0]
        [--models-dir DIR] [--threads 2] [--calls 10] [--baseline CHECKOUT] [--no-aot]
        [--out results/memory_plan.md]

``DIR/MODEL.pb`` are frozen GraphDefs written with ``python -m polytf.model_zoo MODEL -o
DIR/MODEL.pb`` (missing ones are written first, in a child process that imports TensorFlow).

Per model:

- **execution context** (one per call in flight): the bytes of its intermediates, kernel
  temporaries and scratch arrays, each in its own buffer (*before*) and with the memory plan
  (*after*: one arena shared by liveness, :mod:`polytf.plan.memory_plan`, plus the scratch
  arrays that keep a zero-filled buffer of their own);
- **weights** held by the model: every constant the kernels read, as it is and packed
  (*before*: the original of a packed weight kept too) and without the originals that only
  packed copies read (*after*);
- **AOT**: the workspace and weights blob of ``polytf compile``'s layout of the same kernels
  (default recipes; :func:`polytf.export.model_layout.layout_model`), with ``--no-aot`` skipped;
- **peak RSS**: a fresh process (``--child``) that imports numpy and polytf (never
  TensorFlow: checked), loads the model from a warm cache (a first child fills it), calls it
  ``--calls`` times on one input and reports its peak resident set (VmHWM, and
  ``resource.getrusage(RUSAGE_SELF).ru_maxrss``, which agrees while the parent stays small),
  with VmRSS after ``import polytf``, after importing the compiler (islpy, llvmlite), after the
  load and after the calls. With ``--baseline CHECKOUT`` (another checkout of polytf, e.g. a
  ``git worktree`` of the commit before), the same child runs that checkout's code too, so
  the report has both in one run.

Run it on a quiet machine (RSS does not depend on load, latency would).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("mobilenet_v2", "resnet50", "densenet121", "efficientnet_b0")
SUBPACKAGES = ("schedules", "autotune", "targets")  # mapped to polytf.<name> (pyproject's package-dir)


def _vm_rss_mb(field: str = "VmRSS") -> float:
    """``field`` of /proc/self/status in MB: VmRSS (resident now) or VmHWM (the peak)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(model_path: str, threads: int, calls: int) -> dict:
    """One fresh process: RSS after each phase, the peak, and the model's buffer sizes."""
    import resource

    import numpy as np

    row: dict = {"rss_numpy_mb": _vm_rss_mb()}
    import polytf

    row["rss_import_mb"] = _vm_rss_mb()
    import polytf.compiler.loading  # noqa: F401 - what the first load imports: islpy, llvmlite, the compiler

    row["rss_compiler_mb"] = _vm_rss_mb()
    begin = time.perf_counter()
    model = polytf.load(model_path, threads=threads)
    row["load_s"] = time.perf_counter() - begin
    row["rss_load_mb"] = _vm_rss_mb()
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(tuple(t.shape)).astype(t.dtype) for name, t in model.input_types.items()}
    for _ in range(calls):
        model(**inputs)
    row["rss_calls_mb"] = _vm_rss_mb()
    row["peak_rss_mb"] = _vm_rss_mb("VmHWM")
    # ru_maxrss also counts the parent's resident set at fork: the parent stays small (AOT in a child)
    row["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row["tensorflow_imported"] = "tensorflow" in sys.modules
    row.update(_model_bytes(model))
    return row


def _model_bytes(model) -> dict:
    """Workspace and weight bytes of a built model (empty for a polytf without a memory plan)."""
    import numpy as np

    if not hasattr(model, "memory_plan"):
        return {}
    from polytf.passes.fusion import resolve_view
    from polytf.plan.bindings import PRIVATE, UNREAD, KernelPlan
    from polytf.plan.memory_plan import temporary_key

    plan = model.memory_plan
    graph = getattr(model, "graph", None)  # a model keeps no graph since issue 28's fifth session
    if graph is None:
        from polytf.compiler.preparation import prepare_model

        graph = prepare_model(model.source).graph
    own_scratch = 0
    dropped: dict[str, int] = {}
    for position, step in enumerate(model._steps):
        if not isinstance(step, KernelPlan):
            continue
        for slot, (binding, info) in enumerate(zip(step.bindings, step.kernel.arrays)):
            nbytes = int(np.prod(info.shape, dtype=np.int64)) * np.dtype(info.dtype).itemsize
            if binding.kind == PRIVATE and temporary_key(position, slot) not in plan.offsets:
                own_scratch += max(nbytes, int(step.kernel.argument_bytes[slot]))
            elif binding.kind == UNREAD and info.tensor:
                dropped[resolve_view(graph, info.tensor)] = nbytes
    weights = sum(value.nbytes for value in model._constants.values())
    dropped_bytes = sum(nbytes for storage, nbytes in dropped.items() if storage not in model._constants)
    return {
        "context_before_bytes": plan.unshared_bytes + own_scratch,
        "context_after_bytes": plan.arena_bytes + own_scratch,
        "arena_bytes": plan.arena_bytes,
        "own_scratch_bytes": own_scratch,
        "weights_before_bytes": weights + dropped_bytes,
        "weights_after_bytes": weights,
    }


def aot_bytes(model_path: str, threads: int) -> dict:
    """Workspace and weights of the exported layout (default recipes, as ``polytf compile``)."""
    from polytf.compiler.kernel_compilation import compile_steps
    from polytf.compiler.preparation import prepare_model
    from polytf.export.kernel_code import linkable_kernel
    from polytf.export.model_layout import layout_model
    from polytf.targets.cpu import CpuTarget

    prepared = prepare_model(model_path)
    target = CpuTarget()
    steps, _ = compile_steps(prepared, None, target, threads, compiler=linkable_kernel(target))
    layout = layout_model(prepared.graph, steps, Path(model_path).name)
    return {"aot_workspace_bytes": layout.workspace_bytes, "aot_weights_bytes": len(layout.weights)}


def _baseline_path(checkout: Path, into: Path) -> Path:
    """A directory to put first on PYTHONPATH so that ``import polytf`` is ``checkout``'s, laid
    out as installed (schedules/, autotune/, targets/ inside polytf/)."""
    package = into / "polytf"
    package.mkdir(parents=True)
    for entry in (checkout / "polytf").iterdir():
        (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        if (checkout / name).is_dir() and not (package / name).exists():
            (package / name).symlink_to(checkout / name)
    return into


def _run_child(model_path: Path, threads: int, calls: int, pythonpath: Path | None = None, aot: bool = False) -> dict:
    environment = dict(os.environ)
    if pythonpath is not None:
        environment["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{environment.get('PYTHONPATH', '')}"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--aot-child" if aot else "--child",
        str(model_path),
        "--threads",
        str(threads),
        "--calls",
        str(calls),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if done.returncode:
        raise RuntimeError(f"child for {model_path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ensure_model(models_dir: Path, name: str) -> Path:
    path = models_dir / f"{name}.pb"
    if not path.exists():
        models_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "polytf.model_zoo", name, "-o", str(path)], check=True)
    return path


def _mb(value) -> str:
    return "—" if value is None else f"{value / 1e6:.1f}"


def _report(rows: dict, arguments, elapsed_s: float, baseline: bool) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs"
    try:
        import llvmlite.binding as llvm

        machine += f", LLVM CPU `{llvm.get_host_cpu_name()}`"
    except ImportError:
        pass
    lines = [
        "# Memory plan: workspace, weights and peak RSS per model",
        "",
        f"Written by `python results/memory_plan.py --models {','.join(rows)} --threads {arguments.threads} --calls {arguments.calls}"
        f"{' --baseline CHECKOUT' if baseline else ''}` on {datetime.date.today()} in {elapsed_s:.0f} s ({machine}); batch 1.",
        "",
        "Execution context: a call's intermediates, kernel temporaries and scratch arrays, each in a buffer of its own (before) "
        "and shared by liveness in one arena, greedy by size (after; scratch arrays with elements no copy writes keep their own). "
        "Weights: the constants the model holds, a packed weight's original included (before) and kept only packed (after). "
        "AOT: `polytf compile`'s workspace and weights blob (default recipes). "
        f"Peak RSS: the peak resident set (VmHWM) of a fresh process doing `polytf.load` (warm cache) + "
        f"{arguments.calls} calls, TensorFlow never imported.",
        "",
        "| model | context before MB | context after MB | weights before MB | weights after MB | AOT workspace MB | AOT weights MB |"
        + (" peak RSS before MB |" if baseline else "")
        + " peak RSS MB |",
        "|---|---|---|---|---|---|---|" + ("---|" if baseline else "") + "---|",
    ]
    for name, row in rows.items():
        after = row["after"]
        cells = [
            name,
            _mb(after.get("context_before_bytes")),
            _mb(after.get("context_after_bytes")),
            _mb(after.get("weights_before_bytes")),
            _mb(after.get("weights_after_bytes")),
            _mb(row.get("aot_workspace_bytes")),
            _mb(row.get("aot_weights_bytes")),
        ]
        if baseline:
            cells.append(f"{row['before']['peak_rss_mb']:.0f}")
        cells.append(f"{after['peak_rss_mb']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Where the RSS goes (VmRSS, MB, this tree): after importing numpy, `import polytf`, the compiler's imports "
        "(islpy, llvmlite and its LLVM library), `polytf.load`, and the calls.",
        "",
        "| model | numpy | import polytf | + compiler | after load | after calls | peak | ru_maxrss | load s | TensorFlow imported |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        after = row["after"]
        lines.append(
            f"| {name} | {after['rss_numpy_mb']:.0f} | {after['rss_import_mb']:.0f} | {after['rss_compiler_mb']:.0f} | "
            f"{after['rss_load_mb']:.0f} | {after['rss_calls_mb']:.0f} | {after['peak_rss_mb']:.0f} | {after['ru_maxrss_mb']:.0f} | "
            f"{after['load_s']:.1f} | "
            f"{'yes' if after['tensorflow_imported'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--models-dir", default="models", help="where MODEL.pb are (written if missing)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--baseline", type=Path, default=None, help="another polytf checkout to measure the peak RSS of too")
    parser.add_argument("--no-aot", action="store_true", help="skip the AOT layout (it compiles every kernel's LLVM IR)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".md"))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--aot-child", default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(child(arguments.child, arguments.threads, arguments.calls)))
        return
    if arguments.aot_child:
        print(json.dumps(aot_bytes(arguments.aot_child, arguments.threads)))
        return
    begin = time.perf_counter()
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        baseline = _baseline_path(arguments.baseline.resolve(), Path(scratch) / "baseline") if arguments.baseline else None
        for name in arguments.models.split(","):
            path = _ensure_model(Path(arguments.models_dir), name)
            _run_child(path, arguments.threads, 1)  # fills the cache: the measured loads are warm
            row = {"after": _run_child(path, arguments.threads, arguments.calls)}
            if baseline is not None:
                _run_child(path, arguments.threads, 1, baseline)
                row["before"] = _run_child(path, arguments.threads, arguments.calls, baseline)
            if not arguments.no_aot:
                row.update(_run_child(path, arguments.threads, 0, aot=True))
            rows[name] = row
            print(name, json.dumps(row), flush=True)
    arguments.out.write_text(_report(rows, arguments, time.perf_counter() - begin, baseline is not None))
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()
