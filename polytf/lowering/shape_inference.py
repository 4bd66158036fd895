"""Shape inference: give every tensor of a graph a static :class:`TensorType`.

Walks the nodes in (topological) order, checks each node's input count against its op's
arity, asks the op's ``infer`` rule for its output types and records the tensors known at
compile time in ``graph.constants``: values that follow from the node and its input types
(``Const``, ``Shape``: ``static_value``), views of constants and small ``foldable`` ops on
constants (``StridedSlice``, ``Pack``, ... computing a Reshape's shape), evaluated by their
numpy reference. Placeholder shapes come from
their ``shape`` attr, overridden by ``input_shapes``; any dimension still unknown is an
error that says how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from polytf.config import FrontendConfig
from polytf.errors import GraphError, ShapeError
from polytf.graph import Graph, Node, TensorType, split_tensor_name, tensor_name
from polytf.ops import VIEW, OpDefinition, check_supported, lookup
from polytf.ops.constant_inputs import FOLD_MAX_ELEMENTS
from polytf.ops.sources import placeholder_shape

#: dtype of every tensor computed at run time.
COMPUTE_DTYPE = "float32"
#: dtypes of run-time tensors (generated code and the runtime's buffers).
RUNTIME_DTYPES = ("float32", "int32", "int64", "bool")


def infer_types(graph: Graph, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """A copy of ``graph`` with ``types`` and ``constants`` filled in.

    Args:
        graph: nodes in topological order.
        input_shapes: placeholder name -> static shape, overriding the declared shape
            (e.g. to fix an unknown batch size).

    Raises:
        UnsupportedOpError: some nodes use ops polytf does not support (all are listed).
        ShapeError: shapes or dtypes an op does not accept, an input shape that conflicts
            with its placeholder, or a dimension left unknown.
        GraphError: an input refers to a tensor no earlier node produces.
    """
    nodes = list(graph.nodes.values())
    check_supported(nodes)
    overrides = _check_input_shapes(graph, input_shapes or {})
    placeholders = frozenset(node.name for node in graph.placeholders)

    types: dict[str, TensorType] = {}
    constants: dict[str, np.ndarray] = dict(graph.constants)
    for node in nodes:
        definition = lookup(node.op)
        input_types = []
        for tensor in node.inputs:
            if tensor not in types:
                raise GraphError(f"node '{node.name}' ({node.op}) reads '{tensor}', which no earlier node produces")
            input_types.append(types[tensor])
        input_constants = [constants.get(tensor) for tensor in node.inputs]

        target = node
        if node.name in overrides:  # a placeholder (checked)
            target = Node(node.name, node.op, node.inputs, node.control_inputs, {**node.attrs, "shape": overrides[node.name]})
        definition.check_arity(node)
        try:
            outputs = tuple(definition.infer(target, input_types, input_constants))
        except ShapeError as error:
            raise error.with_context(f"while inferring shapes of node '{node.name}' ({node.op})") from None
        except MALFORMED_NODE_ERRORS as error:
            raise malformed(node, error) from None

        output_names = [node.output(k) for k in range(len(outputs))]
        is_placeholder = node.name in placeholders
        for name, output_type in zip(output_names, outputs):
            _check_static(node, name, output_type, is_placeholder)
            types[name] = output_type

        try:
            values = _fold(node, definition, input_types, outputs, constants)
        except MALFORMED_NODE_ERRORS as error:
            raise malformed(node, error) from None
        for name, value in zip(output_names, values or ()):
            constants[name] = np.asarray(value)

        _check_dtypes(node, definition, input_types, outputs, output_names, constants, is_placeholder)

    for tensor in graph.outputs:
        name = tensor_name(*split_tensor_name(tensor))
        if name not in types:
            raise GraphError(f"graph output '{tensor}' is not produced by any node")
        if types[name].dtype not in RUNTIME_DTYPES:
            raise ShapeError(f"graph output '{tensor}' has dtype {types[name].dtype}; polytf computes {', '.join(RUNTIME_DTYPES)}")
    return graph.with_changes(types=types, constants=constants)


#: What an op's rule raises on a node whose attributes or inputs it did not expect (a
#: value of the wrong kind, a list of the wrong length): reported as a malformed node.
MALFORMED_NODE_ERRORS = (IndexError, KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError)


def malformed(node: Node, error: Exception) -> ShapeError:
    """The error for a node an op's rule could not read (see :data:`MALFORMED_NODE_ERRORS`)."""
    return ShapeError(
        f"node '{node.name}' ({node.op}) is malformed: its attributes or inputs are not what {node.op} takes "
        f"({type(error).__name__}: {str(error)[:200]}); attributes given: {sorted(node.attrs)}"
    )


def _check_input_shapes(graph: Graph, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Validate ``input_shapes`` against the placeholders; returns node name -> shape."""
    placeholders = {n.name: n for n in graph.placeholders}
    result: dict[str, tuple[int, ...]] = {}
    for key, shape in input_shapes.items():
        name, _ = split_tensor_name(key)
        if name not in placeholders:
            known = ", ".join(repr(p) for p in placeholders) or "none"
            raise ShapeError(f"input shape given for '{key}', which is not a placeholder of the graph (placeholders: {known})")
        try:
            fixed = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ShapeError(f"input shape for '{key}' must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in fixed):
            raise ShapeError(f"input shape for '{key}' has a negative dimension: {fixed}")
        declared = placeholder_shape(placeholders[name])
        if declared is not None:
            if len(declared) != len(fixed):
                raise ShapeError(
                    f"input shape {fixed} for placeholder '{name}' has rank {len(fixed)}, "
                    f"but the placeholder is declared with rank {len(declared)}: {TensorType(declared)}"
                )
            for axis, (want, got) in enumerate(zip(declared, fixed)):
                if want is not None and want != got:
                    raise ShapeError(
                        f"input shape {fixed} for placeholder '{name}' conflicts with its declared shape "
                        f"{TensorType(declared)} in dimension {axis} ({got} != {want})"
                    )
        result[name] = fixed
    return result


def _check_static(node: Node, name: str, output_type: TensorType, is_placeholder: bool) -> None:
    if output_type.is_static:
        limit = FrontendConfig().max_tensor_elements
        if any(d < 0 for d in output_type.shape) or output_type.element_count > limit:
            raise ShapeError(
                f"node '{node.name}' ({node.op}) output '{name}' would be {output_type}: "
                f"{output_type.element_count:,} elements, over polytf's limit of {limit:,} (FrontendConfig.max_tensor_elements); "
                "check the model's dimensions (or the --input shapes)"
            )
        return
    if is_placeholder:
        example = tuple(1 if d is None else d for d in output_type.shape)
        raise ShapeError(
            f"placeholder '{node.name}' has unknown dimension(s) {output_type}; fix them with "
            f"--input {node.name}:{','.join(map(str, example))} (CLI) or input_shapes={{'{node.name}': {example}}} (API)"
        )
    raise ShapeError(
        f"node '{node.name}' ({node.op}) output '{name}' has unknown dimension(s) {output_type}; "
        "fix the placeholder shapes with --input NAME:D0,D1,... (CLI) or input_shapes={...} (API)"
    )


def _all_inputs_constant(node: Node, constants: Mapping[str, np.ndarray]) -> bool:
    return bool(node.inputs) and all(t in constants for t in node.inputs)


def _fold(node: Node, definition: OpDefinition, input_types, output_types, constants: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...] | None:
    """Compile-time values of ``node``'s outputs, or None when they are not known.

    ``static_value`` ops (``Const``, ``Shape``) always fold; VIEW ops fold when all inputs are
    constants; ``foldable`` ops too, when no input or output has more than
    :data:`FOLD_MAX_ELEMENTS` elements (shape arithmetic, not weights).

    Raises:
        ShapeError: the op's reference rejects the constant inputs (with the node named).
    """
    try:
        if definition.static_value is not None:
            return tuple(definition.static_value(node, input_types))
        if not _all_inputs_constant(node, constants):
            return None
        if definition.category != VIEW:
            if not definition.foldable:
                return None
            sizes = [t.element_count for t in (*input_types, *output_types)]
            if max(sizes, default=0) > FOLD_MAX_ELEMENTS:
                return None
        return tuple(definition.reference(node, [constants[t] for t in node.inputs]))
    except ShapeError as error:
        raise error.with_context(f"while folding constant node '{node.name}' ({node.op})") from None


def _check_dtypes(node, definition: OpDefinition, input_types, outputs, output_names, constants, is_placeholder: bool) -> None:
    """Generated code computes float32, int32, int64 and bool (:data:`RUNTIME_DTYPES`); a node
    reads a run-time tensor of another dtype than float32 only if its op takes that dtype
    (``OpDefinition.dtypes``); other dtypes appear only in compile-time constants."""
    folded = bool(output_names) and all(name in constants for name in output_names)
    if not folded and definition.category != VIEW:  # a view emits no code: any dtype
        for i in definition.data_input_indices(len(node.inputs)):
            if i >= len(input_types) or node.inputs[i] in constants:
                continue
            dtype = input_types[i].dtype
            if dtype != COMPUTE_DTYPE and dtype not in definition.dtypes:
                raise ShapeError(
                    f"node '{node.name}' ({node.op}) reads the run-time tensor '{node.inputs[i]}' of dtype {dtype}; "
                    f"{node.op} takes {', '.join(definition.dtypes)} at run time. Cast it first, or make it a constant."
                )
    for name, output_type in zip(output_names, outputs):
        if output_type.dtype in RUNTIME_DTYPES or name in constants:
            continue
        what = f"placeholder '{node.name}'" if is_placeholder else f"node '{node.name}' ({node.op})"
        raise ShapeError(
            f"{what} produces '{name}' of dtype {output_type.dtype}; generated code computes {', '.join(RUNTIME_DTYPES)} "
            f"(other dtypes only as compile-time constants)"
        )
