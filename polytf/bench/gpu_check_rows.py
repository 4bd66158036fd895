"""The bench rows of the GPU check (:mod:`polytf.bench.gpu_check`): what each one builds, and
how one row is compiled, checked and timed.

The rows, in the order they run (sizes of a real GPU; ``--dry-run`` runs the same rows at
the :data:`DRY_RUN_SIZES`, on the CPU emulation of the device), each model built without
TensorFlow (:mod:`polytf.bench.gpu_check_models`):

- ``matmul 4096x4096x4096``, ``matmul 1024x1024x1024``: ``[N, N] @ [N, N]``, against cuBLAS
  (``cupy.matmul``);
- each distinct Conv2D + BiasAdd + Relu of ResNet50 at batch 8 (20 layers), against cuDNN
  (PyTorch's ``conv2d`` with bias, then ReLU);
- ``transformer_encoder b8``: one post-norm encoder block, 128 tokens of 256, 4 heads, beside the
  same block in PyTorch;
- ``resnet50 b8``: the whole network at 224 x 224, beside the same network in PyTorch.

A row builds its frozen GraphDef, compiles it with the default GPU recipes
(:class:`~polytf.compiler.backends.CudaBackend`), runs it on seeded random inputs and checks
every output against the CPU reference (numpy, float64 accumulation:
:class:`~polytf.bench.baselines.NumpyGraph`) with the bench's tolerance
(:func:`~polytf.bench.accuracy.check_outputs`); only a correct row is timed: the model's
kernels with CUDA events (the median of ``repeats`` runs after ``warmup``, fewer for a slow
row: about 4 s of timed runs, at least 3), then its baseline the same way (FP32, TF32 off, ``cudnn.benchmark`` on). A PyTorch baseline's own output is checked
against the same reference. Errors are data: a row that fails says why and the check goes on.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BenchSizes", "FULL_SIZES", "DRY_RUN_SIZES", "CheckRow", "check_rows", "measure_row"]


@dataclass(frozen=True)
class BenchSizes:
    """The sizes of the rows: matmul orders, the batch and image size of ResNet50 and its layers,
    the encoder's batch, sequence, width, heads and feed-forward width, and the timing counts."""

    matmul_orders: tuple[int, ...] = (4096, 1024)
    batch: int = 8
    image_size: int = 224
    encoder: tuple[int, int, int, int, int] = (8, 128, 256, 4, 1024)
    warmup: int = 3
    repeats: int = 20


#: What a real GPU runs (the issue's rows).
FULL_SIZES = BenchSizes()
#: What ``--dry-run`` runs on the CPU emulation: the same rows, small enough for the test suite.
DRY_RUN_SIZES = BenchSizes(matmul_orders=(96, 64), batch=1, image_size=32, encoder=(1, 16, 32, 2, 64), warmup=1, repeats=3)


@dataclass(frozen=True)
class CheckRow:
    """One row: its label, the builder of its model, and its baseline: ``"library"``, the cuBLAS
    call of :func:`polytf.bench.cuda_baselines.library_baseline`; ``"cudnn"``, the layer's
    PyTorch module (one ``conv2d`` with bias, then ReLU: cuDNN, also for the 1x1 layers polytf
    turns into a MatMul); ``"pytorch"``, the model's PyTorch module."""

    label: str
    build: Callable[[], Any]
    baseline: str


def check_rows(sizes: BenchSizes) -> list[CheckRow]:
    """The rows at ``sizes``, in the order they run (module docstring)."""
    from polytf.bench import gpu_check_models as models

    rows = [CheckRow(f"matmul {n}x{n}x{n}", lambda n=n: models.matmul_model(n, n, n), "library") for n in sizes.matmul_orders]
    for layer in models.resnet50_conv_layers(sizes.batch, sizes.image_size):
        rows.append(CheckRow(layer.name, lambda layer=layer: models.conv_layer_model(layer), "cudnn"))
    batch, sequence, width, heads, feed_forward = sizes.encoder
    rows.append(CheckRow(f"transformer_encoder b{batch}", lambda: models.transformer_encoder_model(batch, sequence, width, heads, feed_forward), "pytorch"))
    rows.append(CheckRow(f"resnet50 b{sizes.batch}", lambda: models.resnet50_model(sizes.batch, sizes.image_size), "pytorch"))
    return rows


#: Seconds a row's timed runs may take, about: a slow kernel is timed fewer times (at least 3)
_TIMING_BUDGET_S = 4.0


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _pytorch_baseline(model, inputs: dict, expected: dict, sizes: BenchSizes, system: str) -> dict[str, Any]:
    """The model's PyTorch module on the GPU as the baseline ``system``: its max abs error
    against the reference, and its median device seconds (CUDA events, FP32, TF32 off,
    ``cudnn.benchmark`` on)."""
    import numpy as np
    import torch

    from polytf.bench.accuracy import check_outputs
    from polytf.bench.cuda_baselines import LibraryBaseline, fp32_torch, torch_elapsed_s

    fp32_torch(torch)
    device = torch.device("cuda")
    module = model.torch_module(device)
    tensors = [torch.from_numpy(np.ascontiguousarray(inputs[name])).to(device) for name in model.input_shapes]
    label = f"PyTorch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}), FP32, TF32 off"
    with torch.inference_mode():
        got = module(*tensors).float().cpu().numpy()
        (output,) = expected
        error = check_outputs({output: got}, expected, f"{model.name} (PyTorch)")
        median_s = LibraryBaseline(system, label, torch_elapsed_s(torch, lambda: module(*tensors))).median_s(sizes.repeats, sizes.warmup)
    return {"system": system, "label": label, "median_s": median_s, "max_abs_error": error}


def _baseline(row: CheckRow, model, graph, inputs: dict, expected: dict, sizes: BenchSizes) -> dict[str, Any]:
    """The row's baseline record: what it is and its median seconds, or why there is none (a
    missing library or a failing baseline is noted, never the row's failure)."""
    from polytf.bench.cuda_baselines import library_baseline

    try:
        if row.baseline != "library":
            return _pytorch_baseline(model, inputs, expected, sizes, row.baseline)
        baseline, note = library_baseline(graph)
        if baseline is None:
            return {"note": note}
        return {"system": baseline.system, "label": baseline.label, "note": note, "median_s": baseline.median_s(sizes.repeats, sizes.warmup)}
    except ImportError as error:
        return {"note": f"not run: {error}"}
    except Exception as error:  # noqa: BLE001 - a baseline's failure is reported in its row
        return {"note": f"failed: {type(error).__name__}: {error}"}


def measure_row(row: CheckRow, backend, workdir: Path, sizes: BenchSizes, baselines: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    """Build, check and time one row on ``backend`` (module docstring); ``baselines``: time the
    row's baseline too (a GPU with CuPy and PyTorch; not on the emulation).

    Returns:
        The row's record: ``status`` ``"ok"``, or ``"wrong"`` (an output beyond tolerance: not
        timed) with ``error``; sizes, seconds and errors as measured. Other failures raise.
    """
    from polytf.bench.accuracy import WrongResultError, check_outputs
    from polytf.bench.baselines import NumpyGraph
    from polytf.compiler.preparation import prepare_model
    from polytf.poly.flops import contraction_flops
    from polytf.runtime.sample_inputs import sample_inputs

    model = row.build()
    label = row.label
    record: dict[str, Any] = {"row": label, "status": "ok"}
    path = model.write(workdir / f"{label.replace(' ', '_').replace('>', '')}.pb")
    started = time.perf_counter()
    progress(f"{label}: compiling (default GPU recipes)")
    prepared = prepare_model(path)
    compiled = backend.build_model(prepared)
    record.update(compile_s=time.perf_counter() - started, kernels=len(compiled.kernels))
    record["flops"] = sum(contraction_flops(kernel.scop) for kernel in compiled.kernels)
    inputs = sample_inputs(compiled.input_types, seed=0)
    record["inputs"] = {name: list(value.shape) for name, value in inputs.items()}
    progress(f"{label}: CPU reference")
    expected = NumpyGraph(path)(**inputs)
    progress(f"{label}: running on the device, checking against the reference")
    try:
        record["max_abs_error"] = check_outputs(compiled(**inputs), expected, label)
    except WrongResultError as error:
        return {**record, "status": "wrong", "error": str(error)}
    device_inputs = {name: backend.device.upload(value) for name, value in inputs.items()}
    progress(f"{label}: timing")
    first_s = max(compiled.latency_s(device_inputs, 1, 1))  # a slow default recipe gets fewer repeats
    repeats = max(3, min(sizes.repeats, int(_TIMING_BUDGET_S / max(first_s, 1e-9))))
    record["polytf_s"] = _median(compiled.latency_s(device_inputs, repeats, max(0, sizes.warmup - 1)))
    record["repeats"] = repeats
    if len(compiled.kernels) > 1:
        profile = [(kernel.scop.name, _median(times)) for kernel, times in compiled.kernel_latency_s(device_inputs, max(3, repeats // 4), 1)]
        record["slowest_kernels"] = [{"kernel": name, "median_s": seconds} for name, seconds in sorted(profile, key=lambda p: -p[1])[:8]]
    progress(f"{label}: baseline")
    record["baseline"] = _baseline(row, model, prepared.graph, inputs, expected, sizes) if baselines else {"note": "not run on the emulated device"}
    baseline_s = record["baseline"].get("median_s")
    if baseline_s:
        record["baseline_over_polytf"] = baseline_s / record["polytf_s"]
    return record
