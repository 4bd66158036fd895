"""The function library of a GraphDef, and a function's body instantiated as graph nodes.

TensorFlow 2 writes some computations as calls of functions of the GraphDef's library
(``graph_def.library.function``, ``FunctionDef`` protos: tensorflow/core/framework/function.proto):
``PartitionedCall`` / ``StatefulPartitionedCall`` nodes naming the function in their ``f``
attribute (Keras 3 writes ``Conv2D(groups > 1)`` and ``jit_compile=True`` functions so), or
nodes whose op type is the function's name. :meth:`FunctionLibrary.instantiate` turns a
function's body into GraphDef nodes the way Grappler's function inlining does
(tensorflow/core/common_runtime/inline_function_utils.cc, ``InlineFunctionBody``):

* every body node ``n`` becomes ``<prefix>n``;
* a read of an argument becomes a read of the caller's tensor for it;
* FunctionDef's tensor names ``"n:output_arg:index"`` become ``"<prefix>n:port"``
  (:mod:`polytf.frontend.output_arguments`), ``"^n"`` stays a control input;
* attribute placeholders (``attr { placeholder: "T" }``) take the call's attribute values;
* the caller's control inputs go to the body nodes that have no input or read an argument
  (Grappler's ``input_control_node``), so every body node runs after them;
* calls inside the body are instantiated in turn (their nodes named ``<prefix>n/...``), and
  the call node itself becomes an ``Identity`` (one output) or ``IdentityN`` (several;
  ``NoOp`` for none) of the returned tensors, with the function's control outputs as
  control inputs: every reader of ``n:i`` or ``^n`` keeps working, and names stay readable.

``While``/``If`` nodes, which hold functions in other attributes, are no calls here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polytf.errors import GraphError
from polytf.frontend.function_body import FunctionBody, name_scopes
from polytf.frontend.output_arguments import OutputArgument, output_arguments, signature_output_arguments
from polytf.graph.graph import split_tensor_name, tensor_name

__all__ = ["CALL_OPS", "FunctionLibrary", "FunctionInstance", "fresh_prefix", "name_scopes"]

#: Ops that call the function named by their ``f`` attribute (tensorflow/core/ops/functional_ops.cc).
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


@dataclass(frozen=True)
class FunctionInstance:
    """A function's body instantiated as GraphDef nodes (:meth:`FunctionLibrary.instantiate_body`).

    Attributes:
        nodes: the body's ``NodeDef`` protos, nested calls inlined, names prefixed.
        outputs: the returned tensors ``"node:port"``, in the order of the signature's output
            arguments (a tensor of the caller's when the function returns an argument).
        control_outputs: names of the nodes the function's ``control_ret`` names.
    """

    nodes: tuple[Any, ...]
    outputs: tuple[str, ...]
    control_outputs: tuple[str, ...]


def fresh_prefix(name: str, taken: set[str]) -> str:
    """``name + "/"``, or ``name + "_inlined/"``, ``name + "_inlined_2/"``, ... when that
    already begins a name of ``taken``, a set of name scopes (every prefix of a node name
    ending in ``/``: :func:`name_scopes`)."""
    candidate = f"{name}/"
    count = 1
    while candidate in taken:
        candidate = f"{name}_inlined/" if count == 1 else f"{name}_inlined_{count}/"
        count += 1
    return candidate


class FunctionLibrary:
    """The ``FunctionDef`` protos of a GraphDef, by name.

    Args:
        functions: function name -> ``FunctionDef``.
        source: the file the GraphDef came from, for messages.
    """

    def __init__(self, functions: Mapping[str, Any], source: str = "<graphdef>"):
        self._functions = dict(functions)
        self.source = source

    @classmethod
    def from_graphdef(cls, graph_def: Any, source: str = "<graphdef>") -> FunctionLibrary:
        """The library of ``graph_def`` (a ``GraphDef`` proto).

        Raises:
            GraphError: two different functions share a name.
        """
        functions: dict[str, Any] = {}
        for function in graph_def.library.function:
            name = function.signature.name
            if name in functions and functions[name] != function:
                raise GraphError(f"the function library of '{source}' defines function '{name}' twice, differently.")
            functions[name] = function
        return cls(functions, source)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __len__(self) -> int:
        return len(self._functions)

    @property
    def names(self) -> tuple[str, ...]:
        """The functions' names, in library order."""
        return tuple(self._functions)

    def function(self, name: str, *, caller: str) -> Any:
        """The ``FunctionDef`` called ``name``.

        Raises:
            GraphError: no such function; names the calling node ``caller``.
        """
        function = self._functions.get(name)
        if function is None:
            defined = ", ".join(f"'{n}'" for n in list(self._functions)[:8]) or "none"
            raise GraphError(
                f"node '{caller}' in '{self.source}' calls function '{name}', which the GraphDef's function library does not "
                f"define (it defines: {defined}); export the model again with its function library."
            )
        return function

    def signature(self, name: str, *, caller: str) -> Any:
        """The function's signature, an ``OpDef`` proto (arguments, outputs, control outputs).

        Raises:
            GraphError: no such function; names the calling node ``caller``.
        """
        return self.function(name, caller=caller).signature

    def callee(self, node_def: Any) -> str | None:
        """The function ``node_def`` calls and polytf inlines, or ``None``: ``f`` of a
        :data:`CALL_OPS` node, or the op type when it names a library function.

        Raises:
            GraphError: a call node without an ``f`` attribute.
        """
        if node_def.op in CALL_OPS:
            if "f" not in node_def.attr or node_def.attr["f"].WhichOneof("value") != "func":
                raise GraphError(f"node '{node_def.name}' ({node_def.op}) in '{self.source}' has no function attribute 'f'.")
            return node_def.attr["f"].func.name
        if node_def.op in self._functions:
            return node_def.op
        return None

    def output_arguments_of(self, node_def: Any, caller: str) -> tuple[OutputArgument, ...] | None:
        """The output arguments of ``node_def``: its callee's signature's for a call by name,
        else :func:`~polytf.frontend.output_arguments.output_arguments` (``None``: unknown, one
        argument); ``caller`` names the node in messages."""
        callee = self.callee(node_def)
        if callee is not None and node_def.op not in CALL_OPS:
            return signature_output_arguments(self.signature(callee, caller=caller))
        return output_arguments(node_def.op)

    @staticmethod
    def call_attributes(node_def: Any) -> Mapping[str, Any]:
        """The attribute values a call gives its function's placeholders: ``f``'s own ``attr``
        for a :data:`CALL_OPS` node, the node's attributes for a call by name."""
        return node_def.attr["f"].func.attr if node_def.op in CALL_OPS else node_def.attr

    def instantiate(self, name: str, prefix: str, arguments: Sequence[str], *, caller: str) -> tuple[list[Any], list[str]]:
        """The body of function ``name`` as GraphDef nodes, and the tensors it returns.

        Args:
            name: the function.
            prefix: prepended verbatim to every body node's name, e.g. ``"model/call/"``.
            arguments: the caller's tensors (``"node"`` or ``"node:port"``), one per input
                argument of the signature, in order.
            caller: the calling node's name, for messages.

        Returns:
            ``(nodes, outputs)``: ``NodeDef`` protos with canonical inputs (``"node:port"``,
            ``"^node"``), nested calls inlined; returned tensors in output-argument order.

        Raises:
            GraphError: see :meth:`instantiate_body`.
        """
        instance = self.instantiate_body(name, prefix, arguments, caller=caller)
        return list(instance.nodes), list(instance.outputs)

    def instantiate_body(
        self,
        name: str,
        prefix: str,
        arguments: Sequence[str],
        *,
        caller: str,
        attributes: Mapping[str, Any] | None = None,
        control_inputs: Sequence[str] = (),
    ) -> FunctionInstance:
        """:meth:`instantiate`, with the call's attribute values for the body's placeholders
        (``AttrValue`` protos by name) and the call's control inputs (node names), and the
        function's control outputs in the result.

        Raises:
            GraphError: a missing function, a function that calls itself (directly or not),
                a wrong number of arguments, a list-valued argument, an input naming nothing
                of the body, an output argument that cannot be placed, an attribute
                placeholder without a value, a missing ``ret`` entry.
        """
        return self._instantiate(
            name, prefix, [tensor_name(*split_tensor_name(a)) for a in arguments], caller, attributes or {}, control_inputs, ()
        )

    def inline_call(self, node_def: Any, prefix: str) -> list[Any]:
        """The nodes replacing the call ``node_def``: the callee's body with ``prefix``, and
        the ``Identity``/``IdentityN``/``NoOp`` named like the call that stands for its outputs.

        Raises:
            GraphError: ``node_def`` calls no library function, or see :meth:`instantiate_body`.
        """
        name = self.callee(node_def)
        if name is None:
            raise GraphError(f"node '{node_def.name}' ({node_def.op}) in '{self.source}' calls no function of the library.")
        return self._inline_call(node_def, name, node_def.name, prefix, node_def.input, ())

    def _inline_call(
        self, node_def: Any, name: str, result_name: str, prefix: str, inputs: Sequence[str], stack: tuple[str, ...]
    ) -> list[Any]:
        """The callee's nodes and the result node ``result_name``; ``inputs`` are the call's
        canonical inputs (data, then ``^control``)."""
        arguments = [tensor_name(*split_tensor_name(i)) for i in inputs if not i.startswith("^")]
        controls = list(dict.fromkeys(i[1:] for i in inputs if i.startswith("^")))
        attributes = self.call_attributes(node_def)
        instance = self._instantiate(name, prefix, arguments, result_name, attributes, controls, stack)
        types = self._output_types(name, node_def, attributes, len(instance.outputs))
        result = type(node_def)()
        result.name = result_name
        result.device = node_def.device
        result.op = "NoOp" if not instance.outputs else "Identity" if len(instance.outputs) == 1 else "IdentityN"
        result.input.extend(instance.outputs)
        result.input.extend(f"^{c}" for c in dict.fromkeys([*instance.control_outputs, *controls]))
        if types is not None and instance.outputs:
            if len(types) == 1:
                result.attr["T"].type = types[0]
            else:
                result.attr["T"].list.type.extend(types)
        return [*instance.nodes, result]

    def _output_types(self, name: str, node_def: Any, attributes: Mapping[str, Any], count: int) -> list[int] | None:
        """The ``DataType`` of each output: the signature's, else the call's ``Tout``."""
        types = []
        for argument in self._functions[name].signature.output_arg:
            if argument.type:
                types.append(argument.type)
            elif argument.type_attr and argument.type_attr in attributes:
                types.append(attributes[argument.type_attr].type)
            else:
                break
        else:
            if len(types) == count:
                return types
        if "Tout" in node_def.attr and len(node_def.attr["Tout"].list.type) == count:
            return list(node_def.attr["Tout"].list.type)
        return None

    def _instantiate(
        self,
        name: str,
        prefix: str,
        arguments: Sequence[str],
        caller: str,
        attributes: Mapping[str, Any],
        control_inputs: Sequence[str],
        stack: tuple[str, ...],
    ) -> FunctionInstance:
        function = self.function(name, caller=caller)
        if name in stack:
            cycle = " -> ".join(f"'{n}'" for n in (*stack[stack.index(name) :], name))
            raise GraphError(
                f"function '{name}' in '{self.source}' calls itself ({cycle}; reached from node '{caller}'); "
                "polytf inlines every function call and cannot inline a recursion."
            )
        body = FunctionBody(function, prefix, arguments, caller, self.source, attributes, self.output_arguments_of)
        stack = (*stack, name)
        nodes: list[Any] = []
        for node in body.nodes:
            data, controls, reads_caller = body.resolved_inputs(node)
            if reads_caller or not node.input:  # Grappler's input_control_node
                controls = list(dict.fromkeys([*controls, *control_inputs]))
            callee = self.callee(node)
            if callee is None:
                copy = type(node)()
                copy.CopyFrom(node)
                copy.name = prefix + node.name
                del copy.input[:]
                copy.input.extend([*data, *(f"^{c}" for c in controls)])
                nodes.append(copy)
                continue
            nested_prefix = prefix + fresh_prefix(node.name, body.scopes)
            inputs = [*data, *(f"^{c}" for c in controls)]
            nodes.extend(self._inline_call(node, callee, prefix + node.name, nested_prefix, inputs, stack))
        return FunctionInstance(tuple(nodes), body.outputs(), body.control_outputs())
