"""The CUDA target without a GPU: writes results/cuda_ptx_check.md.

For every kernel of every zoo model (batch 1; identical kernels once): its default GPU
recipe (:class:`polytf.targets.cuda.CudaTarget` search space, offline device limits) is

1. emitted as PTX for sm_80 and sm_90 and assembled with ``ptxas -v`` (registers per
   thread, spill bytes: the default recipes must not spill);
2. executed on the CPU in its mapped form (block and thread loops as ordinary loops,
   barriers as nothing, shared memory as scratch arrays) and compared with the kernel's
   numpy reference (rtol 1e-4, atol 1e-5 * max|reference| + 1e-6).

3. with ``--e2e``: the whole model is run by the CUDA runtime (:class:`CudaModel`) on the
   CPU emulation of the device (each kernel's GPU schedule compiled for the CPU) and
   compared with TensorFlow running the same GraphDef (the e2e tolerance).

    python results/cuda_ptx_check.py [MODEL ...] [--batch B] [--e2e] [--out FILE.md]

``--batch 32 --e2e resnet50 transformer_encoder`` checks the issue's batch-32 models (their
kernels differ: the batch is folded into the grid).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from polytf.compiler.preparation import prepare_model
from polytf.config import MeasurementConfig
from polytf.model_zoo import write_model
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import CudaTarget
from polytf.targets.ptxas import assemble, find_ptxas

MODELS = ["mlp", "cifar_cnn", "odd_matmul", "conv_bias_relu", "conv3x3_bias_relu_56", "matmul", "gpt2_block", "bert_encoder", "unet",
          "transformer_encoder", "mobilenet_v2", "resnet50", "inception_v3", "densenet121", "efficientnet_b0", "xception", "nasnet_mobile"]
ARCHITECTURES = ("sm_80", "sm_90")
CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)


def end_to_end(path: Path, prepared, target: CudaTarget) -> tuple[float, bool]:
    """The model on the emulated device against TensorFlow: (max error / max |reference|, within tolerance)."""
    from polytf.compiler.backends import CudaBackend
    from polytf.model_zoo import run_graphdef_with_tensorflow
    from polytf.model_zoo.language_models import zoo_inputs
    from polytf.runtime.cuda.emulation import EmulatedDevice

    model = CudaBackend(target, 1, EmulatedDevice()).build_model(prepared)
    feeds = zoo_inputs(model.input_types, seed=7)
    (output,) = model.output_names
    got = model(**feeds)[output]
    reference = run_graphdef_with_tensorflow(path, feeds, [output])[output]
    scale = float(np.max(np.abs(reference)))
    return float(np.max(np.abs(got - reference))) / scale, bool(np.allclose(got, reference, rtol=1e-4, atol=1e-5 * scale + 1e-6))


def check_model(name: str, directory: Path, targets: dict[str, CudaTarget], cpu: CpuTarget, seen: set[str], batch: int = 1, e2e: bool = False) -> dict:
    path = write_model(name, directory / f"{name}.pb", batch=batch)
    prepared = prepare_model(path, fallback=False)
    row = {"model": name, "kernels": 0, "assembled": 0, "spilling": 0, "max_registers": 0, "cpu_ok": 0, "failures": [], "worst_error": 0.0, "e2e": "not run"}
    if e2e:
        try:
            relative, ok = end_to_end(path, prepared, targets[ARCHITECTURES[-1]])
            row["e2e"] = f"{relative:.2e} ({'within' if ok else 'OUTSIDE'} tolerance)"
            if not ok:
                row["failures"].append(f"{name}: the CUDA model on the emulated device differs from TensorFlow by {relative:.2e} of max |reference|")
        except Exception as error:  # reported in the table
            row["e2e"] = "failed"
            row["failures"].append(f"{name} end to end: {error}"[:300])
    for kernel in prepared.kernels:
        fingerprint = kernel.scop.fingerprint()
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        row["kernels"] += 1
        recipe = targets[ARCHITECTURES[0]].search_space(kernel.scop).default_recipe()
        try:
            for architecture, target in targets.items():
                report = assemble(target.compile(kernel.scop, recipe).ptx, architecture)
                row["max_registers"] = max(row["max_registers"], *report.registers)
                row["spilling"] += report.spill_bytes > 0
            row["assembled"] += 1
        except Exception as error:  # reported in the table
            row["failures"].append(f"{kernel.scop.name} PTX: {error}"[:300])
        try:
            error, worst = KernelBench(kernel, seed=3).verify(cpu.compile(kernel.scop, recipe), 1, CHECK)
            if error:
                row["failures"].append(f"{kernel.scop.name} CPU run of {recipe.describe()}: {error}")
            else:
                row["cpu_ok"] += 1
                row["worst_error"] = max(row["worst_error"], worst)
        except Exception as error:
            row["failures"].append(f"{kernel.scop.name} CPU run: {error}"[:300])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--batch", type=int, default=1, help="leading input dimension of every model (default 1)")
    parser.add_argument("--e2e", action="store_true", help="also run each whole model on the emulated device against TensorFlow")
    parser.add_argument("--out", default=str(Path(__file__).with_name("cuda_ptx_check.md")))
    args = parser.parse_args()
    targets = {a: CudaTarget(compute_capability=a) for a in ARCHITECTURES}
    cpu = CpuTarget()
    seen: set[str] = set()
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        for name in args.models:
            began = time.perf_counter()
            row = check_model(name, Path(directory), targets, cpu, seen, args.batch, args.e2e)
            row["seconds"] = time.perf_counter() - began
            rows.append(row)
            print(f"{name}: {row['kernels']} new kernels, {row['assembled']} assembled, {row['cpu_ok']} correct on the CPU, {len(row['failures'])} failures ({row['seconds']:.0f} s)", flush=True)
    lines = [
        "# CUDA target without a GPU: PTX assembled, GPU-mapped default recipes run on the CPU",
        "",
        f"`python results/cuda_ptx_check.py {' '.join(sys.argv[1:])}`".replace(" `", "`") + f" on an {platform.machine()} machine ({os.cpu_count()} cores, no GPU), "
        f"{time.perf_counter() - start:.0f} s in all; batch {args.batch}.",
        f"ptxas: `{find_ptxas().name if find_ptxas() else 'none'}` from the nvidia-cuda-nvcc wheel; LLVM emits PTX for {', '.join(f'{a} (+ptx{t.ptx_version})' for a, t in targets.items())}.",
        "Each kernel once (identical kernels of later models are skipped). The CPU run executes the GPU schedule tree with its",
        "block and thread loops as ordinary loops and barriers as nothing, against the kernel's numpy reference",
        "(rtol 1e-4, atol 1e-5 x max|reference| + 1e-6).",
        "",
        "| model | kernels | PTX assembled for sm_80 and sm_90 | kernels spilling | max registers / thread | correct on the CPU | worst abs error | whole model vs TF (max err / max ref) | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['kernels']} | {row['assembled']} | {row['spilling']} | {row['max_registers']} | {row['cpu_ok']} | {row['worst_error']:.2e} | {row['e2e']} | {row['seconds']:.0f} |"
        )
    failures = [f for row in rows for f in row["failures"]]
    lines += ["", f"Failures: {len(failures)}", *[f"- {f}" for f in failures]]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
