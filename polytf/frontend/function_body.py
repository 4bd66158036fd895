"""One function's body with the names of one call: FunctionDef tensor names resolved to the
caller's graph.

Inside a ``FunctionDef`` (tensorflow/core/framework/function.proto; resolution as in
tensorflow/core/framework/function.cc ``InstantiateFunction`` and
tensorflow/python/framework/function_def_to_graph.py):

* ``"arg"`` or ``"arg:0"`` is the input argument ``arg``: here the caller's tensor;
* ``"n:output_arg:i"`` is tensor ``i`` of body node ``n``'s output argument ``output_arg``:
  here ``"<prefix>n:port"`` (:mod:`polytf.frontend.output_arguments` places the argument);
* ``"n:output_arg"`` is every tensor of a list-valued output argument;
* ``"^n"`` is a control input on body node ``n`` (``"^arg"``: on the caller's producer);
* an attribute value ``placeholder: "T"`` is the call's attribute ``T``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polytf.errors import GraphError
from polytf.frontend.output_arguments import OutputArgument, port_ranges
from polytf.graph.graph import split_tensor_name, tensor_name

__all__ = ["FunctionBody", "name_scopes"]


def name_scopes(names: Sequence[str] | set[str]) -> set[str]:
    """Every prefix ending in ``/`` of the names: ``"a/b/c"`` gives ``{"a/", "a/b/"}``."""
    scopes: set[str] = set()
    for name in names:
        end = name.find("/")
        while end >= 0:
            scopes.add(name[: end + 1])
            end = name.find("/", end + 1)
    return scopes


class FunctionBody:
    """One function's body with the names of one call: resolves FunctionDef tensor names to
    the caller's graph (tensorflow/core/framework/function.cc ``InstantiateFunction``:
    ``"arg"``/``"arg:i"`` an argument, ``"n:output_arg:i"`` a node's output, ``"n:output_arg"``
    all tensors of a list-valued argument, ``"^n"`` a control input).

    Args:
        function: the ``FunctionDef``.
        prefix: prepended to the body's node names.
        arguments: the caller's canonical tensors, one per input argument.
        caller: the calling node's name, and ``source`` the file: for messages.
        attributes: the call's ``AttrValue`` protos for the body's attribute placeholders.
        output_arguments_of: a body node's output arguments (``None``: unknown, one argument),
            :meth:`FunctionLibrary.output_arguments_of`.

    Raises:
        GraphError: a list-valued argument, a wrong number of arguments, an attribute
            placeholder without a value.
    """

    def __init__(
        self,
        function: Any,
        prefix: str,
        arguments: Sequence[str],
        caller: str,
        source: str,
        attributes: Mapping[str, Any],
        output_arguments_of: Callable[[Any, str], tuple[OutputArgument, ...] | None],
    ):
        self.function = function
        self.name = function.signature.name
        self.prefix = prefix
        self.where = f"function '{self.name}' (called by node '{caller}' in '{source}')"
        self._output_arguments_of = output_arguments_of
        signature = function.signature
        for argument in signature.input_arg:
            if argument.number_attr or argument.type_list_attr:
                raise GraphError(
                    f"{self.where} has a list-valued argument '{argument.name}'; polytf inlines functions whose "
                    "arguments are single tensors."
                )
        if len(arguments) != len(signature.input_arg):
            expected = ", ".join(a.name for a in signature.input_arg)
            raise GraphError(
                f"{self.where} is called with {len(arguments)} input(s); its signature takes {len(signature.input_arg)} ({expected})."
            )
        self.arguments = {argument.name: tensor for argument, tensor in zip(signature.input_arg, arguments)}
        self.nodes = [self._with_attributes(node, attributes) for node in function.node_def]
        self.by_name = {node.name: node for node in self.nodes}
        self.scopes = name_scopes(set(self.by_name))
        self._ports: dict[str, dict[str, range] | None] = {}
        self._unknown_argument: dict[str, str] = {}

    def _with_attributes(self, node: Any, attributes: Mapping[str, Any]) -> Any:
        """``node`` with its attribute placeholders replaced by the call's values."""
        if not any(_has_placeholder(value) for value in node.attr.values()):
            return node
        copy = type(node)()
        copy.CopyFrom(node)
        for key in list(copy.attr):
            self._fill_placeholders(copy.attr[key], attributes, node.name, key)
        return copy

    def _fill_placeholders(self, value: Any, attributes: Mapping[str, Any], node: str, key: str) -> None:
        kind = value.WhichOneof("value")
        if kind == "placeholder":
            if value.placeholder not in attributes:
                raise GraphError(
                    f"{self.where}: attribute '{key}' of node '{node}' is the placeholder '{value.placeholder}', which the "
                    "call gives no value."
                )
            value.CopyFrom(attributes[value.placeholder])
        elif kind == "func":
            for inner in list(value.func.attr):
                self._fill_placeholders(value.func.attr[inner], attributes, node, f"{key}.{inner}")

    def _ports_of(self, node: str) -> dict[str, range] | None:
        """Output argument -> ports of body node ``node``; ``None`` when the op's output
        arguments are unknown (taken as one argument)."""
        if node not in self._ports:
            node_def = self.by_name[node]
            arguments = self._output_arguments_of(node_def, self.prefix + node)
            try:
                self._ports[node] = None if arguments is None else port_ranges(arguments, node_def.attr)
            except KeyError as missing:
                raise GraphError(
                    f"{self.where}: node '{node}' ({node_def.op}) lacks attribute {missing} giving its outputs."
                ) from None
        return self._ports[node]

    def _output_ports(self, node: str, argument: str, reference: str) -> range | None:
        """The ports of ``node``'s output ``argument``; ``None`` for an op whose output arguments
        are unknown: one argument, so every reference must name the same one."""
        ports = self._ports_of(node)
        if ports is None:
            seen = self._unknown_argument.setdefault(node, argument)
            if seen != argument:
                op = self.by_name[node].op
                raise GraphError(
                    f"{self.where}: node '{node}' (op {op}) is read through the output arguments '{seen}' and '{argument}'; "
                    f"polytf does not know the order of {op}'s output arguments, so it cannot place '{reference}' (add {op} to "
                    "OUTPUT_ARGUMENTS in polytf/frontend/output_arguments.py, or export the model without it)."
                )
            return None
        if argument not in ports:
            known = ", ".join(f"'{a}'" for a in ports)
            raise GraphError(
                f"{self.where}: '{reference}' names output argument '{argument}', which node '{node}' ({self.by_name[node].op}) does not have ({known})."
            )
        return ports[argument]

    def resolve(self, reference: str, reader: str) -> list[str]:
        """The graph tensors a FunctionDef data reference stands for (one, or a list's).

        Raises:
            GraphError: the reference names no argument and no node output of the body.
        """
        parts = reference.split(":")
        head = parts[0]
        if head in self.arguments and len(parts) <= 2 and (len(parts) == 1 or parts[1] == "0"):
            return [self.arguments[head]]
        if head in self.by_name and len(parts) in (2, 3):
            ports = self._output_ports(head, parts[1], reference)
            if len(parts) == 2:  # a whole argument: one tensor of an unknown op's
                return [tensor_name(self.prefix + head, port) for port in (ports if ports is not None else range(1))]
            if parts[2].isdigit() and (ports is None or int(parts[2]) < len(ports)):
                index = int(parts[2])
                return [tensor_name(self.prefix + head, index if ports is None else ports[index])]
        raise GraphError(
            f"{self.where}: {reader} reads '{reference}', which is neither an argument ({', '.join(self.arguments) or 'none'}) "
            "nor a body node's output 'node:output_arg:index'."
        )

    def resolved_inputs(self, node: Any) -> tuple[list[str], list[str], bool]:
        """``(data inputs, control inputs, whether it reads an argument)`` of a body node, in the caller's graph."""
        data: list[str] = []
        controls: list[str] = []
        reads_argument = False
        for item in node.input:
            if item.startswith("^"):
                target = item[1:]
                if target in self.by_name:
                    controls.append(self.prefix + target)
                elif target in self.arguments:
                    controls.append(split_tensor_name(self.arguments[target])[0])
                    reads_argument = True
                else:
                    raise GraphError(
                        f"{self.where}: node '{node.name}' has control input '{item}', which names no node of the body."
                    )
                continue
            head = item.split(":")[0]
            reads_argument = reads_argument or (head in self.arguments and head not in self.by_name)
            data.extend(self.resolve(item, f"node '{node.name}'"))
        return data, list(dict.fromkeys(controls)), reads_argument

    def outputs(self) -> tuple[str, ...]:
        """The returned tensors, in the order of the signature's output arguments."""
        tensors: list[str] = []
        for argument in self.function.signature.output_arg:
            if argument.number_attr or argument.type_list_attr:
                raise GraphError(
                    f"{self.where} has a list-valued output argument '{argument.name}'; polytf inlines single-tensor outputs."
                )
            if argument.name not in self.function.ret:
                raise GraphError(f"{self.where} returns nothing for its output argument '{argument.name}' (no 'ret' entry).")
            resolved = self.resolve(self.function.ret[argument.name], f"output argument '{argument.name}'")
            if len(resolved) != 1:
                raise GraphError(f"{self.where}: output argument '{argument.name}' returns {len(resolved)} tensors, not one.")
            tensors.extend(resolved)
        return tuple(tensors)

    def control_outputs(self) -> tuple[str, ...]:
        """The nodes named by the signature's control outputs (``control_ret``)."""
        names: list[str] = []
        for output in self.function.signature.control_output:
            node = self.function.control_ret.get(output, output)
            if node not in self.by_name:
                raise GraphError(f"{self.where}: control output '{output}' names '{node}', which is no node of the body.")
            names.append(self.prefix + node)
        return tuple(dict.fromkeys(names))


def _has_placeholder(value: Any) -> bool:
    kind = value.WhichOneof("value")
    return kind == "placeholder" or (kind == "func" and any(_has_placeholder(v) for v in value.func.attr.values()))
