"""GPU baselines of ``polytf bench --target cuda``: the vendor libraries on the same device.

* ``cublas``: cuBLAS through ``cupy.matmul``, for a model whose one contraction is a
  ``MatMul`` or ``BatchMatMulV2/V3`` (``[..., M, K] @ [..., K, N]``, FP32: ``CUPY_TF32``
  must be unset or 0, else CuPy lets cuBLAS round the operands to TF32);
* ``cudnn``: cuDNN through PyTorch (``torch.nn.functional.conv2d``; CuPy 14 has no cuDNN),
  for a model whose one contraction is an NHWC ``Conv2D`` with symmetric padding, on
  ``channels_last`` tensors, FP32 (``torch.backends.cudnn.allow_tf32`` and
  ``torch.backends.cuda.matmul.allow_tf32`` set to False: TF32 is on by default for
  cuDNN), with the bias and ReLU the model applies after it.

Models with several contractions (ResNet50, a Transformer encoder) have no single library
call to compare with: their rows report polytf's latency alone. A baseline runs on random
operands of the model's shapes and is timed with the library's own CUDA events, one launch
at a time after warm-up, like polytf's kernels.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from polytf.errors import PolytfError
from polytf.graph import Graph
from polytf.ops.attributes import attr_bool, attr_ints, attr_string
from polytf.passes.fusion import is_compute
from polytf.runtime.cuda.backend import import_cupy

__all__ = ["LibraryBaseline", "library_baseline", "check_fp32_settings", "fp32_torch", "torch_elapsed_s", "MATMUL_OPS", "CONVOLUTION_OPS"]

MATMUL_OPS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "BatchMatMul")
CONVOLUTION_OPS = ("Conv2D",)
_CONTRACTIONS = (*MATMUL_OPS, *CONVOLUTION_OPS, "DepthwiseConv2dNative", "Conv2DBackpropInput", "Einsum")


@dataclass(frozen=True)
class LibraryBaseline:
    """One library call to time against polytf.

    Attributes:
        system: ``"cublas"`` or ``"cudnn"`` (the report's column).
        label: what it runs, in words (``"cupy.matmul [4096, 4096] @ [4096, 4096] (cuBLAS, FP32)"``).
        elapsed_s: runs the call once and returns its device seconds (CUDA events).
    """

    system: str
    label: str
    elapsed_s: Callable[[], float]

    def median_s(self, repeats: int, warmup: int) -> float:
        """Median device seconds of ``repeats`` calls after ``warmup`` untimed ones."""
        for _ in range(warmup):
            self.elapsed_s()
        return float(np.median([self.elapsed_s() for _ in range(max(1, repeats))]))


def check_fp32_settings() -> None:
    """Refuse to time cuBLAS in TF32.

    Raises:
        PolytfError: ``CUPY_TF32`` is set to something other than 0.
    """
    value = os.environ.get("CUPY_TF32", "0")
    if value not in ("", "0"):
        raise PolytfError(f"CUPY_TF32={value} lets cuBLAS compute in TF32; polytf's kernels compute in FP32: unset CUPY_TF32 for the bench")


def fp32_torch(torch) -> None:
    """Make PyTorch compute in FP32 on the GPU (TF32 off for cuDNN and matrix products: on by
    default for cuDNN) and let cuDNN pick its fastest algorithm during the warm-up."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def torch_elapsed_s(torch, call: Callable[[], object]) -> Callable[[], float]:
    """A function that runs ``call`` once and returns its device seconds (a CUDA event pair)."""

    def elapsed_s() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return elapsed_s


def library_baseline(graph: Graph) -> tuple[LibraryBaseline | None, str]:
    """The baseline of a typed, optimised graph (module docstring), and a note saying what it
    is or why there is none.

    Raises:
        DependencyMissingError: CuPy is not installed (a matmul baseline).
    """
    contractions = [node for name, node in graph.nodes.items() if node.op in _CONTRACTIONS and is_compute(graph, name)]
    if len(contractions) != 1:
        return None, f"no single library call computes this model ({len(contractions)} contractions): polytf's latency alone"
    node = contractions[0]
    if node.op in MATMUL_OPS:
        return _cublas(graph, node), "cuBLAS via cupy.matmul, FP32 (CUPY_TF32 unset)"
    if node.op in CONVOLUTION_OPS:
        return _cudnn(graph, node)
    return None, f"no library baseline for {node.op}"


def _cublas(graph: Graph, node) -> LibraryBaseline:
    check_fp32_settings()
    cupy = import_cupy()
    x, y = (tuple(int(d) for d in graph.types[t].shape) for t in node.inputs[:2])
    if node.op == "MatMul":
        flags = (attr_bool(node, "transpose_a", False), attr_bool(node, "transpose_b", False))
    else:
        flags = (attr_bool(node, "adj_x", False), attr_bool(node, "adj_y", False))
    x = x[:-2] + x[-2:][::-1] if flags[0] else x
    y = y[:-2] + y[-2:][::-1] if flags[1] else y
    rng = cupy.random.default_rng(0)
    a, b = rng.standard_normal(x, dtype=cupy.float32), rng.standard_normal(y, dtype=cupy.float32)
    result = cupy.matmul(a, b)

    def elapsed_s() -> float:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        cupy.matmul(a, b, out=result)
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3

    return LibraryBaseline("cublas", f"cupy.matmul {list(x)} @ {list(y)} (cuBLAS, FP32)", elapsed_s)


def _consumer(graph: Graph, tensor: str, ops: tuple[str, ...]):
    consumers = [n for n in graph.nodes.values() if tensor in n.inputs]
    return consumers[0] if len(consumers) == 1 and consumers[0].op in ops else None


def _cudnn(graph: Graph, node) -> tuple[LibraryBaseline | None, str]:
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed: no cuDNN baseline (pip install torch)"
    if attr_string(node, "data_format", "NHWC") != "NHWC":
        return None, "the cuDNN baseline takes NHWC convolutions only"
    batch, height, width, channels = (int(d) for d in graph.types[node.inputs[0]].shape)
    kernel_height, kernel_width, _, filters = (int(d) for d in graph.types[node.inputs[1]].shape)
    strides = attr_ints(node, "strides", (1, 1, 1, 1), length=4)[1:3]
    dilations = attr_ints(node, "dilations", (1, 1, 1, 1), length=4)[1:3]
    padding = attr_string(node, "padding", "VALID")
    if padding == "VALID":
        pads = (0, 0)
    elif padding == "SAME" and strides == (1, 1) and all(((k - 1) * d) % 2 == 0 for k, d in zip((kernel_height, kernel_width), dilations)):
        pads = (((kernel_height - 1) * dilations[0]) // 2, ((kernel_width - 1) * dilations[1]) // 2)
    else:
        return None, f"{padding} padding with strides {strides}: TensorFlow pads asymmetrically, cuDNN cannot; no baseline"
    bias = _consumer(graph, node.output(0), ("BiasAdd", "AddV2", "Add"))
    relu = _consumer(graph, bias.output(0), ("Relu",)) if bias is not None else _consumer(graph, node.output(0), ("Relu",))
    fp32_torch(torch)
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(batch, channels, height, width, device=device, generator=generator).to(memory_format=torch.channels_last)
    w = torch.randn(filters, channels, kernel_height, kernel_width, device=device, generator=generator).to(memory_format=torch.channels_last)
    b = torch.randn(filters, device=device, generator=generator) if bias is not None else None

    def call() -> None:
        y = torch.nn.functional.conv2d(x, w, b, stride=strides, padding=pads, dilation=dilations)
        if relu is not None:
            torch.relu_(y)

    parts = "conv2d" + (" + bias" if b is not None else "") + (" + ReLU" if relu is not None else "")
    label = f"torch {parts} [{batch}, {height}, {width}, {channels}] * [{kernel_height}, {kernel_width}, {channels}, {filters}] (cuDNN, channels_last, FP32)"
    return LibraryBaseline("cudnn", label, torch_elapsed_s(torch, call)), f"cuDNN via PyTorch {torch.__version__} ({parts}), TF32 off"
