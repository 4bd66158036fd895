"""Frozen GraphDefs written node by node with TensorFlow's protos, without TensorFlow.

:class:`GraphDefWriter` appends ``Placeholder``, ``Const`` and op nodes to a
``tensorboard.compat.proto.graph_pb2.GraphDef`` (the protos TensorFlow itself uses, shipped
by tensorboard); its fragment methods write the op patterns that Keras 3 +
``convert_variables_to_constants_v2`` (TensorFlow 2.21) freeze a layer into, node for node
(the variable reads, ``Identity`` nodes on constants, are left out: polytf's passes and
TensorFlow both see through them):

* ``Conv2D(use_bias=True)``: ``Conv2D``, the bias ``Reshape``\\ d to ``[1, 1, 1, C]`` and
  ``Squeeze``\\ d back, ``BiasAdd``;
* inference ``BatchNormalization``: ``x * (gamma * rsqrt(variance + epsilon)) +
  (beta - mean * gamma * rsqrt(variance + epsilon))`` as ``AddV2/Rsqrt/Mul/Sub``
  (Keras' ``ops.batch_normalization``, TensorFlow's ``tf.nn.batch_normalization``);
* ``LayerNormalization``: ``Mean/StopGradient/SquaredDifference/Mean/AddV2/Rsqrt`` then
  ``x * s + (-mean * s + beta)`` with ``s = rsqrt(variance + epsilon) * gamma``;
* ``Dense`` on a rank-3 input: ``Reshape`` to rank 2, ``MatMul``, ``Reshape`` back, ``BiasAdd``
  (``tf.tensordot``);
* exact GELU: ``0.5 * x * erfc(-x / sqrt(2))`` as ``Mul/Neg/Mul/Erfc/Mul``.

All tensors are float32, except shapes and indices (int32).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tensorboard.compat.proto import graph_pb2, types_pb2

__all__ = ["GraphDefWriter", "FLOAT", "INT32"]

FLOAT = types_pb2.DT_FLOAT
INT32 = types_pb2.DT_INT32
_DTYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int32): INT32}


class GraphDefWriter:
    """Appends nodes to a GraphDef; every method returns the name of the node it wrote (its
    output ``:0``), so that calls nest like the graph."""

    def __init__(self) -> None:
        self.graph = graph_pb2.GraphDef()

    def serialize(self) -> bytes:
        """The GraphDef's binary serialization (deterministic)."""
        return self.graph.SerializeToString(deterministic=True)

    def placeholder(self, name: str, shape: Sequence[int]) -> str:
        """A float32 ``Placeholder`` of static ``shape``."""
        node = self.graph.node.add(name=name, op="Placeholder")
        node.attr["dtype"].type = FLOAT
        for size in shape:
            node.attr["shape"].shape.dim.add(size=int(size))
        return name

    def constant(self, name: str, value: np.ndarray | float | Sequence[int]) -> str:
        """A ``Const`` of ``value``: a float32 array or scalar, or int32 (a list of ints, or an
        int32 array)."""
        array = np.asarray(value)
        array = np.array(array, dtype=np.int32 if array.dtype.kind in "iu" else np.float32, order="C")  # keeps a scalar 0-d
        node = self.graph.node.add(name=name, op="Const")
        tensor = node.attr["value"].tensor
        node.attr["dtype"].type = tensor.dtype = _DTYPES[array.dtype]
        for size in array.shape:
            tensor.tensor_shape.dim.add(size=size)
        tensor.tensor_content = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        return name

    def op(self, name: str, op: str, inputs: Sequence[str], types: dict[str, int] | None = None, **attrs: object) -> str:
        """A node ``name = op(*inputs)`` with type attributes ``types`` (default ``{"T": float32}``)
        and other attributes: bool, int, float, str, or a list of ints."""
        node = self.graph.node.add(name=name, op=op, input=list(inputs))
        for key, dtype in ({"T": FLOAT} if types is None else types).items():
            node.attr[key].type = dtype
        for key, value in attrs.items():
            attr = node.attr[key]
            if isinstance(value, bool):
                attr.b = value
            elif isinstance(value, int):
                attr.i = value
            elif isinstance(value, float):
                attr.f = value
            elif isinstance(value, str):
                attr.s = value.encode()
            else:
                attr.list.i.extend(int(v) for v in value)  # type: ignore[attr-defined]
        return name

    def reshape(self, name: str, tensor: str, shape: Sequence[int]) -> str:
        """``Reshape(tensor, shape)``, the shape an int32 ``Const`` named ``{name}/shape``."""
        return self.op(name, "Reshape", [tensor, self.constant(f"{name}/shape", list(shape))], {"T": FLOAT, "Tshape": INT32})

    def pad(self, name: str, tensor: str, paddings: Sequence[Sequence[int]]) -> str:
        """``Pad(tensor, paddings)`` with zeros (``keras.layers.ZeroPadding2D``)."""
        constant = self.constant(f"{name}/paddings", [list(p) for p in paddings])
        return self.op(name, "Pad", [tensor, constant], {"T": FLOAT, "Tpaddings": INT32})

    def conv2d_bias(self, scope: str, x: str, kernel: np.ndarray, bias: np.ndarray, stride: int, padding: str) -> str:
        """``keras.layers.Conv2D`` with a bias, NHWC: ``x: [N, H, W, C], kernel: [KH, KW, C, F],
        bias: [F] -> [N, H', W', F]``."""
        convolution = self.op(
            f"{scope}/convolution",
            "Conv2D",
            [x, self.constant(f"{scope}/kernel", kernel)],
            strides=[1, stride, stride, 1],
            padding=padding,
            data_format="NHWC",
            dilations=[1, 1, 1, 1],
        )
        reshaped = self.reshape(f"{scope}/Reshape", self.constant(f"{scope}/bias", bias), [1, 1, 1, len(bias)])
        squeezed = self.op(f"{scope}/Squeeze", "Squeeze", [reshaped], squeeze_dims=[])
        return self.op(f"{scope}/BiasAdd", "BiasAdd", [convolution, squeezed], data_format="NHWC")

    def batch_normalization(self, scope: str, x: str, statistics: dict[str, np.ndarray], epsilon: float) -> str:
        """Inference ``keras.layers.BatchNormalization`` over the last axis of a rank-4 ``x``;
        ``statistics`` holds ``gamma, beta, mean, variance``, each ``[C]``."""
        shape = [1, 1, 1, len(statistics["mean"])]

        def parameter(suffix: str, key: str) -> str:
            return self.reshape(f"{scope}/Reshape{suffix}", self.constant(f"{scope}/{key}", statistics[key]), shape)

        shifted = self.op(
            f"{scope}/batchnorm/add", "AddV2", [parameter("_1", "variance"), self.constant(f"{scope}/epsilon", epsilon)]
        )
        inverse = self.op(f"{scope}/batchnorm/Rsqrt", "Rsqrt", [shifted])
        scale = self.op(f"{scope}/batchnorm/mul", "Mul", [inverse, parameter("_3", "gamma")])
        scaled = self.op(f"{scope}/batchnorm/mul_1", "Mul", [x, scale])
        beta = parameter("_2", "beta")
        mean_scaled = self.op(f"{scope}/batchnorm/mul_2", "Mul", [parameter("", "mean"), scale])
        offset = self.op(f"{scope}/batchnorm/sub", "Sub", [beta, mean_scaled])
        return self.op(f"{scope}/batchnorm/add_1", "AddV2", [scaled, offset])

    def layer_normalization(self, scope: str, x: str, gamma: np.ndarray, beta: np.ndarray, epsilon: float) -> str:
        """``keras.layers.LayerNormalization`` over the last axis of a rank-3 ``x``; ``gamma, beta: [C]``."""
        axis = self.constant(f"{scope}/axis", [-1])
        indices = {"T": FLOAT, "Tidx": INT32}
        mean = self.op(f"{scope}/moments/mean", "Mean", [x, axis], indices, keep_dims=True)
        stopped = self.op(f"{scope}/moments/StopGradient", "StopGradient", [mean])
        squared = self.op(f"{scope}/moments/SquaredDifference", "SquaredDifference", [x, stopped])
        variance = self.op(f"{scope}/moments/variance", "Mean", [squared, axis], indices, keep_dims=True)
        shifted = self.op(f"{scope}/add", "AddV2", [variance, self.constant(f"{scope}/epsilon", epsilon)])
        inverse = self.op(f"{scope}/Rsqrt", "Rsqrt", [shifted])
        shape = [1, 1, len(gamma)]
        scale = self.op(
            f"{scope}/mul", "Mul", [inverse, self.reshape(f"{scope}/Reshape", self.constant(f"{scope}/gamma", gamma), shape)]
        )
        scaled = self.op(f"{scope}/mul_2", "Mul", [x, scale])
        negated = self.op(f"{scope}/Neg", "Neg", [mean])
        mean_scaled = self.op(f"{scope}/mul_1", "Mul", [negated, scale])
        beta = self.reshape(f"{scope}/Reshape_1", self.constant(f"{scope}/beta", beta), shape)
        offset = self.op(f"{scope}/add_1", "AddV2", [mean_scaled, beta])
        return self.op(f"{scope}/add_2", "AddV2", [scaled, offset])

    def dense(self, scope: str, x: str, x_shape: Sequence[int], kernel: np.ndarray, bias: np.ndarray) -> str:
        """``keras.layers.Dense`` without activation on a rank-3 ``x: [B, T, C]``, ``kernel: [C, F],
        bias: [F] -> [B, T, F]`` (``tf.tensordot``: Reshape, MatMul, Reshape, BiasAdd)."""
        batch, sequence, _ = x_shape
        rows = self.reshape(f"{scope}/Tensordot/Reshape", x, [batch * sequence, kernel.shape[0]])
        product = self.op(f"{scope}/Tensordot/MatMul", "MatMul", [rows, self.constant(f"{scope}/kernel", kernel)])
        product = self.reshape(f"{scope}/Tensordot", product, [batch, sequence, kernel.shape[1]])
        return self.op(f"{scope}/BiasAdd", "BiasAdd", [product, self.constant(f"{scope}/bias", bias)], data_format="NHWC")

    def gelu(self, scope: str, x: str) -> str:
        """Exact GELU, ``0.5 * x * erfc(-x / sqrt(2))`` (``keras.activations.gelu(approximate=False)``)."""
        half = self.op(f"{scope}/mul", "Mul", [self.constant(f"{scope}/half", 0.5), x])
        negated = self.op(f"{scope}/Neg", "Neg", [x])
        scaled = self.op(f"{scope}/mul_1", "Mul", [negated, self.constant(f"{scope}/inverse_sqrt2", np.float32(1 / np.sqrt(2)))])
        return self.op(f"{scope}/mul_2", "Mul", [half, self.op(f"{scope}/Erfc", "Erfc", [scaled])])
