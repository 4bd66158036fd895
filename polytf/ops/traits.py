"""Op traits that are more than a flag: identity forwarding, algebraic laws and the layout of a
contraction's weight operand (see :class:`polytf.ops.definition.OpDefinition`).

Sources: TensorFlow's op definitions (tensorflow/core/ops/array_ops.cc: ``Identity``,
``IdentityN``; math_ops.cc: ``Add``, ``AddV2``, ``Sub``, ``Mul``, ``Neg``, ``MatMul``;
nn_ops.cc: ``Conv2D``, ``DepthwiseConv2dNative``), Grappler's arithmetic optimizer
(tensorflow/core/grappler/optimizers/arithmetic_optimizer.cc), MLIR's op traits
(``Commutative``, ``Involution``) and TVM's ``FoldScaleAxis`` (a scale per output channel
folded into a convolution's or a dense layer's weight).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.graph import Node


class Forwarding(enum.Enum):
    """Which data input each output of an identity-like op returns, unchanged, at inference
    time (TensorFlow: ``Identity``, ``StopGradient`` and ``Snapshot`` return their input;
    ``IdentityN`` returns its input ``k`` as output ``k``)."""

    FIRST_INPUT = "output 0 is data input 0"
    EACH_INPUT = "output k is data input k"

    def input_of(self, port: int) -> int:
        """The data input that output ``port`` returns."""
        return port if self is Forwarding.EACH_INPUT else 0

    def output_count(self, input_count: int) -> int:
        """How many outputs a node with ``input_count`` inputs has."""
        return input_count if self is Forwarding.EACH_INPUT else 1


class Operation(enum.Enum):
    """The mathematical operation an arithmetic op computes; ops of one operation compute one
    function (``Add`` and ``AddV2`` differ only in TensorFlow's string support)."""

    ADD = ("+", np.add)
    SUBTRACT = ("-", np.subtract)
    MULTIPLY = ("*", np.multiply)
    NEGATE = ("-", np.negative)

    @property
    def symbol(self) -> str:
        """How rewrite rules write it (``"+"``)."""
        return self.value[0]

    @property
    def function(self) -> Callable[..., np.ndarray]:
        """The numpy function (with numpy's broadcasting) that combines constants."""
        return self.value[1]


@dataclass(frozen=True)
class Algebra:
    """The algebraic laws of an arithmetic op, for rewrites with constants (Grappler's
    arithmetic optimizer; MLIR's ``Involution``). With ``c`` a constant and ``x`` not:

    Attributes:
        operation: what the op computes.
        identity: the neutral element ``e`` of a binary op: ``x op e == x`` (and ``e op x ==
            x`` when the op is commutative); None when it has none.
        associative: ``(x op c1) op c2 == x op (c1 op c2)`` (exactly, up to float rounding).
        involution: ``op(op(x)) == x`` (``Neg``).
        canonical: the op type a rewrite writes for a result of this operation (``AddV2`` for
            ``Add`` and ``AddV2``); empty when rewrites write none.
        inverse_of: for the inverse of an operation, the op type of that operation:
            ``x op c == inverse_of(x, -c)`` (``Sub``: ``AddV2``); empty otherwise.
    """

    operation: Operation
    identity: int | None = None
    associative: bool = False
    involution: bool = False
    canonical: str = ""
    inverse_of: str = ""


#: weight axes of a node: ``axes(node)`` -> axes of the weight operand.
AxesFunction = Callable[[Node], "tuple[int, ...] | None"]


@dataclass(frozen=True)
class WeightLayout:
    """The weight operand of a contraction (a convolution's filter, a dense layer's matrix)
    and the meaning of its axes: what folding a per-channel scale into the weight needs (TVM's
    ``FoldScaleAxis``), and what recognises a convolution and counts its FLOPs.

    Attributes:
        input: index of the weight among the node's inputs.
        rank: the weight's rank.
        output_rank: the output's rank; its last axis holds the output channels (NHWC,
            ``[M, N]``).
        window_axes: axes of a convolution's spatial window (``(0, 1)``: ``KH, KW``); empty
            for a matrix product.
        channel_axes: ``channel_axes(node)`` -> the weight axes that index output channels,
            in row-major order (``Conv2D``: ``(3,)``; ``DepthwiseConv2dNative``: ``(2, 3)``,
            channel ``c * M + m``; ``MatMul``: ``(1,)``, or ``(0,)`` with ``transpose_b``);
            None when the node does not put channels on the output's last axis (NCHW).
        depthwise: a convolution that filters each input channel on its own (sums over its
            window only: ``DepthwiseConv2dNative``).
        dilatable: a convolution with TensorFlow's window attrs (``strides`` and ``dilations``
            in NHWC order, ``padding`` SAME or VALID) that computes any dilation: a
            ``SpaceToBatchND``/``BatchToSpaceND`` pair around it folds into its ``dilations``
            (:mod:`polytf.passes.dilation_folding`).
        independent_rows: ``independent_rows(node)`` -> whether row ``i`` of the output (axis
            0) depends on row ``i`` of the data input (input 0) alone: a MatMul without
            ``transpose_a``, a channels-last convolution (a batch of images); what lets
            :mod:`polytf.passes.loop_rerolling` run one node over many stacked rows.
    """

    input: int
    rank: int
    output_rank: int
    window_axes: tuple[int, ...]
    channel_axes: AxesFunction
    depthwise: bool = False
    dilatable: bool = False
    independent_rows: Callable[[Node], bool] = lambda node: False

    @property
    def is_convolution(self) -> bool:
        """A convolution: the weight has a spatial window."""
        return bool(self.window_axes)

    def output_channels(self, node: Node, weight_shape: tuple[int, ...]) -> int | None:
        """The number of output channels of ``node`` with a weight of ``weight_shape``; None
        for a weight of another rank or a node without channels last."""
        axes = self.channel_axes(node)
        if axes is None or len(weight_shape) != self.rank:
            return None
        return int(np.prod([weight_shape[axis] for axis in axes], dtype=np.int64))

    def scale_weight(self, node: Node, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """``weight`` with output channel ``o`` multiplied by ``scale[o]`` (``scale``: one
        factor per output channel), so that ``op(x, W * s) == op(x, W) * s``.

        Raises:
            ValueError: the node does not put its channels last.
        """
        axes = self.channel_axes(node)
        if axes is None:
            raise ValueError(f"node '{node.name}' ({node.op}) does not put its output channels on the last axis")
        shape = [weight.shape[axis] if axis in axes else 1 for axis in range(weight.ndim)]
        # products in the wider dtype of the two, rounded into an array of the weight's dtype in
        # numpy's small buffers: no temporary as large as the weight
        return np.multiply(weight, scale.reshape(shape), out=np.empty(weight.shape, weight.dtype), casting="same_kind")


@dataclass(frozen=True)
class SpaceBatchMove:
    """An op that moves blocks of spatial positions between the spatial dimensions and the
    batch (TensorFlow's ``SpaceToBatchND`` and ``BatchToSpaceND``, tensorflow/core/ops/
    array_ops.cc): what recognises a dilated convolution written as ``SpaceToBatchND ->
    convolution -> BatchToSpaceND`` (tensorflow/python/ops/nn_ops.py, ``with_space_to_batch``).

    Attributes:
        to_batch: True: pads the spatial dimensions by the amounts, then moves the block
            offsets into the batch (``SpaceToBatchND``); False: moves them back into space,
            then crops by the amounts (``BatchToSpaceND``).
        block_shape_input: index of the ``block_shape`` input (``[M]`` ints, the dilation).
        amounts_input: index of the ``paddings`` (to batch) or ``crops`` (to space) input
            (``[M, 2]`` ints, before and after).
    """

    to_batch: bool
    block_shape_input: int = 1
    amounts_input: int = 2


@dataclass(frozen=True)
class Stacking:
    """An op at the seam of a loop that TensorFlow unrolled over an axis (Keras'
    ``TimeDistributed``, ``tf.unstack`` ... ``tf.stack``): each step's input is one index of a
    tensor along an axis, each step's output one index of the stacked result
    (:mod:`polytf.passes.loop_rerolling`).

    Attributes:
        picked: ``picked(node, input_constants, input_shape)`` -> ``(axis, index)`` when the
            node takes index ``index`` of its data input 0 along ``axis`` and drops that axis
            (``StridedSlice`` with a shrunk axis and nothing else sliced), else None.
        stacked: ``stacked(node, input_rank)`` -> the axis along which the node stacks its
            inputs into a new dimension (``Pack``), else None.
    """

    picked: Callable[[Node, Sequence["np.ndarray | None"], tuple[int, ...]], "tuple[int, int] | None"] | None = None
    stacked: Callable[[Node, int], "int | None"] | None = None


__all__ = ["Algebra", "AxesFunction", "Forwarding", "Operation", "SpaceBatchMove", "Stacking", "WeightLayout"]
