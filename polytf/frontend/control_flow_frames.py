"""TF1-style while loops rebuilt from their frames: ``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``/``LoopCond``.

Freezing a TF2 model with ``convert_variables_to_constants_v2`` (its default
``lower_control_flow=True``: Keras ``LSTM``/``GRU`` layers) lowers each functional ``While`` to
the dataflow form of TensorFlow's executor (tensorflow/core/common_runtime/lower_while_op.cc).
For each loop variable ``k`` of a loop in frame ``F``::

    Enter_k(init_k, frame_name=F) -> Merge_k(Enter_k, NextIteration_k) -> Switch_k(Merge_k, LoopCond)
    Switch_k:0 -> Exit_k                      (the value after the loop)
    Switch_k:1 -> body ... -> NextIteration_k (the value of the next iteration)
    Merge_k:0, ... -> cond ... -> LoopCond    (the predicate)

and a loop invariant (a weight) enters once through an ``Enter`` with ``is_constant=true``.
:func:`frame_loops` finds these pieces the way TensorFlow's ``functionalize_while``
(tensorflow/compiler/tf2xla/functionalize_while.cc) does: frames are assigned by propagating
from the graph's sources (an ``Enter`` opens its frame, an ``Exit`` returns to the parent
frame, as ``BuildControlFlowInfo`` in tensorflow/core/graph/control_flow.cc), then the
condition and the body are the nodes of the frame behind ``LoopCond`` and behind the
``NextIteration`` nodes. Each becomes a :class:`LoopTemplate`, which
:class:`FrameLoop` instantiates once per iteration for the unroller
(:mod:`polytf.frontend.while_loops`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polytf.errors import GraphError
from polytf.graph.graph import split_tensor_name, tensor_name

__all__ = ["FrameLoop", "LoopTemplate", "frame_loops", "has_frames", "ENTER_OPS", "FRAME_OPS"]

ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
MERGE_OPS = frozenset({"Merge", "RefMerge"})
SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
#: the ops that make up a loop's structure (no computation of their own)
FRAME_OPS = ENTER_OPS | EXIT_OPS | MERGE_OPS | SWITCH_OPS | NEXT_ITERATION_OPS | {"LoopCond"}

_REBUILT = (
    "polytf rebuilds a TF1 while loop from Enter -> Merge(Enter, NextIteration) -> Switch(Merge, LoopCond) -> Exit, "
    "as TensorFlow's functionalize_while does"
)


def _canonical(item: str) -> str:
    if item.startswith("^"):
        return item
    return tensor_name(*split_tensor_name(item))


def _producer(item: str) -> str:
    return item[1:] if item.startswith("^") else split_tensor_name(item)[0]


def has_frames(graph_def: Any) -> bool:
    """Whether ``graph_def`` holds a TF1-style while loop (an ``Enter`` node)."""
    return any(node.op in ENTER_OPS for node in graph_def.node)


@dataclass(frozen=True)
class LoopTemplate:
    """The condition or the body of a rebuilt loop: nodes to copy once per iteration.

    Attributes:
        nodes: the frame's ``NodeDef`` protos (original names, canonical inputs), file order.
        bindings: tensors that stand for something outside the template: a loop variable
            (its index) or, for an invariant ``Enter``, the tensor entering (``"node:port"``).
        outputs: the tensors the template returns (the predicate, or one next value per
            loop variable), in original names; a bound tensor when a variable passes through.
        structure: names of the loop's ``Enter``/``Merge``/``Switch``/... nodes: control
            inputs on them are dropped from the copies.
    """

    nodes: tuple[Any, ...]
    bindings: Mapping[str, int | str]
    outputs: tuple[str, ...]
    structure: frozenset[str]

    def instantiate(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], list[str]]:
        """Copies of :attr:`nodes` named ``prefix + name`` reading ``arguments[k]`` for loop
        variable ``k``; returns ``(nodes, outputs)``."""
        names = {node.name for node in self.nodes}

        def resolve(tensor: str) -> str:
            bound = self.bindings.get(tensor)
            if bound is not None:
                return arguments[bound] if isinstance(bound, int) else bound
            node, port = split_tensor_name(tensor)
            return tensor_name(prefix + node, port) if node in names else tensor

        copies = []
        for node in self.nodes:
            copy = type(node)()
            copy.CopyFrom(node)
            copy.name = prefix + node.name
            del copy.input[:]
            for item in node.input:
                if not item.startswith("^"):
                    copy.input.append(resolve(item))
                elif item[1:] in names:
                    copy.input.append(f"^{prefix}{item[1:]}")
                elif item[1:] not in self.structure:
                    copy.input.append(item)
            copies.append(copy)
        return copies, [resolve(t) for t in self.outputs]


@dataclass(frozen=True)
class FrameLoop:
    """A while loop rebuilt from frame ``name`` (see the module docstring).

    Attributes:
        name: the frame name (``"lstm/while"``): the scope of the unrolled copies.
        kind: how messages call it.
        initial_values: each loop variable's value before the loop (tensors outside it).
        results: tensors that outside nodes read (``"Exit:0"``) -> the loop variable they are.
        removed: names of every node of the loop (frame, ``Enter`` and ``Exit`` nodes).
        first_node: the loop's first node in file order (where the copies go).
        condition_template: returns the predicate.
        body_template: returns the next value of each loop variable.
    """

    name: str
    initial_values: tuple[str, ...]
    results: Mapping[str, int]
    removed: frozenset[str]
    first_node: str
    condition_template: LoopTemplate
    body_template: LoopTemplate
    kind: str = "while loop frame"

    def condition(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], str]:
        """The condition's nodes for loop variables ``arguments``, and the predicate."""
        nodes, (predicate,) = self.condition_template.instantiate(prefix, arguments)
        return nodes, predicate

    def body(self, prefix: str, arguments: Sequence[str]) -> tuple[list[Any], list[str]]:
        """The body's nodes for loop variables ``arguments``, and the next values."""
        return self.body_template.instantiate(prefix, arguments)


def _assign_frames(nodes: Mapping[str, Any], source: str) -> tuple[dict[str, str], dict[str, str]]:
    """Each node's frame (``""`` outside every loop) and each frame's parent frame, by
    propagation from the sources (tensorflow/core/graph/control_flow.cc ``BuildControlFlowInfo``).

    Raises:
        GraphError: one frame entered from two different frames, or an Enter node that no
            source reaches.
    """
    consumers: dict[str, list[str]] = {name: [] for name in nodes}
    for name, node in nodes.items():
        for item in node.input:
            producer = _producer(item)
            if producer in consumers:
                consumers[producer].append(name)
    frame: dict[str, str] = {}
    parent: dict[str, str] = {}
    queue = deque(name for name, node in nodes.items() if not node.input)
    for name in queue:
        frame[name] = ""
    while queue:
        name = queue.popleft()
        for consumer in consumers[name]:
            if consumer in frame:
                continue
            node = nodes[consumer]
            if node.op in ENTER_OPS:
                entered = node.attr["frame_name"].s.decode("utf-8", "replace")
                if parent.setdefault(entered, frame[name]) != frame[name]:
                    raise GraphError(
                        f"while loop frame '{entered}' in '{source}' is entered from two frames "
                        f"('{parent[entered]}' and '{frame[name]}'); the graph is not a valid TensorFlow graph."
                    )
                frame[consumer] = entered
            elif node.op in EXIT_OPS:
                frame[consumer] = parent.get(frame[name], "")
            else:
                frame[consumer] = frame[name]
            queue.append(consumer)
    unreached = [name for name, node in nodes.items() if name not in frame and node.op in ENTER_OPS]
    if unreached:
        raise GraphError(
            f"Enter node '{unreached[0]}' in '{source}' is reached from no input of the graph (its inputs form a cycle of "
            "their own); the graph is not a valid TensorFlow graph."
        )
    return frame, parent


class _FrameReader:
    """Rebuilds the loops of one GraphDef (:func:`frame_loops`)."""

    def __init__(self, graph_def: Any, source: str):
        self.source = source
        self.order = [node.name for node in graph_def.node]
        self.nodes: dict[str, Any] = {}
        for node in graph_def.node:
            copy = type(node)()
            copy.CopyFrom(node)
            del copy.input[:]
            copy.input.extend(_canonical(item) for item in node.input)
            self.nodes[node.name] = copy
        self.frame, self.parent = _assign_frames(self.nodes, source)
        self.readers: dict[str, list[str]] = {name: [] for name in self.nodes}
        for name, node in self.nodes.items():
            for item in node.input:
                if not item.startswith("^") and _producer(item) in self.readers and name not in self.readers[_producer(item)]:
                    self.readers[_producer(item)].append(name)

    def _error(self, frame: str, problem: str) -> GraphError:
        return GraphError(f"while loop frame '{frame}' in '{self.source}': {problem}; {_REBUILT}, and cannot rebuild this one.")

    def _only(self, frame: str, names: list[str], what: str, owner: str) -> str:
        if len(names) != 1:
            found = ", ".join(f"'{n}'" for n in names) or "none"
            raise self._error(frame, f"{owner} should feed exactly one {what}, found {found}")
        return names[0]

    def check_inputs(self) -> None:
        """Every loop node has its data inputs, first (Enter, Exit, NextIteration, LoopCond: 1;
        Merge, Switch: 2), and every Enter a frame name.

        Raises:
            GraphError: naming the node.
        """
        for name in self.order:
            node = self.nodes[name]
            if node.op not in FRAME_OPS:
                continue
            wanted = 2 if node.op in MERGE_OPS | SWITCH_OPS else 1
            data = [item for item in node.input if not item.startswith("^")]
            if len(data) != wanted or any(item.startswith("^") for item in node.input[:wanted]):
                raise GraphError(
                    f"{node.op} node '{name}' in '{self.source}' has {len(data)} data inputs, not {wanted}; {_REBUILT}."
                )
            if node.op in ENTER_OPS and not node.attr["frame_name"].s:
                raise GraphError(f"Enter node '{name}' in '{self.source}' has no frame_name; {_REBUILT}.")

    def loop(self, frame: str) -> FrameLoop:
        """The loop of ``frame`` (a frame directly inside the root frame).

        Raises:
            GraphError: the frame is nested in another loop, or its structure is not the one
                the module docstring shows.
        """
        if self.parent.get(frame, ""):
            raise self._error(
                frame,
                f"it is nested inside while loop frame '{self.parent[frame]}'; polytf unrolls TF1 while loops that are not nested "
                "(Keras RNN layers, bidirectional ones included, write none nested)",
            )
        enters = [n for n in self.order if self.nodes[n].op in ENTER_OPS and self.frame.get(n) == frame]
        invariants = {tensor_name(e): self.nodes[e].input[0] for e in enters if self.nodes[e].attr["is_constant"].b}
        variables = [e for e in enters if not self.nodes[e].attr["is_constant"].b]
        merges, switches, next_iterations, exits = [], [], [], {}
        loop_conditions = set()
        for index, enter in enumerate(variables):
            merge = self._only(
                frame, [r for r in self.readers[enter] if self.nodes[r].op in MERGE_OPS], "Merge", f"Enter node '{enter}'"
            )
            others = [_producer(i) for i in self.nodes[merge].input if not i.startswith("^") and _producer(i) != enter]
            next_iteration = self._only(
                frame,
                [o for o in others if self.nodes[o].op in NEXT_ITERATION_OPS],
                "NextIteration",
                f"Merge node '{merge}' (as input)",
            )
            switch = self._only(
                frame, [r for r in self.readers[merge] if self.nodes[r].op in SWITCH_OPS], "Switch", f"Merge node '{merge}'"
            )
            predicate = self.nodes[switch].input[1] if len(self.nodes[switch].input) > 1 else ""
            if not predicate or self.nodes.get(_producer(predicate)) is None or self.nodes[_producer(predicate)].op != "LoopCond":
                raise self._error(frame, f"Switch node '{switch}' is not controlled by a LoopCond node")
            loop_conditions.add(_producer(predicate))
            merges.append(merge)
            switches.append(switch)
            next_iterations.append(next_iteration)
            for reader in self.readers[switch]:
                if self.nodes[reader].op in EXIT_OPS:
                    exits[tensor_name(reader)] = index
        if len(loop_conditions) != 1:
            raise self._error(frame, f"its Switch nodes are controlled by {len(loop_conditions)} LoopCond nodes, not one")
        (loop_condition,) = loop_conditions
        structure = frozenset(
            [*enters, *merges, *switches, *next_iterations, loop_condition, *(split_tensor_name(t)[0] for t in exits)]
        )
        condition_bindings: dict[str, int | str] = {**invariants, **{tensor_name(m): k for k, m in enumerate(merges)}}
        body_bindings: dict[str, int | str] = {**condition_bindings, **{tensor_name(s, 1): k for k, s in enumerate(switches)}}
        condition = self._template(frame, condition_bindings, (self.nodes[loop_condition].input[0],), structure)
        body = self._template(frame, body_bindings, tuple(self.nodes[n].input[0] for n in next_iterations), structure)
        removed = frozenset(n for n in self.order if self.frame.get(n) == frame) | structure
        return FrameLoop(
            name=frame,
            initial_values=tuple(self.nodes[e].input[0] for e in variables),
            results=exits,
            removed=removed,
            first_node=next(n for n in self.order if n in removed),
            condition_template=condition,
            body_template=body,
        )

    def _template(
        self, frame: str, bindings: dict[str, int | str], outputs: tuple[str, ...], structure: frozenset[str]
    ) -> LoopTemplate:
        """The frame's nodes behind ``outputs`` (data and control inputs), stopping at bound
        tensors and at nodes outside every loop."""
        members: set[str] = set()
        stack = [t for t in outputs if t not in bindings]
        while stack:
            item = stack.pop()
            if not item.startswith("^") and item in bindings:
                continue
            producer = _producer(item)
            if producer in members:
                continue
            if producer in structure:
                if item.startswith("^"):
                    continue
                node = self.nodes[producer]
                raise self._error(
                    frame, f"a node of the loop reads '{item}' ({node.op}), which is neither a loop variable nor an invariant"
                )
            if producer not in self.nodes:
                raise GraphError(f"the graph in '{self.source}' reads '{producer}', which is not a node of the graph.")
            where = self.frame.get(producer, "")
            if where == "":
                continue  # a node outside every loop (read directly)
            if where != frame:
                raise self._error(frame, f"it reads node '{producer}' of while loop frame '{where}'")
            members.add(producer)
            stack.extend(self.nodes[producer].input)
        nodes = tuple(self.nodes[n] for n in self.order if n in members)
        return LoopTemplate(nodes, bindings, outputs, structure)


def frame_loops(graph_def: Any, source: str = "<graphdef>") -> list[FrameLoop]:
    """Every TF1-style while loop of ``graph_def``, in the file order of their first nodes.

    Raises:
        GraphError: a nested loop, or a frame whose structure cannot be rebuilt (naming the
            frame and the node).
    """
    if not has_frames(graph_def):
        return []
    reader = _FrameReader(graph_def, source)
    reader.check_inputs()
    frames: list[str] = []
    for name in reader.order:
        node = reader.nodes[name]
        if node.op in ENTER_OPS:
            frame = node.attr["frame_name"].s.decode("utf-8", "replace")
            if frame not in frames:
                frames.append(frame)
    for frame in frames:  # a nested loop is named as such before its outer loop trips over it
        if reader.parent.get(frame, ""):
            reader.loop(frame)
    return [reader.loop(frame) for frame in frames]


def describe_cycle(cycle: Sequence[str], ops: Mapping[str, str]) -> str:
    """Why a graph with ``cycle`` (node names; ``ops``: node -> op) cannot be compiled, for the
    message of :func:`~polytf.frontend.graphdef.graph_from_graphdef`: the only cycles TensorFlow
    writes are while loops' back edges, which the unroller removes unless it raised first."""
    structural = [name for name in cycle if ops.get(name) in FRAME_OPS]
    if not structural:
        return (
            "polytf compiles acyclic graphs; the only cycles TensorFlow writes are the back edges of while loops "
            "(NextIteration -> Merge), which polytf unrolls, and this cycle is no while loop: the file may be corrupted "
            "or edited by hand."
        )
    back_edge = next((name for name in structural if ops[name] in NEXT_ITERATION_OPS), structural[0])
    return (
        f"the cycle runs through {ops[back_edge]} node '{back_edge}' of a while loop that could not be rebuilt from its "
        f"frame: {_REBUILT}, and this loop lacks part of that structure (an Enter node with its frame_name, a LoopCond)."
    )
