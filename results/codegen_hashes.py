"""Hashes of the code polytf generates for every zoo model: a restructuring must not change them.

For every kernel of every zoo model (batch 1) and every recipe of its search space that a
model or the tuner starts from (the default recipe, then each heuristic recipe):

* CPU (the host's :class:`CpuTarget`, 2 threads): SHA-256 of the LLVM IR polytf emits, and
  with ``--optimised`` of the IR after LLVM's optimisation pipeline;
* CUDA (:class:`CudaTarget` for sm_80 and sm_90, no GPU needed): SHA-256 of the NVPTX IR
  polytf emits and of the PTX LLVM assembles from it.

(The first 16 hexadecimal digits of each.)

Identical kernels (same Scop fingerprint) are emitted once per model. The JSON written maps
``model/kernel`` to the Scop fingerprint, the CPU cache-key digest (which old tuning records
are found by) and, per target, one line of hashes per recipe in that order, so two runs
compare with

    python results/codegen_hashes.py --out after.json
    python results/codegen_hashes.py --compare results/codegen_hashes_61c8331.json after.json

(``--compare`` prints every difference and exits 1 when there is one). A kernel whose recipe
fails to compile records the error's type instead of a hash, so failures compare too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

from polytf.compiler.kernel_compilation import constant_arrays
from polytf.compiler.preparation import prepare_model
from polytf.config import CodegenConfig, code_knobs
from polytf.model_zoo import MODEL_NAMES, write_model
from polytf.storage.cache_key import CacheKey
from polytf.targets.compile_driver import emit_kernel
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import CudaTarget

ARCHITECTURES = ("sm_80", "sm_90")
CPU_THREADS = 2


def _sha(text: str) -> str:
    """The first 16 hexadecimal digits of the SHA-256 of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _row(hashes: dict) -> str:
    """One recipe's hashes as ``name=value`` words (sorted), so that a run is small and diffs by line."""
    return " ".join(f"{name}={value}" for name, value in sorted(hashes.items()))


def _recipes(space) -> list:
    return list(dict.fromkeys([space.default_recipe(), *space.heuristic_recipes()]))


def _cpu_hashes(kernel, cpu: CpuTarget, optimised: bool) -> list[str]:
    rows = []
    for recipe in _recipes(cpu.search_space(kernel.scop, CPU_THREADS)):
        row = {}
        try:
            code = emit_kernel(kernel.scop, recipe, cpu, constant_arrays(kernel)).code
            row["ir"] = _sha(code)
            if optimised:
                row["optimised_ir"] = _sha(str(cpu.optimise(code, kernel.scop.name)))
        except Exception as error:  # noqa: BLE001 - a failure is part of the behaviour being compared
            row["error"] = type(error).__name__
        rows.append(_row(row))
    return rows


def _cuda_hashes(kernel, targets: dict) -> list[str]:
    rows = []
    for recipe in _recipes(targets[ARCHITECTURES[0]].search_space(kernel.scop)):
        row = {}
        try:
            for architecture, target in targets.items():
                code = emit_kernel(kernel.scop, recipe, target, constant_arrays(kernel)).code
                row[f"nvptx_ir_{architecture}"] = _sha(code)
                row[f"ptx_{architecture}"] = _sha(target.ptx(code, kernel.scop.name)[0])
        except Exception as error:  # noqa: BLE001
            row["error"] = type(error).__name__
        rows.append(_row(row))
    return rows


def model_hashes(job: tuple[str, bool]) -> tuple[str, dict, float]:
    """``{kernel name: {...}}`` of one zoo model (run in a worker process)."""
    name, optimised = job
    began = time.perf_counter()
    cpu = CpuTarget()
    targets = {a: CudaTarget(compute_capability=a) for a in ARCHITECTURES}
    knobs = code_knobs(CodegenConfig())
    result: dict = {}
    seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as directory:
        prepared = prepare_model(write_model(name, Path(directory) / f"{name}.pb"), fallback=False)
    for kernel in prepared.kernels:
        fingerprint = kernel.scop.fingerprint()
        entry = {
            "fingerprint": fingerprint,
            "ops": [op for _, op in kernel.scop.ops],
            "cpu_key": CacheKey(fingerprint, cpu.fingerprint(), CPU_THREADS, knobs).digest(),
        }
        if fingerprint in seen:
            entry["same_as"] = seen[fingerprint]
        else:
            seen[fingerprint] = kernel.scop.name
            entry["cpu"] = _cpu_hashes(kernel, cpu, optimised)
            entry["cuda"] = _cuda_hashes(kernel, targets)
        result[kernel.scop.name] = entry
    return name, result, time.perf_counter() - began


def compare(before_path: str, after_path: str) -> int:
    """Print every difference between two runs (the models of ``after_path``, which may be a
    subset of ``before_path``'s); 1 when there is one."""
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    differences = []
    for model in sorted(after["models"]):
        old, new = before["models"].get(model), after["models"][model]
        if old is None:
            differences.append(f"{model}: not in {before_path}")
            continue
        if list(old) != list(new):
            differences.append(f"{model}: kernels {list(old)} before, {list(new)} after")
            continue
        for kernel, entry in old.items():
            other = new[kernel]
            for field in sorted(set(entry) | set(other)):
                if entry.get(field) != other.get(field):
                    differences.append(f"{model}/{kernel}: {field} differs")
    skipped = sorted(set(before["models"]) - set(after["models"]))
    kernels = sum(len(m) for m in after["models"].values())
    hashes = sum(len(row.split()) for m in after["models"].values() for e in m.values() for t in ("cpu", "cuda") for row in e.get(t, ()))
    print(
        f"{len(after['models'])} models, {kernels} kernels, {hashes} hashes compared: {len(differences)} differences"
        + (f" ({len(skipped)} models of {before_path} not run: {', '.join(skipped)})" if skipped else "")
    )
    for line in differences:
        print(" ", line)
    return 1 if differences else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODEL_NAMES))
    parser.add_argument("--out", default="codegen_hashes.json", help="the JSON file to write")
    parser.add_argument("--optimised", action="store_true", help="also hash the CPU IR after LLVM's optimisation (slower)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two runs instead")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    began = time.perf_counter()
    models: dict = {}
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.jobs) as pool:
        for name, result, seconds in pool.imap_unordered(model_hashes, [(m, args.optimised) for m in args.models]):
            models[name] = result
            print(f"{name}: {len(result)} kernels, {seconds:.0f} s", flush=True)
    report = {
        "cpu": CpuTarget().fingerprint(),
        "architectures": list(ARCHITECTURES),
        "optimised": args.optimised,
        "seconds": round(time.perf_counter() - began, 1),
        "models": {name: models[name] for name in args.models},
    }
    Path(args.out).write_text(json.dumps(report, indent=0, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({report['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
