"""How many data inputs each supported op takes, from TensorFlow's op definitions
(tensorflow/core/ops/{math,nn,array}_ops.cc: the ``Input(...)`` lines; a list input
``N * T`` counts as "at least one").

Shape inference checks a node's input count here before its op's rule reads the inputs,
so a node with a missing or extra input is a clear error naming the node, never an
``IndexError`` from inside a rule.
"""

from __future__ import annotations

from polytf.errors import ShapeError
from polytf.graph import Node

#: op -> (fewest, most) inputs; ``None`` as most means any number
ARITY: dict[str, tuple[int, int | None]] = {
    **{op: (0, 0) for op in ("Placeholder", "Const", "NoOp")},
    **{op: (1, 1) for op in ("Identity", "StopGradient", "Snapshot", "Relu", "Relu6", "Neg", "Square", "Sqrt", "Rsqrt", "Exp", "Tanh", "Sigmoid", "Erf", "Erfc", "Softmax", "MaxPool", "AvgPool", "Cast")},
    **{op: (2, 2) for op in ("Add", "AddV2", "Sub", "Mul", "SquaredDifference", "BiasAdd", "MatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "DepthwiseConv2dNative", "Reshape", "ExpandDims", "Transpose", "Pad", "Mean", "Sum", "Max")},
    **{op: (1, 1) for op in ("Log", "Log1p", "Abs", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Inv", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign")},
    **{op: (2, 2) for op in ("Maximum", "Minimum", "RealDiv", "Div", "FloorDiv", "FloorMod", "Pow")},
    "ClipByValue": (3, 3),
    "ArgMax": (2, 2),
    "ArgMin": (2, 2),
    "OneHot": (4, 4),
    "TopKV2": (2, 2),
    **{op: (2, 2) for op in ("Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr")},
    "LogicalNot": (1, 1),
    "Select": (3, 3),
    "SelectV2": (3, 3),
    "IdentityN": (1, None),
    "Squeeze": (1, 1),
    "Shape": (1, 1),
    "PadV2": (3, 3),
    "GatherV2": (3, 3),
    "StridedSlice": (4, 4),
    "FusedBatchNorm": (5, 5),
    "FusedBatchNormV2": (5, 5),
    "FusedBatchNormV3": (5, 5),
    "ConcatV2": (2, None),
    "Concat": (2, None),
    "Pack": (1, None),
    "Einsum": (1, 2),
    **{op: (1, 1) for op in ("ZerosLike", "OnesLike", "Unpack", "DepthToSpace", "SpaceToDepth")},
    **{op: (2, 2) for op in ("Fill", "BroadcastTo", "Tile", "Split", "MirrorPad", "Cumsum", "ResizeBilinear", "ResizeNearestNeighbor", "Min", "Prod", "All", "Any")},
    **{op: (3, 3) for op in ("Range", "Slice", "SplitV", "MatrixBandPart", "Conv2DBackpropInput")},
}


def check_arity(node: Node) -> None:
    """Raise ShapeError when ``node`` has fewer or more data inputs than its op takes.

    Raises:
        ShapeError: naming the node, its op, the count and the allowed counts.
    """
    bounds = ARITY.get(node.op)
    if bounds is None:
        return
    fewest, most = bounds
    count = len(node.inputs)
    if count < fewest or (most is not None and count > most):
        allowed = f"{fewest}" if fewest == most else f"{fewest} or more" if most is None else f"{fewest} to {most}"
        raise ShapeError(f"node '{node.name}' ({node.op}) has {count} data input{'s' if count != 1 else ''}; {node.op} takes {allowed}")


__all__ = ["ARITY", "check_arity"]
