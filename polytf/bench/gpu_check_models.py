"""The GPU check's models, built without TensorFlow: frozen GraphDefs with random weights and a
PyTorch module of each with the same weights, so that polytf's CUDA kernels can be timed beside
PyTorch/cuDNN on a machine that has CuPy and PyTorch but no TensorFlow.

* :func:`matmul_model`: ``a: [M, K] @ b: [K, N]``, both placeholders (a cuBLAS row of
  :func:`polytf.bench.cuda_baselines.library_baseline`);
* :func:`conv_layer_model`: ``Relu(BiasAdd(Conv2D(input, W), b))``, NHWC, one layer of
  :func:`resnet50_conv_layers` (a cuDNN row; a 1x1 stride-1 layer becomes a MatMul in polytf's
  passes, so a cuBLAS row);
* :func:`resnet50_model`: ResNet50 v1 (He et al., "Deep Residual Learning for Image
  Recognition", CVPR 2016) as ``keras.applications.ResNet50`` builds it;
* :func:`transformer_encoder_model`: a post-norm Transformer encoder block (Vaswani et al.,
  "Attention Is All You Need", NeurIPS 2017) as :func:`polytf.model_zoo.transformer_encoder`
  builds it with Keras' ``MultiHeadAttention``.

ResNet50 and the encoder are written with the op patterns Keras 3 freezes those layers into
(:mod:`polytf.bench.graphdef_writer`), so that polytf's graph passes give the same kernels
as for the zoo's Keras models. Weights are drawn with ``numpy.random.default_rng(seed)``:
kernels normal with He's fan-in scaling (``std = sqrt(2 / fan_in)`` before a ReLU,
``sqrt(1 / fan_in)`` elsewhere), biases, ``beta`` and moving means normal with std 0.1,
``gamma`` and moving variances uniform in [0.5, 1.5]; all float32. Every model has output
node ``"Identity"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from polytf.bench import torch_check_modules as torch_modules
from polytf.bench.graphdef_writer import FLOAT, INT32, GraphDefWriter

__all__ = [
    "CheckModel",
    "ConvLayer",
    "matmul_model",
    "resnet50_conv_layers",
    "conv_layer_model",
    "resnet50_model",
    "transformer_encoder_model",
    "RESNET50_STAGES",
    "OUTPUT_NAME",
]

#: The output node of every check model.
OUTPUT_NAME = "Identity"
#: ``(stage, filters, blocks, stride of its first block)`` of ResNet50 (``keras.applications.resnet``'s ``stack1`` calls).
RESNET50_STAGES = (("conv2", 64, 3, 1), ("conv3", 128, 4, 2), ("conv4", 256, 6, 2), ("conv5", 512, 3, 2))
#: Keras ResNet's BatchNormalization epsilon.
_RESNET_EPSILON = 1.001e-5


@dataclass(frozen=True)
class CheckModel:
    """A frozen GraphDef and the same computation in PyTorch.

    Attributes:
        name: what it is, e.g. ``"resnet50 b8"``, ``"conv 56x56 64->64 3x3 s1 b8"``.
        graphdef: a serialized ``GraphDef`` (float32 placeholders, ``Const`` weights).
        input_shapes: placeholder name -> shape, in the order the PyTorch module takes them.
        output: the output node's name (``"Identity"``).
        torch_builder: ``(torch, device) -> module``; use :meth:`torch_module`.
    """

    name: str
    graphdef: bytes
    input_shapes: dict[str, tuple[int, ...]]
    output: str
    torch_builder: Callable[[Any, Any], Any] = field(repr=False, compare=False)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the GraphDef to ``path`` (a ``.pb``; parent folders are created) and return it."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(self.graphdef)
        return out

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Standard normal float32 feeds, placeholder name -> array of its shape."""
        rng = np.random.default_rng(seed)
        return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in self.input_shapes.items()}

    def torch_module(self, device: Any = "cpu") -> Any:
        """The model in PyTorch, in eval mode, float32, the GraphDef's weights, on ``device``.

        It takes the placeholders positionally, in the order of :attr:`input_shapes`, in the
        GraphDef's layout (NHWC images, permuted inside to ``channels_last`` NCHW and back), and
        returns the output in the GraphDef's layout. Call it under ``torch.inference_mode()``.

        Raises:
            DependencyMissingError: PyTorch is not installed.
        """
        torch = torch_modules.import_torch()
        return self.torch_builder(torch, torch.device(device))


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int, gain: float = 2.0) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(gain / fan_in)).astype(np.float32)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float = 0.1) -> np.ndarray:
    return rng.normal(0.0, std, size=shape).astype(np.float32)


def _positive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.5, 1.5, size=shape).astype(np.float32)


def matmul_model(m: int, k: int, n: int, seed: int = 0) -> CheckModel:
    """``Identity(MatMul(a, b))``: ``a: [m, k], b: [k, n] -> [m, n]``, float32, both operands
    placeholders (``"a"``, ``"b"``; nothing to fold, as the zoo's ``matmul``); ``seed`` is unused
    (no weights), kept for a uniform signature. Name ``"matmul {m}x{k}x{n}"``."""
    writer = GraphDefWriter()
    product = writer.op(
        "MatMul",
        "MatMul",
        [writer.placeholder("a", (m, k)), writer.placeholder("b", (k, n))],
        transpose_a=False,
        transpose_b=False,
    )
    writer.op(OUTPUT_NAME, "Identity", [product])
    return CheckModel(
        f"matmul {m}x{k}x{n}", writer.serialize(), {"a": (m, k), "b": (k, n)}, OUTPUT_NAME, torch_modules.matmul_module
    )


@dataclass(frozen=True)
class ConvLayer:
    """One NHWC ``Conv2D`` of a network: ``[batch, height, width, in_channels] * [kernel, kernel,
    in_channels, out_channels]``, square ``stride``, TensorFlow ``padding`` (``"SAME"``/``"VALID"``)."""

    batch: int
    height: int
    width: int
    in_channels: int
    out_channels: int
    kernel: int
    stride: int
    padding: str

    @property
    def name(self) -> str:
        """E.g. ``"conv 56x56 64->64 3x3 s1 b8"``."""
        k = self.kernel
        return f"conv {self.height}x{self.width} {self.in_channels}->{self.out_channels} {k}x{k} s{self.stride} b{self.batch}"

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        """``[batch, height', width', out_channels]`` (TensorFlow's SAME/VALID rule)."""
        reach = 1 if self.padding == "SAME" else self.kernel
        return (self.batch, (self.height - reach) // self.stride + 1, (self.width - reach) // self.stride + 1, self.out_channels)


def _resnet50_blocks() -> Iterator[tuple[str, int, int, int, bool]]:
    """``(block name, in channels, filters, stride, conv shortcut)`` of every bottleneck block
    (``keras.applications.resnet.block1``: 1x1 / 3x3 SAME / 1x1 to ``4 * filters``, the stride on
    the first 1x1 and the 1x1 shortcut)."""
    channels = 64
    for stage, filters, blocks, stride in RESNET50_STAGES:
        for index in range(1, blocks + 1):
            first = index == 1
            yield f"{stage}_block{index}", channels, filters, stride if first else 1, first
            channels = 4 * filters


def _block_convolutions(in_channels: int, filters: int, stride: int, shortcut: bool) -> list[tuple[str, int, int, int, int, str]]:
    """``(suffix, kernel, in, out, stride, padding)`` of one block's convolutions, in Keras' order."""
    convolutions = [("_0", 1, in_channels, 4 * filters, stride, "VALID")] if shortcut else []
    return [
        *convolutions,
        ("_1", 1, in_channels, filters, stride, "VALID"),
        ("_2", 3, filters, filters, 1, "SAME"),
        ("_3", 1, filters, 4 * filters, 1, "VALID"),
    ]


def _stem_sizes(image_size: int) -> tuple[int, int]:
    """Sides after conv1 (7x7/2 VALID on the input padded by 3) and after the 3x3/2 max pool (padded by 1)."""
    conv1 = (image_size + 6 - 7) // 2 + 1
    return conv1, (conv1 + 2 - 3) // 2 + 1


def resnet50_conv_layers(batch: int, image_size: int = 224) -> list[ConvLayer]:
    """The distinct ``Conv2D`` layers of ResNet50 (as :func:`resnet50_model`), in network order.

    conv1 is the 7x7/2 VALID convolution of the input already padded by 3 (``image_size + 6``
    square); the 1x1 convolutions are VALID, the 3x3 SAME stride 1. At 224: 20 layers.
    """
    side = image_size + 6
    layers = [ConvLayer(batch, side, side, 3, 64, 7, 2, "VALID")]
    side = _stem_sizes(image_size)[1]
    for _, in_channels, filters, stride, shortcut in _resnet50_blocks():
        for suffix, kernel, inputs, outputs, conv_stride, padding in _block_convolutions(in_channels, filters, stride, shortcut):
            layer_side = side if suffix in ("_0", "_1") else (side - 1) // stride + 1  # _2 and _3 read the strided _1's output
            layers.append(ConvLayer(batch, layer_side, layer_side, inputs, outputs, kernel, conv_stride, padding))
        side = (side - 1) // stride + 1
    return list(dict.fromkeys(layers))


def conv_layer_model(layer: ConvLayer, seed: int = 0) -> CheckModel:
    """``Identity(Relu(BiasAdd(Conv2D(input, W), b)))``, NHWC: ``input: [N, H, W, C], W: [K, K, C, F],
    b: [F] -> [N, H', W', F]``, float32, ``W`` He-scaled, ``b`` normal (std 0.1). Named ``layer.name``."""
    rng = np.random.default_rng(seed)
    kernel = _he(rng, (layer.kernel, layer.kernel, layer.in_channels, layer.out_channels), layer.kernel**2 * layer.in_channels)
    bias = _normal(rng, (layer.out_channels,))
    writer = GraphDefWriter()
    shape = (layer.batch, layer.height, layer.width, layer.in_channels)
    strides = [1, layer.stride, layer.stride, 1]
    convolution = writer.op(
        "Conv2D",
        "Conv2D",
        [writer.placeholder("input", shape), writer.constant("kernel", kernel)],
        strides=strides,
        padding=layer.padding,
        data_format="NHWC",
        dilations=[1, 1, 1, 1],
    )
    biased = writer.op("BiasAdd", "BiasAdd", [convolution, writer.constant("bias", bias)], data_format="NHWC")
    writer.op(OUTPUT_NAME, "Identity", [writer.op("Relu", "Relu", [biased])])
    convolution_parameters = {"kernel": kernel, "bias": bias, "stride": layer.stride, "padding": layer.padding}
    builder = torch_modules.conv_layer_builder(convolution_parameters)
    return CheckModel(layer.name, writer.serialize(), {"input": shape}, OUTPUT_NAME, builder)


def _conv_batch_norm(
    rng: np.random.Generator, kernel: int, inputs: int, outputs: int, stride: int, padding: str, input_power: float
) -> dict[str, Any]:
    """Weights of a Conv2D (with bias) + BatchNormalization pair whose input has mean square
    ``input_power``: a He-scaled kernel gives outputs of mean square ``2 * input_power``, so the
    moving variance is that times U[0.5, 1.5] (the statistics of a trained network match its
    activations; without that the residual sums double the scale in every block)."""
    output_power = 2.0 * input_power
    return {
        "kernel": _he(rng, (kernel, kernel, inputs, outputs), kernel * kernel * inputs),
        "bias": _normal(rng, (outputs,)),
        "gamma": _positive(rng, (outputs,)),
        "beta": _normal(rng, (outputs,)),
        "mean": _normal(rng, (outputs,), 0.1 * np.sqrt(output_power)),
        "variance": _positive(rng, (outputs,)) * np.float32(output_power),
        "stride": stride,
        "padding": padding,
    }


def _write_conv_batch_norm(writer: GraphDefWriter, scope: str, x: str, parameters: dict[str, Any], relu: bool) -> str:
    y = writer.conv2d_bias(
        f"{scope}_conv", x, parameters["kernel"], parameters["bias"], parameters["stride"], parameters["padding"]
    )
    y = writer.batch_normalization(f"{scope}_bn", y, parameters, _RESNET_EPSILON)
    return writer.op(f"{scope}_relu/Relu", "Relu", [y]) if relu else y


def resnet50_model(batch: int, image_size: int = 224, seed: int = 0, classes: int = 1000) -> CheckModel:
    """ResNet50 v1 (He et al. 2016), as ``keras.applications.ResNet50(weights=None)`` builds it
    and Keras 3 freezes it: ZeroPadding 3 + Conv2D 7x7/2 VALID + BatchNorm + ReLU, ZeroPadding 1
    + MaxPool 3x3/2, 16 bottleneck blocks (:data:`RESNET50_STAGES`), global average pooling
    (``Mean``), Dense + Softmax. Every Conv2D has a bias; BatchNorm epsilon 1.001e-5.

    Placeholder ``"input"``: float32 ``[batch, image_size, image_size, 3]`` (NHWC; image_size at
    least 32); output ``"Identity"``: float32 ``[batch, classes]``, softmax probabilities.
    Named ``"resnet50 b{batch}"`` (``"resnet50 {image_size}px b{batch}"`` at other sizes).

    Raises:
        ValueError: ``image_size`` below 32 (as Keras refuses it).
    """
    if image_size < 32:
        raise ValueError(f"ResNet50 takes images of at least 32 x 32 pixels, not {image_size}")
    rng = np.random.default_rng(seed)
    writer = GraphDefWriter()
    shape = (batch, image_size, image_size, 3)
    x = writer.pad("conv1_pad/Pad", writer.placeholder("input", shape), [[0, 0], [3, 3], [3, 3], [0, 0]])
    stem = _conv_batch_norm(rng, 7, 3, 64, 2, "VALID", input_power=1.0)
    x = _write_conv_batch_norm(writer, "conv1", x, stem, relu=True)
    x = writer.pad("pool1_pad/Pad", x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    x = writer.op(
        "pool1_pool/MaxPool", "MaxPool", [x], ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="VALID", data_format="NHWC"
    )
    blocks = []
    power = 1.0  # mean square of x, roughly: a normalised ReLU output is 0.5, a residual sum adds 1 to its shortcut's
    for name, in_channels, filters, stride, shortcut in _resnet50_blocks():
        convolutions = {
            suffix: _conv_batch_norm(rng, *rest, input_power=power if suffix in ("_0", "_1") else 0.5)
            for suffix, *rest in _block_convolutions(in_channels, filters, stride, shortcut)
        }
        power = (1.0 if shortcut else power) + 1.0
        blocks.append((convolutions.get("_0"), [convolutions[suffix] for suffix in ("_1", "_2", "_3")]))
        residual = _write_conv_batch_norm(writer, f"{name}_0", x, convolutions["_0"], relu=False) if shortcut else x
        y = x
        for suffix in ("_1", "_2", "_3"):
            y = _write_conv_batch_norm(writer, f"{name}{suffix}", y, convolutions[suffix], relu=suffix != "_3")
        x = writer.op(f"{name}_out/Relu", "Relu", [writer.op(f"{name}_add/Add", "AddV2", [residual, y])])
    pooled = writer.op(
        "avg_pool/Mean", "Mean", [x, writer.constant("avg_pool/axes", [1, 2])], {"T": FLOAT, "Tidx": INT32}, keep_dims=False
    )
    dense = {"kernel": _he(rng, (2048, classes), 2048, gain=1.0), "bias": _normal(rng, (classes,))}
    logits = writer.op("predictions/MatMul", "MatMul", [pooled, writer.constant("predictions/kernel", dense["kernel"])])
    logits = writer.op(
        "predictions/BiasAdd", "BiasAdd", [logits, writer.constant("predictions/bias", dense["bias"])], data_format="NHWC"
    )
    writer.op(OUTPUT_NAME, "Identity", [writer.op("predictions/Softmax", "Softmax", [logits])])
    name = f"resnet50 b{batch}" if image_size == 224 else f"resnet50 {image_size}px b{batch}"
    builder = torch_modules.resnet50_builder(stem, blocks, dense)
    return CheckModel(name, writer.serialize(), {"input": shape}, OUTPUT_NAME, builder)


def transformer_encoder_model(
    batch: int, sequence: int = 128, model_width: int = 256, heads: int = 4, feed_forward_width: int = 1024, seed: int = 0
) -> CheckModel:
    """One post-norm Transformer encoder block (Vaswani et al. 2017), as
    :func:`polytf.model_zoo.transformer_encoder` builds it with Keras layers and Keras 3 freezes it::

        y   = LayerNorm(x + MultiHeadAttention(x, x))       # heads of model_width / heads
        out = LayerNorm(y + Dense(gelu(Dense(y))))           # exact (erf) GELU, epsilon 1e-6

    The attention as Keras' ``MultiHeadAttention``: per-head projections ``BatchMatMulV2`` with
    kernels ``[D, N, H]`` reshaped to ``[D, N * H]``, bias ``[N, H]``; scores ``Einsum
    "BTNH,BSNH->BNTS"`` times ``1 / sqrt(H)``, ``Softmax``, ``Einsum "BNTS,BSNH->BTNH"``; the
    output projection ``BatchMatMulV2`` + ``BiasAdd``.

    Placeholder ``"input"``: float32 ``[batch, sequence, model_width]``; output ``"Identity"``,
    same shape. Named ``"transformer_encoder b{batch}"`` (with ``s{sequence} d{model_width}`` off
    the defaults).

    Raises:
        ValueError: ``model_width`` is not a multiple of ``heads``.
    """
    if model_width % heads:
        raise ValueError(f"model_width {model_width} is not a multiple of heads {heads}")
    rng = np.random.default_rng(seed)
    head_width, shape = model_width // heads, (batch, sequence, model_width)
    writer = GraphDefWriter()
    source = writer.placeholder("input", shape)
    weights: dict[str, np.ndarray] = {}

    def project(role: str) -> str:  # Keras' EinsumDense "abc,cde->abde" frozen as BatchMatMulV2
        weights[f"{role}_kernel"] = kernel = _he(rng, (model_width, heads, head_width), model_width, gain=1.0)
        weights[f"{role}_bias"] = bias = _normal(rng, (heads, head_width))
        scope = f"attention/{role}"
        matrix = writer.reshape(f"{scope}/Reshape", writer.constant(f"{scope}/kernel", kernel), [model_width, -1])
        product = writer.op(f"{scope}/MatMul", "BatchMatMulV2", [source, matrix], adj_x=False, adj_y=False)
        split = writer.reshape(f"{scope}/Reshape_1", product, [-1, sequence, heads, head_width])
        return writer.op(f"{scope}/Add", "AddV2", [split, writer.constant(f"{scope}/bias", bias)])

    query, key = project("query"), project("key")
    scores = writer.op("attention/einsum/Einsum", "Einsum", [query, key], equation="BTNH,BSNH->BNTS", N=2)
    scale = writer.constant("attention/scale", np.float32(1.0 / np.sqrt(head_width)))
    probabilities = writer.op("attention/Softmax", "Softmax", [writer.op("attention/Mul", "Mul", [scores, scale])])
    attended = writer.op(
        "attention/einsum_1/Einsum", "Einsum", [probabilities, project("value")], equation="BNTS,BSNH->BTNH", N=2
    )
    weights["output_kernel"] = _he(rng, (heads, head_width, model_width), model_width, gain=1.0)
    weights["output_bias"] = _normal(rng, (model_width,))
    merged = writer.reshape("attention/output/Reshape", attended, [-1, sequence, model_width])
    matrix = writer.reshape(
        "attention/output/Reshape_1", writer.constant("attention/output/kernel", weights["output_kernel"]), [-1, model_width]
    )
    attention = writer.op("attention/output/MatMul", "BatchMatMulV2", [merged, matrix], adj_x=False, adj_y=False)
    bias = writer.constant("attention/output/bias", weights["output_bias"])
    attention = writer.op("attention/output/BiasAdd", "BiasAdd", [attention, bias], data_format="NHWC")
    for norm in ("norm1", "norm2"):
        weights[f"{norm}_gamma"], weights[f"{norm}_beta"] = _positive(rng, (model_width,)), _normal(rng, (model_width,))
    residual = writer.op("residual1/Add", "AddV2", [source, attention])
    x = writer.layer_normalization("norm1", residual, weights["norm1_gamma"], weights["norm1_beta"], 1e-6)
    weights["ffn1_kernel"] = _he(rng, (model_width, feed_forward_width), model_width)
    weights["ffn1_bias"] = _normal(rng, (feed_forward_width,))
    weights["ffn2_kernel"] = _he(rng, (feed_forward_width, model_width), feed_forward_width, gain=1.0)
    weights["ffn2_bias"] = _normal(rng, (model_width,))
    hidden = writer.gelu("ffn1/Gelu", writer.dense("ffn1", x, shape, weights["ffn1_kernel"], weights["ffn1_bias"]))
    projected_back = writer.dense(
        "ffn2", hidden, (batch, sequence, feed_forward_width), weights["ffn2_kernel"], weights["ffn2_bias"]
    )
    residual = writer.op("residual2/Add", "AddV2", [x, projected_back])
    out = writer.layer_normalization("norm2", residual, weights["norm2_gamma"], weights["norm2_beta"], 1e-6)
    writer.op(OUTPUT_NAME, "Identity", [out])
    default = (sequence, model_width) == (128, 256)
    name = f"transformer_encoder b{batch}" if default else f"transformer_encoder s{sequence} d{model_width} b{batch}"
    builder = torch_modules.transformer_encoder_builder(weights, heads)
    return CheckModel(name, writer.serialize(), {"input": shape}, OUTPUT_NAME, builder)
