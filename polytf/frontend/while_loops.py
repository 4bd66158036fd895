"""While loops with a trip count known at compile time, unrolled: one copy of the body per iteration.

A Keras ``LSTM``/``GRU`` layer (``unroll=False``, the default) is a ``while`` loop over the
time steps. TensorFlow writes it in one of two forms:

* a functional ``While``/``StatelessWhile`` node whose ``cond`` and ``body`` attributes name
  functions of the GraphDef's library (tensorflow/core/ops/functional_ops.cc), frozen with
  ``convert_variables_to_constants_v2(..., lower_control_flow=False)``;
* the TF1 dataflow form, ``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``/``LoopCond``
  nodes of a frame (the default ``lower_control_flow=True``), rebuilt by
  :mod:`polytf.frontend.control_flow_frames`.

Both become a :class:`WhileLoop`: initial values of the loop variables, a condition and a
body that can be instantiated for given loop-variable tensors. :func:`unroll_while_loops`
evaluates the condition at compile time, iteration by iteration
(:class:`~polytf.frontend.static_values.StaticValues`: in Keras' loops ``i < n`` and
``time < max_iterations`` on constants), and copies the body once per iteration, as
``<loop>/iteration_<k>/<body node>``; readers of the loop's results read the last
iteration's values. The ``TensorList`` ops that carry each step's input and output then have
constant indices and are resolved (:mod:`polytf.frontend.tensor_lists`). This is loop
unrolling done before any other pass, as XLA needs a static trip count to compile a loop
without a host round trip per iteration.

A loop whose condition depends on a tensor known only at run time is a
:class:`~polytf.errors.GraphError` that names the loop and the tensor.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from polytf.errors import GraphError
from polytf.frontend.control_flow_frames import ENTER_OPS, frame_loops, has_frames
from polytf.frontend.function_library import FunctionLibrary, fresh_prefix, name_scopes
from polytf.frontend.static_values import StaticValues
from polytf.frontend.tensor_lists import LIST_OPS, resolve_tensor_lists
from polytf.graph.graph import split_tensor_name, tensor_name

__all__ = ["unroll_while_loops", "WhileLoop", "FunctionalLoop", "WHILE_OPS", "MAX_ITERATIONS"]

#: the functional loop ops (tensorflow/core/ops/functional_ops.cc)
WHILE_OPS = frozenset({"While", "StatelessWhile"})
#: the most iterations unrolled for one loop: compile time grows with the copies (about 10 s for
#: a 200-step LSTM(64) on a 2-core machine, results/recurrent_loops.md), and a cycle-free loop
#: that runs longer is more likely a missed constant than a model
MAX_ITERATIONS = 4096
#: nesting of functional loops unrolled (each level unrolls the copies of the inner loop)
MAX_NESTING = 4
#: the most nodes a graph may have while its loops are unrolled (nested loops multiply their
#: copies: 4096 outer iterations of a 4096-iteration loop would be 16 million copies)
MAX_UNROLLED_NODES = 1 << 19
#: the most bytes of loop-variable values known at compile time, summed over the iterations of
#: one loop (each iteration's values are kept to detect a loop that comes back to an earlier
#: state, and to evaluate the next condition)
MAX_STATIC_LOOP_BYTES = 1 << 26
#: ``lift_to_graph.py`` (TensorFlow's freezing) leaves one unread placeholder of this name per
#: loop back edge it copied; they are no model inputs
_LEFTOVER_PLACEHOLDER = re.compile(r"^unused_control_flow_input(_\d+)?$")


class WhileLoop(Protocol):
    """A while loop the unroller can copy (:class:`FunctionalLoop`,
    :class:`~polytf.frontend.control_flow_frames.FrameLoop`).

    Attributes:
        name: the loop's ``While`` node or frame: the scope of the unrolled copies.
        kind: how messages call it (``"While node"``).
        initial_values: each loop variable's value before the loop.
        results: tensors read after the loop -> the loop variable each one is.
        removed: the loop's nodes, replaced by the copies.
        first_node: where the copies go in file order.
    """

    name: str
    kind: str
    initial_values: tuple[str, ...]
    results: Mapping[str, int]
    removed: frozenset[str]
    first_node: str

    def condition(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], str]:
        """The condition's nodes (named ``prefix + ...``) for loop variables ``arguments``, and the predicate."""

    def body(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], list[str]]:
        """The body's nodes (named ``prefix + ...``) for loop variables ``arguments``, and the next values."""


@dataclass(frozen=True)
class FunctionalLoop:
    """A ``While``/``StatelessWhile`` node: loop variables are its data inputs, output ``k``
    is variable ``k`` after the loop, ``cond`` and ``body`` are library functions
    (instantiated by :meth:`FunctionLibrary.instantiate`)."""

    node_def: Any
    library: FunctionLibrary
    kind: str = "While node"

    @property
    def name(self) -> str:
        return self.node_def.name

    @property
    def initial_values(self) -> tuple[str, ...]:
        return tuple(tensor_name(*split_tensor_name(i)) for i in self.node_def.input if not i.startswith("^"))

    @property
    def results(self) -> Mapping[str, int]:
        return {tensor_name(self.name, k): k for k in range(len(self.initial_values))}

    @property
    def removed(self) -> frozenset[str]:
        return frozenset({self.name})

    @property
    def first_node(self) -> str:
        return self.name

    def _function(self, attribute: str) -> str:
        value = self.node_def.attr[attribute] if attribute in self.node_def.attr else None
        if value is None or value.WhichOneof("value") != "func":
            raise GraphError(f"While node '{self.name}' in '{self.library.source}' has no function attribute '{attribute}'.")
        return value.func.name

    def condition(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], str]:
        nodes, outputs = self.library.instantiate(self._function("cond"), prefix, arguments, caller=self.name)
        if len(outputs) != 1:
            raise GraphError(
                f"the condition of While node '{self.name}' in '{self.library.source}' returns {len(outputs)} tensors, not one."
            )
        return nodes, outputs[0]

    def body(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], list[str]]:
        return self.library.instantiate(self._function("body"), prefix, arguments, caller=self.name)


def _short_name(name: str, scope: str) -> str:
    """A copied node's name without the loop's scope repeated: ``lstm/while/body/_1/lstm/while/cell/MatMul``
    and ``Func/lstm/while/body/_1/input/_5`` (lowered form), ``lstm/while/cell/MatMul``
    (functional form) become ``cell/MatMul`` and ``input/_5``."""
    short = name[len("Func/") :] if name.startswith("Func/") else name
    if short.startswith(scope + "/"):
        short = short[len(scope) + 1 :]
    match = re.match(r"(body|cond)/_\d+/", short)
    if match:
        short = short[match.end() :]
        if short.startswith(scope + "/"):
            short = short[len(scope) + 1 :]
    return short or name


def _short_names(names: tuple[str, ...], scope: str) -> dict[str, str] | None:
    """Each copied node's name (without the iteration's prefix) -> its short name
    (:func:`_short_name`), or None when short names would clash."""
    short = {name: _short_name(name, scope) for name in names}
    # a function body traced inside an outer loop names its nodes after the traced loop
    # (``outer/inner/...``), not after the copy being unrolled (``outer/iteration_0/inner``)
    common = os.path.commonprefix(list(short.values())).rpartition("/")[0]
    last = scope.rpartition("/")[2]
    if common and (common == last or common.endswith("/" + last)):
        short = {name: value[len(common) + 1 :] or value for name, value in short.items()}
    return short if len(set(short.values())) == len(short) else None


def _readable(
    nodes: list[Any], outputs: list[str], prefix: str, scope: str, cache: dict[tuple[str, ...], dict[str, str] | None]
) -> tuple[list[Any], list[str]]:
    """``nodes`` renamed ``prefix + short name`` (:func:`_short_names`, kept in ``cache``: every
    iteration copies the same nodes) when that keeps the names distinct."""
    names = tuple(node.name[len(prefix) :] for node in nodes if node.name.startswith(prefix))
    if names not in cache:
        cache[names] = _short_names(names, scope)
    short = cache[names]
    if short is None:
        return nodes, outputs
    renamed = {prefix + name: prefix + value for name, value in short.items()}

    def rename(item: str) -> str:
        if item.startswith("^"):
            return "^" + renamed.get(item[1:], item[1:])
        node, port = split_tensor_name(item)
        return tensor_name(renamed.get(node, node), port)

    for node in nodes:
        node.name = renamed.get(node.name, node.name)
        inputs = [rename(item) for item in node.input]
        del node.input[:]
        node.input.extend(inputs)
    return nodes, [rename(t) for t in outputs]


def _predicate(loop: WhileLoop, values: StaticValues, predicate: str, iteration: int, source: str) -> bool:
    """The condition's value before ``iteration``: a scalar (bool, or a number: non-zero is true).

    Raises:
        GraphError: it is not known at compile time, or is no scalar.
    """
    value = values.value(predicate)
    if value is None:
        sources = ", ".join(f"'{n}' ({op})" for n, op in values.unknown_sources(predicate))
        raise GraphError(
            f"{loop.kind} '{loop.name}' in '{source}': its trip count is not known at compile time: the loop condition "
            f"('{predicate}', before iteration {iteration}) depends on {sources or 'a value known only at run time'}. "
            "polytf unrolls while loops and needs a trip count fixed when the model is frozen (e.g. a fixed sequence "
            "length: give the input a static shape)."
        )
    if value.size != 1:
        raise GraphError(
            f"{loop.kind} '{loop.name}' in '{source}': its condition '{predicate}' has shape {list(value.shape)}, not a scalar."
        )
    return bool(value.reshape(()))


def _unroll(loop: WhileLoop, values: StaticValues, scopes: set[str], source: str, room: int) -> tuple[list[Any], list[str]]:
    """The copies of ``loop``'s body, one per iteration, and the loop variables' final values;
    at most ``room`` copied nodes.

    Raises:
        GraphError: a trip count not known at compile time, over :data:`MAX_ITERATIONS`, more
            than ``room`` copies, or loop variables whose compile-time values add up to more
            than :data:`MAX_STATIC_LOOP_BYTES`.
    """
    arguments = list(loop.initial_values)
    unrolled: list[Any] = []
    states: set[tuple[Any, ...]] = set()
    static_bytes = 0
    short_names: dict[tuple[str, ...], dict[str, str] | None] = {}
    for iteration in itertools.count():
        condition_prefix = fresh_prefix(f"{loop.name}/condition_{iteration}", scopes)
        scopes.add(condition_prefix)
        condition_nodes, predicate = loop.condition(condition_prefix, arguments)
        condition_nodes, (predicate,) = _readable(condition_nodes, [predicate], condition_prefix, loop.name, short_names)
        values.add(condition_nodes)
        if not _predicate(loop, values, predicate, iteration, source):
            return unrolled, arguments
        # the condition is a function of the loop variables known at compile time: when they
        # come back to an earlier state, it stays true for ever
        known = [values.value(argument) for argument in arguments]
        static_bytes += sum(v.nbytes for v in known if v is not None)
        if static_bytes > MAX_STATIC_LOOP_BYTES:
            raise GraphError(
                f"{loop.kind} '{loop.name}' in '{source}': before iteration {iteration} its loop variables known at compile time "
                f"add up to more than {MAX_STATIC_LOOP_BYTES >> 20} MiB over the iterations; polytf unrolls loops whose "
                "compile-time state stays small (a counter, shapes), not loops that compute large tensors from constants."
            )
        # a digest per value: the states of thousands of iterations stay small
        state = tuple(None if v is None else (v.dtype.str, v.shape, hashlib.blake2b(v.tobytes(), digest_size=16).digest()) for v in known)
        if state in states:
            raise GraphError(
                f"{loop.kind} '{loop.name}' in '{source}' never ends: before iteration {iteration} its loop variables known "
                "at compile time are back to an earlier state, and its condition is still true."
            )
        states.add(state)
        if iteration >= MAX_ITERATIONS:
            raise GraphError(
                f"{loop.kind} '{loop.name}' in '{source}' runs more than {MAX_ITERATIONS} iterations; polytf unrolls while loops "
                f"of at most {MAX_ITERATIONS} iterations (a longer sequence would make a model too large to compile)."
            )
        prefix = fresh_prefix(f"{loop.name}/iteration_{iteration}", scopes)
        nodes, outputs = loop.body(prefix, arguments)
        nodes, outputs = _readable(nodes, outputs, prefix, loop.name, short_names)
        if len(outputs) != len(arguments):
            raise GraphError(
                f"the body of {loop.kind} '{loop.name}' in '{source}' returns {len(outputs)} values for {len(arguments)} loop variables."
            )
        scopes |= name_scopes({node.name for node in nodes})
        values.add(nodes)
        unrolled.extend(nodes)
        if len(unrolled) > room:
            raise GraphError(
                f"{loop.kind} '{loop.name}' in '{source}': unrolling it makes the graph larger than {MAX_UNROLLED_NODES} nodes "
                f"({iteration + 1} iterations of {len(nodes)} nodes so far, nested loops multiply); polytf unrolls loops whose "
                "copies fit in that many nodes."
            )
        arguments = list(outputs)
    raise AssertionError("unreachable")


def _loops(graph_def: Any, source: str) -> list[WhileLoop]:
    loops: list[WhileLoop] = list(frame_loops(graph_def, source))
    if any(node.op in WHILE_OPS for node in graph_def.node):
        library = FunctionLibrary.from_graphdef(graph_def, source)
        loops.extend(FunctionalLoop(node, library) for node in graph_def.node if node.op in WHILE_OPS)
    return loops


def _unroll_once(graph_def: Any, source: str) -> Any:
    """``graph_def`` with its loops (of the top level) unrolled."""
    loops = _loops(graph_def, source)
    values = StaticValues(graph_def.node, source)
    scopes = name_scopes({node.name for node in graph_def.node})
    copies: dict[str, list[Any]] = {}
    finals: dict[str, str] = {}
    room = MAX_UNROLLED_NODES - len(graph_def.node)
    for loop in loops:
        nodes, outputs = _unroll(loop, values, scopes, source, room)
        room -= len(nodes)
        copies[loop.first_node] = nodes
        for tensor, index in loop.results.items():
            finals[tensor] = outputs[index]
            values.alias(tensor, outputs[index])
    removed = frozenset().union(*(loop.removed for loop in loops))
    owner = {name: loop for loop in loops for name in loop.removed}
    leftovers = _leftover_placeholders(graph_def) if has_frames(graph_def) else set()

    def final(tensor: str) -> str:
        seen = set()
        while tensor in finals and tensor not in seen:
            seen.add(tensor)
            tensor = finals[tensor]
        return tensor

    unrolled = type(graph_def)()
    unrolled.versions.CopyFrom(graph_def.versions)
    unrolled.library.CopyFrom(graph_def.library)
    # a control input on a loop's result (an Exit, the While node) becomes one on the final values
    controls: dict[str, list[str]] = {}
    for tensor in finals:
        controls.setdefault(split_tensor_name(tensor)[0], []).append(split_tensor_name(final(tensor))[0])
    for node in graph_def.node:
        for copy in copies.get(node.name, ()):
            _add_renamed(unrolled, copy, final, controls, removed, owner, source)
        if node.name in removed or node.name in leftovers:
            continue
        _add_renamed(unrolled, node, final, controls, removed, owner, source)
    return unrolled


def _add_renamed(
    graph_def: Any,
    node: Any,
    final: Any,
    controls: Mapping[str, list[str]],
    removed: frozenset[str],
    owner: Mapping[str, WhileLoop],
    source: str,
) -> None:
    """Append ``node`` to ``graph_def``, reading each loop result's final value; a control input
    on a loop result is one on the producers of its final values, on another node of a loop it
    is dropped (the graph has no side effects to order)."""
    inputs = []
    for item in node.input:
        if item.startswith("^"):
            if item[1:] not in removed:
                inputs.append(item)
            inputs.extend(f"^{producer}" for producer in controls.get(item[1:], ()) if producer not in removed)
            continue
        tensor = final(tensor_name(*split_tensor_name(item)))
        producer = split_tensor_name(tensor)[0]
        if producer in removed:
            loop = owner[producer]
            raise GraphError(
                f"node '{node.name}' in '{source}' reads '{tensor}' inside {loop.kind} '{loop.name}' other than through the loop's "
                "results (an Exit node); the loop cannot be unrolled."
            )
        inputs.append(tensor)
    copy = graph_def.node.add()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend([item for item in inputs if not item.startswith("^")])
    copy.input.extend(dict.fromkeys(item for item in inputs if item.startswith("^")))


def _leftover_placeholders(graph_def: Any) -> set[str]:
    """The ``unused_control_flow_input`` placeholders that nothing reads."""
    read = {item.lstrip("^").split(":")[0] for node in graph_def.node for item in node.input}
    return {
        node.name
        for node in graph_def.node
        if node.op == "Placeholder" and _LEFTOVER_PLACEHOLDER.match(node.name) and node.name not in read
    }


def unroll_while_loops(graph_def: Any, source: str = "<graphdef>") -> Any:
    """``graph_def`` with every while loop unrolled and every ``TensorList`` op resolved.

    Args:
        graph_def: a ``GraphDef`` proto, function calls inlined; not modified.
        source: the file it came from, for messages.

    Returns:
        ``graph_def`` itself when it has no loop and no list op; otherwise a new ``GraphDef``
        of the same class (library and versions kept) where the loops' nodes are replaced by
        ``<loop>/iteration_<k>/...`` copies of the body, readers of a loop's results read the
        last iteration's values, and list ops are ordinary ops
        (:func:`~polytf.frontend.tensor_lists.resolve_tensor_lists`).

    Raises:
        GraphError: a loop whose trip count is not a compile-time constant (naming the loop
            and what the condition depends on) or is over :data:`MAX_ITERATIONS`, a TF1 loop
            whose frame cannot be rebuilt or is nested, functional loops nested deeper than
            :data:`MAX_NESTING`, a list op that cannot be resolved.
    """
    has_loops = any(node.op in WHILE_OPS or node.op in ENTER_OPS for node in graph_def.node)
    if not has_loops and not any(node.op in LIST_OPS for node in graph_def.node):
        return graph_def
    for _ in range(MAX_NESTING):
        if not any(node.op in WHILE_OPS or node.op in ENTER_OPS for node in graph_def.node):
            break
        graph_def = _unroll_once(graph_def, source)
    else:
        if any(node.op in WHILE_OPS for node in graph_def.node):
            nested = next(node.name for node in graph_def.node if node.op in WHILE_OPS)
            raise GraphError(
                f"While node '{nested}' in '{source}' is nested more than {MAX_NESTING} loops deep; polytf unrolls loops nested "
                f"at most {MAX_NESTING} deep."
            )
    return resolve_tensor_lists(graph_def, source)
