"""Compile-time values of the integer part of a GraphDef: loop counters, limits and list indices.

Unrolling a while loop needs its trip count, and resolving a ``TensorList`` after unrolling
needs each item's index. In the graphs TensorFlow writes for Keras RNNs both are integer
arithmetic on constants (``i < n`` and ``time < max_iterations``, ``time + 1``), as in
TensorFlow's own ``functionalize_while`` + XLA, which evaluate the loop-control part with
constant folding. :class:`StaticValues` evaluates a tensor when its whole fan-in is such
arithmetic on ``Const`` nodes, and says "unknown" (``None``) otherwise.

Only integer and boolean tensors are evaluated (float constants are "unknown"): the
frontend sits below the op table in the layers (``polytf.ops`` imports the frontend, not the
reverse), so these few integer ops carry their own numpy forms here; a unit test checks
each against the op table's reference (TensorFlow's op definitions,
tensorflow/core/ops/math_ops.cc and array_ops.cc). Evaluation is iterative (a 2000-step
counter chain needs no deep recursion) and memoized.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from polytf.config import FrontendConfig
from polytf.errors import GraphError
from polytf.frontend.attributes import decode_attr
from polytf.frontend.tensor_proto import dtype_name, numpy_dtype
from polytf.graph.graph import split_tensor_name, tensor_name

__all__ = ["StaticValues", "STATIC_OPS"]

#: the largest constant (elements) that is evaluated: loop-control values are scalars or short vectors
MAX_ELEMENTS = 1 << 16


def _reduce(function: Callable[..., np.ndarray]) -> Callable[[Any, Sequence[np.ndarray]], np.ndarray]:
    def reduce(node_def: Any, inputs: Sequence[np.ndarray]) -> np.ndarray:
        value, axes = inputs
        keep = bool(node_def.attr["keep_dims"].b) if "keep_dims" in node_def.attr else False
        axes = tuple(int(a) % max(value.ndim, 1) for a in np.atleast_1d(axes))
        return np.asarray(function(value, axis=axes, keepdims=keep))

    return reduce


def _binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Sequence[np.ndarray]], np.ndarray]:
    return lambda node_def, inputs: np.asarray(function(inputs[0], inputs[1]))


def _cast(node_def: Any, inputs: Sequence[np.ndarray]) -> np.ndarray:
    dtype = numpy_dtype(dtype_name(node_def.attr["DstT"].type))
    if dtype is None or dtype.kind not in "iub":
        raise _NotStatic
    return inputs[0].astype(dtype)


def _range(node_def: Any, inputs: Sequence[np.ndarray]) -> np.ndarray:
    start, limit, delta = (int(v) for v in inputs)
    if delta == 0:
        raise GraphError(f"Range node '{node_def.name}' has delta 0")
    return np.arange(start, limit, delta, dtype=inputs[0].dtype)


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise GraphError("integer division by zero")
    return np.floor_divide(a, b)


def _floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise GraphError("integer division by zero")
    return np.mod(a, b)


#: op -> numpy form ``(node_def, input values) -> value`` (one output; inputs integer or bool)
STATIC_OPS: dict[str, Callable[[Any, Sequence[np.ndarray]], np.ndarray]] = {
    "Identity": lambda node_def, inputs: inputs[0],
    "Snapshot": lambda node_def, inputs: inputs[0],
    "StopGradient": lambda node_def, inputs: inputs[0],
    "Add": _binary(np.add),
    "AddV2": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "FloorDiv": _binary(_floor_div),
    "FloorMod": _binary(_floor_mod),
    "Maximum": _binary(np.maximum),
    "Minimum": _binary(np.minimum),
    "Neg": lambda node_def, inputs: np.negative(inputs[0]),
    "Less": _binary(np.less),
    "LessEqual": _binary(np.less_equal),
    "Greater": _binary(np.greater),
    "GreaterEqual": _binary(np.greater_equal),
    "Equal": _binary(np.equal),
    "NotEqual": _binary(np.not_equal),
    "LogicalAnd": _binary(np.logical_and),
    "LogicalOr": _binary(np.logical_or),
    "LogicalNot": lambda node_def, inputs: np.logical_not(inputs[0]),
    "Cast": _cast,
    "Max": _reduce(np.max),
    "Min": _reduce(np.min),
    "Sum": _reduce(np.sum),
    "Prod": _reduce(np.prod),
    "Range": _range,
}


class _NotStatic(Exception):
    """Raised by a numpy form whose result would not be an integer or boolean tensor."""


def _is_static(value: np.ndarray) -> bool:
    return value.dtype.kind in "iub" and value.size <= MAX_ELEMENTS


class StaticValues:
    """The compile-time values of the integer tensors of a set of ``NodeDef`` protos.

    Args:
        node_defs: the nodes (canonical inputs ``"node:port"``, ``"^control"``); more can be
            added with :meth:`add`.
        source: the file, for messages.

    A tensor's value is known when its producer is an integer or boolean ``Const`` (at most
    :data:`MAX_ELEMENTS` elements), or an op of :data:`STATIC_OPS` whose data inputs are
    all known; control inputs are ignored. :meth:`alias` makes one tensor stand for another
    (the unrolled value of a loop's result).
    """

    def __init__(self, node_defs: Iterable[Any] = (), source: str = "<graphdef>"):
        self.source = source
        self._nodes: dict[str, Any] = {}
        self._aliases: dict[str, str] = {}
        self._values: dict[str, np.ndarray | None] = {}
        self._config = FrontendConfig.from_environment()
        self.add(node_defs)

    def add(self, node_defs: Iterable[Any]) -> None:
        """Make ``node_defs`` known (a node already known by that name is replaced)."""
        for node_def in node_defs:
            self._nodes[node_def.name] = node_def
            self._values.pop(node_def.name, None)

    def alias(self, tensor: str, target: str) -> None:
        """Read ``target`` wherever ``tensor`` is read."""
        self._aliases[tensor] = target

    def resolve(self, tensor: str) -> str:
        """``tensor`` in canonical form, with aliases followed."""
        _, separator, port = tensor.rpartition(":")
        if not (separator and port.isdigit() and port == str(int(port))):
            tensor = tensor_name(*split_tensor_name(tensor))
        if tensor not in self._aliases:
            return tensor
        seen = set()
        while tensor in self._aliases and tensor not in seen:
            seen.add(tensor)
            tensor = self._aliases[tensor]
        return tensor

    def value(self, tensor: str) -> np.ndarray | None:
        """The value of ``tensor`` (``"node:port"``), or ``None`` when it is not known at
        compile time.

        Raises:
            GraphError: an input names a node not given, or evaluating an op fails (an
                integer division by zero, a ``Range`` with delta 0).
        """
        tensor = self.resolve(tensor)
        node, port = split_tensor_name(tensor)
        # depth-first over the fan-in: (name, whether its producers were pushed); ``path``
        # holds the nodes whose producers are being evaluated, so that a cycle of static ops
        # (a damaged graph: a node fed by itself) is unknown instead of a walk without end
        stack = [(node, False)]
        path: set[str] = set()
        while stack:
            name, expanded = stack.pop()
            if name in self._values:
                continue
            node_def = self._nodes.get(name)
            if node_def is None:
                raise GraphError(f"'{self.source}': node '{name}' is read but does not exist.")
            if node_def.op != "Const" and node_def.op not in STATIC_OPS:
                self._values[name] = None  # its fan-in is never walked
                continue
            producers = self._producers(node_def)
            if expanded:
                path.discard(name)
                unknown = any(self._values.get(p) is None for p in producers)
                self._values[name] = None if unknown else self._evaluate(node_def)
                continue
            if any(self._values.get(p, 0) is None for p in producers) or name in producers or path.intersection(producers):
                self._values[name] = None  # an input already known to be unknown, or a cycle
                continue
            path.add(name)
            stack.append((name, True))
            stack.extend((p, False) for p in producers if p not in self._values)
        if port != 0:
            return None
        return self._values[node]

    def unknown_sources(self, tensor: str, limit: int = 3) -> list[tuple[str, str]]:
        """``(node, op)`` of the nodes that make ``tensor`` unknown: in its fan-in, those
        whose value is unknown although every data input is known (a ``Placeholder``, an op
        this module does not evaluate on known inputs, a float tensor); at most ``limit``,
        nearest first."""
        found: list[tuple[str, str]] = []
        queue = [split_tensor_name(self.resolve(tensor))[0]]
        seen: set[str] = set()
        while queue and len(found) < limit:
            name = queue.pop(0)
            if name in seen or name not in self._nodes:
                continue
            seen.add(name)
            if self.value(tensor_name(name, 0)) is not None:
                continue
            node_def = self._nodes[name]
            producers = self._producers(node_def)
            unknown = [p for p in producers if self._values.get(p) is None]
            if not unknown:
                found.append((name, node_def.op))
            else:
                queue.extend(unknown)
        return found

    def _producers(self, node_def: Any) -> list[str]:
        return [split_tensor_name(self.resolve(i))[0] for i in node_def.input if not i.startswith("^")]

    def _input_values(self, node_def: Any) -> list[np.ndarray] | None:
        values = []
        for item in node_def.input:
            if item.startswith("^"):
                continue
            node, port = split_tensor_name(self.resolve(item))
            value = self._values.get(node)
            if value is None or port != 0:
                return None
            values.append(value)
        return values

    def _evaluate(self, node_def: Any) -> np.ndarray | None:
        if node_def.op == "Const":
            return self._constant(node_def)
        form = STATIC_OPS.get(node_def.op)
        if form is None:
            return None
        inputs = self._input_values(node_def)
        if inputs is None:
            return None
        try:
            value = form(node_def, inputs)
        except _NotStatic:
            return None
        except GraphError as error:
            raise error.with_context(
                f"while evaluating node '{node_def.name}' ({node_def.op}) of '{self.source}' at compile time"
            ) from None
        except (ValueError, TypeError, IndexError) as error:
            raise GraphError(
                f"node '{node_def.name}' ({node_def.op}) of '{self.source}' cannot be evaluated at compile time on its constant "
                f"inputs ({error})."
            ) from None
        value = np.asarray(value)
        return value if _is_static(value) else None

    def _constant(self, node_def: Any) -> np.ndarray | None:
        if "value" not in node_def.attr:
            return None
        try:
            tensor = decode_attr(node_def.attr["value"], node_def.name)
        except ValueError:
            return None
        if tensor is None or not hasattr(tensor, "shape") or int(np.prod(tensor.shape)) > MAX_ELEMENTS:
            return None
        try:
            value = np.asarray(tensor.value(self._config))
        except GraphError:  # over FrontendConfig's size cap (a ShapeError), or undecodable
            return None
        return value if _is_static(value) else None
