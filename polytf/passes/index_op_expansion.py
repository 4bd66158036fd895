"""Index-op expansion: ``ArgMax``, ``ArgMin`` and ``OneHot`` become compiled element-wise
ops and reductions.

An arg-reduction or a one-hot encoding compares values with *positions*; statement bodies
read array elements, not iterator values, so these ops have no lowering of their own. This
pass writes each as ops polytf compiles, with the positions as a constant array
``P = [0, 1, ..., N - 1]`` shaped to broadcast along the axis (numpy/TF broadcasting rules).

``ArgMax(x, axis)``, for ``x: [..., N, ...]`` (``ArgMin``: ``Less``, highest, ``Min``)::

    v = SelectV2(Greater(x, lowest), x, lowest)            # NaN and -inf become lowest
    m = Max(v, axis, keep_dims=True)                        # [..., 1, ...]
    y = Min(SelectV2(Equal(v, m), P, N), axis)              # the first position of m

This is TensorFlow's CPU kernel's rule (tensorflow/core/kernels/argmax_op.cc reduces with
Eigen's ``ArgMaxTupleReducer``, started from position 0 and ``numeric_limits<T>::lowest()``,
taking a value only when it is strictly larger): the first position of the largest value;
NaN never wins; where no value is above ``lowest`` (all NaN, ``-inf`` or ``lowest``) the
result is 0 (every ``v`` is ``lowest`` then). Replacing NaN before the ``Max`` also keeps
the reduction free of NaN, whose order under fast-math ``maxnum`` is not defined; ``m`` is
one of the values of ``v``, so some position always matches.

``OneHot(indices, depth, on, off, axis)``, for ``indices: [I...]`` of rank ``R`` and the new
axis at ``a`` (``axis = -1``: ``a = R``)::

    e = Reshape(indices, I[:a] + [1] + I[a:])
    y = SelectV2(Equal(e, P), on, off)                      # P: [depth, 1 (R - a times)]

An index outside ``[0, depth)`` equals no position, so its row is ``off``, as in TensorFlow
(tensorflow/core/kernels/one_hot_op.h).

The expanded node keeps its name (its last op), so consumers and graph outputs need no
rewiring (:mod:`polytf.passes.editor`). Nodes shape inference folded to constants are
left alone; so is an untyped graph.
"""

from __future__ import annotations

import numpy as np

from polytf.graph import Graph, Node, TensorType
from polytf.ops.index_ops import arg_axis, dtype_limits, one_hot_position, scalar_int
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport

#: The ops expanded.
INDEX_OPS = ("ArgMax", "ArgMin", "OneHot")


def expand_index_ops(graph: Graph) -> tuple[Graph, PassReport]:
    """Expand every computed ``ArgMax``/``ArgMin``/``OneHot`` as in the module docstring.

    Returns:
        The new graph and its report (``rewrites``: nodes expanded).
    """
    editor = GraphEditor(graph)
    for name in [n for n, node in graph.nodes.items() if node.op in INDEX_OPS]:
        node = editor.nodes[name]
        if not editor.typed or editor.constant_value(node.output(0)) is not None:
            continue
        first = editor.type_of(node.inputs[0]) if node.inputs else None
        if first is None or not first.is_static:
            continue
        expand = _expand_one_hot if node.op == "OneHot" else _expand_arg
        expand(editor, node, first)
        editor.rewrites += 1
    return editor.finish("index-op expansion", f"{editor.rewrites} ArgMax/ArgMin/OneHot nodes" if editor.rewrites else "")


class _Builder:
    """Adds the nodes that replace ``node``, each typed, in front of it."""

    def __init__(self, editor: GraphEditor, node: Node) -> None:
        self.editor, self.node = editor, node

    def constant(self, suffix: str, value: np.ndarray) -> str:
        return self.editor.add_constant(f"{self.node.name}/{suffix}", value, before=self.node.name)

    def op(self, suffix: str | None, op: str, inputs: tuple[str, ...], output: TensorType, **attrs) -> str:
        name = self.node.name if suffix is None else self.editor.fresh_name(f"{self.node.name}/{suffix}")
        controls = self.node.control_inputs if suffix is None else ()
        self.editor.set_node(Node(name, op, inputs, controls, attrs), output_types=[output], before=self.node.name)
        return f"{name}:0"


def _expand_arg(editor: GraphEditor, node: Node, x: TensorType) -> None:
    build = _Builder(editor, node)
    axis = arg_axis(node, x.rank, editor.constant_value(node.inputs[1]))
    extent = int(x.shape[axis])
    index_dtype = node.attr("output_type", "int64")
    lowest, highest = dtype_limits(x.dtype)
    is_max = node.op == "ArgMax"
    value_type, bool_type = TensorType(tuple(x.shape), x.dtype), TensorType(tuple(x.shape), "bool")
    bound = build.constant("bound", np.asarray(lowest if is_max else highest, x.dtype))
    inside = build.op("inside", "Greater" if is_max else "Less", (node.inputs[0], bound), bool_type, T=x.dtype)
    clamped = build.op("clamped", "SelectV2", (inside, node.inputs[0], bound), value_type, T=x.dtype)
    axis_tensor = build.constant("axis", np.asarray([axis], np.int32))
    reduced_shape = tuple(1 if k == axis else d for k, d in enumerate(x.shape))
    extreme = build.op("extreme", "Max" if is_max else "Min", (clamped, axis_tensor), TensorType(reduced_shape, x.dtype), T=x.dtype, keep_dims=True)
    is_extreme = build.op("is_extreme", "Equal", (clamped, extreme), bool_type, T=x.dtype)
    positions = build.constant("positions", np.arange(extent, dtype=index_dtype).reshape((extent,) + (1,) * (x.rank - 1 - axis)))
    past_the_end = build.constant("past_the_end", np.asarray(extent, index_dtype))
    candidates = build.op("candidates", "SelectV2", (is_extreme, positions, past_the_end), TensorType(tuple(x.shape), index_dtype), T=index_dtype)
    result_shape = tuple(d for k, d in enumerate(x.shape) if k != axis)
    build.op(None, "Min", (candidates, axis_tensor), TensorType(result_shape, index_dtype), T=index_dtype, keep_dims=False)


def _expand_one_hot(editor: GraphEditor, node: Node, indices: TensorType) -> None:
    build = _Builder(editor, node)
    depth = scalar_int(node, editor.constant_value(node.inputs[1]), "depth")
    position = one_hot_position(node, indices.rank)
    expanded_shape = tuple(indices.shape[:position]) + (1,) + tuple(indices.shape[position:])
    shape_tensor = build.constant("shape", np.asarray(expanded_shape, np.int32))
    expanded = build.op("expanded", "Reshape", (node.inputs[0], shape_tensor), TensorType(expanded_shape, indices.dtype), T=indices.dtype, Tshape="int32")
    positions = build.constant("positions", np.arange(depth, dtype=indices.dtype).reshape((depth,) + (1,) * (indices.rank - position)))
    output_shape = tuple(indices.shape[:position]) + (depth,) + tuple(indices.shape[position:])
    hot = build.op("hot", "Equal", (expanded, positions), TensorType(output_shape, "bool"), T=indices.dtype)
    value_dtype = editor.type_of(node.inputs[2]).dtype
    build.op(None, "SelectV2", (hot, node.inputs[2], node.inputs[3]), TensorType(output_shape, value_dtype), T=value_dtype)
