"""PyTorch versions of the GPU check's models (:mod:`polytf.bench.gpu_check_models`), from the
same numpy weights, for timing polytf beside PyTorch/cuDNN.

Each ``*_builder`` returns a function ``(torch, device) -> torch.nn.Module`` (eval mode,
float32, the weights as buffers on ``device``); PyTorch is imported only by
:func:`import_torch`, when a module is made. Images arrive NHWC, as in the GraphDef, and are
used as ``channels_last`` NCHW views (``x.permute(0, 3, 1, 2)``, no copy), so that cuDNN runs
its NHWC kernels; image outputs are permuted back to NHWC. The operations are PyTorch's own:
``conv2d`` (inference BatchNorm folded into it), ``max_pool2d``, ``linear``,
``scaled_dot_product_attention``, ``layer_norm``, exact ``gelu``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from polytf.errors import DependencyMissingError

__all__ = ["import_torch", "matmul_module", "conv_layer_builder", "resnet50_builder", "transformer_encoder_builder"]

Builder = Callable[[Any, Any], Any]
#: Keras ResNet's BatchNormalization epsilon
_RESNET_EPSILON = 1.001e-5


def import_torch() -> Any:
    """Import and return ``torch``.

    Raises:
        DependencyMissingError: PyTorch is not installed.
    """
    try:
        import torch
    except ImportError:
        raise DependencyMissingError("PyTorch is needed for the GPU check's PyTorch models: pip install torch") from None
    return torch


def _module(torch: Any, device: Any, tensors: Mapping[str, np.ndarray], forward: Callable[..., Any]) -> Any:
    """A module holding ``tensors`` as buffers (convolution kernels ``[O, I, KH, KW]`` in
    ``channels_last``), whose ``forward(*inputs)`` is ``forward(buffers, *inputs)``."""

    class CheckModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name, value in tensors.items():
                tensor = torch.from_numpy(np.ascontiguousarray(value))
                if tensor.dim() == 4:
                    tensor = tensor.contiguous(memory_format=torch.channels_last)
                self.register_buffer(name, tensor)

        def forward(self, *inputs: Any) -> Any:
            return forward(self._buffers, *inputs)

    return CheckModule().to(device).eval()


def matmul_module(torch: Any, device: Any) -> Any:
    """``(a: [M, K], b: [K, N]) -> a @ b``."""
    return _module(torch, device, {}, lambda buffers, a, b: torch.matmul(a, b))


def _convolution_tensors(prefix: str, parameters: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The kernel ``[KH, KW, C, F]`` as ``[F, C, KH, KW]`` and the bias, with an inference
    BatchNorm after it (``parameters`` with statistics, epsilon 1.001e-5) folded into both, as a
    deployed PyTorch model has it (``torch.fx``'s ``fuse_conv_bn_eval``; polytf's passes fold it
    too): ``kernel * s``, ``(bias - mean) * s + beta`` with ``s = gamma / sqrt(variance + eps)``."""
    kernel, bias = parameters["kernel"].astype(np.float64), parameters["bias"].astype(np.float64)
    if "mean" in parameters:
        scale = parameters["gamma"] / np.sqrt(parameters["variance"].astype(np.float64) + _RESNET_EPSILON)
        kernel, bias = kernel * scale, (bias - parameters["mean"]) * scale + parameters["beta"]
    return {f"{prefix}kernel": kernel.transpose(3, 2, 0, 1).astype(np.float32), f"{prefix}bias": bias.astype(np.float32)}


def _convolution(functional: Any, buffers: Mapping[str, Any], prefix: str, parameters: Mapping[str, Any], x: Any) -> Any:
    """conv2d + bias (BatchNorm folded in: :func:`_convolution_tensors`) of an NCHW ``x``;
    TensorFlow's SAME is symmetric here (stride 1, odd kernels only)."""
    padding = 0 if parameters["padding"] == "VALID" else parameters["kernel"].shape[0] // 2
    return functional.conv2d(x, buffers[f"{prefix}kernel"], buffers[f"{prefix}bias"], stride=parameters["stride"], padding=padding)


def conv_layer_builder(parameters: Mapping[str, Any]) -> Builder:
    """``input: [N, H, W, C] -> relu(conv2d(input) + bias): [N, H', W', F]`` (NHWC in and out)."""
    if parameters["padding"] == "SAME" and (parameters["stride"] != 1 or parameters["kernel"].shape[0] % 2 == 0):
        raise ValueError("SAME padding is symmetric in PyTorch only for stride 1 and odd kernels")

    def build(torch: Any, device: Any) -> Any:
        functional = torch.nn.functional

        def forward(buffers: Mapping[str, Any], x: Any) -> Any:
            y = _convolution(functional, buffers, "", parameters, x.permute(0, 3, 1, 2))
            return torch.relu(y).permute(0, 2, 3, 1)

        return _module(torch, device, _convolution_tensors("", parameters), forward)

    return build


def resnet50_builder(
    stem: Mapping[str, Any],
    blocks: list[tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]],
    dense: Mapping[str, np.ndarray],
) -> Builder:
    """``input: [N, H, W, 3] (NHWC) -> softmax probabilities [N, classes]``: zero pad 3, conv1 +
    BN (folded) + ReLU, zero pad 1, max pool 3x3/2, the bottleneck ``blocks`` (shortcut conv or None, the
    three convs), mean over H and W, linear, softmax."""
    tensors = _convolution_tensors("stem_", stem)
    for index, (shortcut, convolutions) in enumerate(blocks):
        for name, parameters in [("shortcut", shortcut), *(enumerate(convolutions))]:
            if parameters is not None:
                tensors |= _convolution_tensors(f"block{index}_{name}_", parameters)
    tensors |= {"dense_kernel": dense["kernel"].T, "dense_bias": dense["bias"]}

    def build(torch: Any, device: Any) -> Any:
        functional = torch.nn.functional

        def forward(buffers: Mapping[str, Any], x: Any) -> Any:
            x = functional.pad(x.permute(0, 3, 1, 2), (3, 3, 3, 3))
            x = torch.relu(_convolution(functional, buffers, "stem_", stem, x))
            x = functional.max_pool2d(functional.pad(x, (1, 1, 1, 1)), 3, 2)
            for index, (shortcut, convolutions) in enumerate(blocks):
                prefix = f"block{index}_"
                residual = x if shortcut is None else _convolution(functional, buffers, f"{prefix}shortcut_", shortcut, x)
                for position, parameters in enumerate(convolutions):
                    x = _convolution(functional, buffers, f"{prefix}{position}_", parameters, x)
                    x = torch.relu(x) if position < 2 else x
                x = torch.relu(residual + x)
            logits = functional.linear(x.mean(dim=(2, 3)), buffers["dense_kernel"], buffers["dense_bias"])
            return torch.softmax(logits, dim=-1)

        return _module(torch, device, tensors, forward)

    return build


def transformer_encoder_builder(weights: Mapping[str, np.ndarray], heads: int) -> Builder:
    """``input: [B, T, D] -> [B, T, D]``: post-norm encoder block, multi-head attention through
    ``scaled_dot_product_attention`` (scale ``1 / sqrt(D / heads)``), LayerNorm epsilon 1e-6,
    exact GELU. Kernels ``[in, ...]`` are stored as ``linear``'s ``[out, in]``."""
    width = weights["output_bias"].shape[0]
    tensors = {}
    for name, value in weights.items():
        if name.endswith("_kernel"):  # [input axes..., output axes...]: the output kernel has two input axes (heads, head width)
            inputs = int(np.prod(value.shape[: 2 if name == "output_kernel" else 1]))
            value = np.ascontiguousarray(value.reshape(inputs, -1).T)
        tensors[name] = value.reshape(-1) if name.endswith("_bias") else value

    def build(torch: Any, device: Any) -> Any:
        functional = torch.nn.functional

        def forward(buffers: Mapping[str, Any], x: Any) -> Any:
            batch, sequence, _ = x.shape

            def heads_of(role: str) -> Any:
                projected = functional.linear(x, buffers[f"{role}_kernel"], buffers[f"{role}_bias"])
                return projected.view(batch, sequence, heads, -1).transpose(1, 2)

            attended = functional.scaled_dot_product_attention(heads_of("query"), heads_of("key"), heads_of("value"))
            attended = functional.linear(
                attended.transpose(1, 2).reshape(batch, sequence, width), buffers["output_kernel"], buffers["output_bias"]
            )
            y = functional.layer_norm(x + attended, (width,), buffers["norm1_gamma"], buffers["norm1_beta"], 1e-6)
            hidden = functional.gelu(functional.linear(y, buffers["ffn1_kernel"], buffers["ffn1_bias"]))
            projected = functional.linear(hidden, buffers["ffn2_kernel"], buffers["ffn2_bias"])
            return functional.layer_norm(y + projected, (width,), buffers["norm2_gamma"], buffers["norm2_beta"], 1e-6)

        return _module(torch, device, tensors, forward)

    return build
