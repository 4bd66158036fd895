"""Reading a frozen TensorFlow GraphDef into polytf's graph IR, without TensorFlow.

The protos come from ``tensorboard.compat.proto.graph_pb2``. Both the binary (``.pb``) and the
text (``.pbtxt``) encodings are accepted. Every problem with the file (missing, not a GraphDef,
truncated, inconsistent) is reported as a :class:`~polytf.errors.GraphError` naming the file;
no protobuf exception escapes.
"""

from __future__ import annotations

import difflib
import heapq
import os
import re
from collections.abc import Sequence
from pathlib import Path

from google.protobuf import message as pb_message
from google.protobuf import text_format
from tensorboard.compat.proto import graph_pb2

from polytf.errors import GraphError
from polytf.frontend.attributes import decode_attrs
from polytf.frontend.control_flow_frames import describe_cycle
from polytf.frontend.function_inlining import inline_function_calls
from polytf.frontend.lazy_tensor import LazyTensor
from polytf.frontend.while_loops import unroll_while_loops
from polytf.graph.graph import Graph, Node, split_tensor_name, tensor_name
from polytf.graph.reachability import live_node_names

__all__ = ["load_graph", "parse_graphdef", "graph_from_graphdef", "default_outputs", "EXCLUDED_SINK_OPS"]

#: Ops never taken as default outputs, even when nothing consumes them.
EXCLUDED_SINK_OPS = frozenset({"NoOp", "Const", "Placeholder"})

_EXPECTED = (
    "expected a frozen TensorFlow GraphDef (.pb binary or .pbtxt text), e.g. one written by "
    "`python -m polytf.model_zoo` or by tf.io.write_graph() after "
    "convert_variables_to_constants_v2()"
)
_TEXT_SUFFIXES = (".pbtxt", ".txt", ".prototxt")
_OP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG"
_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF"
_GZIP_MAGIC = b"\x1f\x8b"
#: a byte that ``bytes.strip`` keeps (no ASCII whitespace)
_NOT_BLANK = re.compile(rb"[^ \t\n\r\x0b\x0c]")


def _bad_file(path: str, problem: str) -> GraphError:
    return GraphError(f"cannot read '{path}': {problem}; {_EXPECTED}.")


def _what_is_it(data: bytes) -> str:
    """A hint for a file that is not a GraphDef."""
    if data.startswith(_JPEG_MAGIC) or data.startswith(_PNG_MAGIC):
        return "it looks like an image, not a GraphDef"
    if data.startswith(_HDF5_MAGIC):
        return "it looks like an HDF5 (.h5) Keras file; freeze the model to a GraphDef first"
    if data.startswith(_ZIP_MAGIC):
        return "it looks like a zip archive (a .keras file?); freeze the model to a GraphDef first"
    if data.startswith(_GZIP_MAGIC):
        return "it is gzip-compressed; decompress it first"
    return "it is not a valid GraphDef"


def _validate_parsed(graph_def: graph_pb2.GraphDef) -> str | None:
    """Return a problem description if a parse 'succeeded' on something that is no GraphDef."""
    if len(graph_def.node) == 0:
        return "it holds no nodes"
    for index, node in enumerate(graph_def.node):
        if not node.name:
            return f"node #{index} has no name"
        if not node.op:
            return f"node #{index} ('{node.name}') has no op"
        if not _OP_RE.match(node.op):
            return f"node #{index} has a malformed op type {node.op!r}"
    return None


def _utf8(data: bytes) -> str | None:
    """``data`` as text, or None when it is not valid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _parse_text(text: str) -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    text_format.Parse(text, graph_def)
    return graph_def


def parse_graphdef(path: str | os.PathLike[str]) -> graph_pb2.GraphDef:
    """Read a GraphDef proto from a binary or text file.

    Text is tried first for ``.pbtxt``/``.txt`` names, binary first otherwise; when binary
    parsing fails and the file is valid UTF-8 it is parsed as text.

    Raises:
        GraphError: the file is missing, a directory, empty, truncated, or not a GraphDef.
    """
    shown = str(path)
    file = Path(path)
    if not file.exists():
        raise GraphError(f"cannot read '{shown}': no such file; {_EXPECTED}.")
    if file.is_dir():
        if (file / "saved_model.pb").exists():
            raise GraphError(
                f"cannot parse '{shown}' as a GraphDef: it is a SavedModel directory; load it with load_graph(), "
                "polytf.load() or the polytf commands, which freeze its signature with TensorFlow."
            )
        raise GraphError(f"cannot read '{shown}': it is a directory without saved_model.pb, not a GraphDef file; {_EXPECTED}.")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise GraphError(f"cannot read '{shown}': {exc.strerror or exc}; {_EXPECTED}.") from None
    if _NOT_BLANK.search(data) is None:  # finds the first byte that is no whitespace, copies nothing
        raise _bad_file(shown, "the file is empty")

    # decoded only when text is tried: a binary GraphDef that parses never is (decoding a
    # large binary file to learn that it is no UTF-8 costs as much as parsing it)
    text: str | None = None
    attempts: list[str] = []
    order = ("text", "binary") if file.suffix.lower() in _TEXT_SUFFIXES else ("binary", "text")
    for kind in order:
        if kind == "text":
            text = _utf8(data)
            if text is None:
                attempts.append("text: not valid UTF-8")
                continue
        try:
            graph_def = _parse_text(text) if kind == "text" else graph_pb2.GraphDef.FromString(data)  # type: ignore[arg-type]
        except (pb_message.DecodeError, text_format.ParseError) as exc:
            attempts.append(f"{kind}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - protobuf raises assorted errors on garbage
            attempts.append(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        problem = _validate_parsed(graph_def)
        if problem is not None:
            attempts.append(f"{kind}: {problem}")
            continue
        return graph_def

    hint = _what_is_it(data)  # both kinds were tried: ``text`` is the decoded file, or None
    looks_like_text = text is not None and text.lstrip()[:4] in ("node", "vers", "libr")
    if data[:1] == b"\n" and not looks_like_text:
        # Binary GraphDefs start with field 1 (node), tag byte 0x0a: most likely cut short.
        hint = "it looks like a binary GraphDef that is truncated or corrupted"
    details = "; ".join(attempts)
    if len(details) > 400:
        details = details[:400] + "..."
    raise _bad_file(shown, f"{hint} ({details})")


def _canonical_input(raw: str) -> tuple[str, bool]:
    """``"x"`` -> ``("x:0", False)``, ``"x:1"`` -> ``("x:1", False)``, ``"^c"`` -> ``("c", True)``."""
    if raw.startswith("^"):
        return raw[1:], True
    node, port = split_tensor_name(raw)
    return tensor_name(node, port), False


def _topological_order(names: list[str], deps: dict[str, list[str]], source: str, ops: dict[str, str] | None = None) -> list[str]:
    """Kahn's algorithm, taking the earliest node in file order whenever there is a choice
    (``ops``: node -> op, to say what a cycle is)."""
    index = {name: i for i, name in enumerate(names)}
    users: dict[str, list[str]] = {name: [] for name in names}
    missing = {name: 0 for name in names}
    for name in names:
        unique = set(deps[name])
        missing[name] = len(unique)
        for dep in unique:
            users[dep].append(name)
    ready = [index[n] for n in names if missing[n] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for user in users[name]:
            missing[user] -= 1
            if missing[user] == 0:
                heapq.heappush(ready, index[user])
    if len(order) != len(names):
        left = {n for n in names if missing[n] > 0}
        cycle = _find_cycle(left, deps)
        shown = " -> ".join(f"'{n}'" for n in cycle) if cycle else ", ".join(f"'{n}'" for n in sorted(left)[:8])
        raise GraphError(f"the graph in '{source}' has a cycle: {shown}. {describe_cycle(cycle or sorted(left), ops or {})}")
    return order


def _find_cycle(left: set[str], deps: dict[str, list[str]]) -> list[str]:
    """One cycle among ``left`` (nodes never ready), as a closed path of names."""
    start = min(left)
    seen: dict[str, int] = {}
    path: list[str] = []
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        nxt = next((d for d in deps[node] if d in left), None)
        if nxt is None:  # cannot happen for nodes stuck in Kahn's algorithm
            return []
        node = nxt
    cycle = path[seen[node] :] + [node]
    return list(reversed(cycle))


def default_outputs(nodes: Sequence[Node]) -> tuple[str, ...]:
    """Port 0 of every sink node (nothing consumes it, data or control), excluding
    :data:`EXCLUDED_SINK_OPS`, in node order."""
    consumed: set[str] = set()
    for node in nodes:
        consumed.update(split_tensor_name(t)[0] for t in node.inputs)
        consumed.update(node.control_inputs)
    return tuple(tensor_name(node.name) for node in nodes if node.name not in consumed and node.op not in EXCLUDED_SINK_OPS)


def _select_outputs(nodes: dict[str, Node], outputs: Sequence[str] | None, source: str) -> tuple[str, ...]:
    sinks = default_outputs(list(nodes.values()))
    if outputs is None:
        if not sinks:
            raise GraphError(
                f"the graph in '{source}' has no output node (every node is consumed or is a "
                f"{'/'.join(sorted(EXCLUDED_SINK_OPS))}); name the outputs explicitly."
            )
        return sinks
    if isinstance(outputs, str):
        outputs = [outputs]
    chosen: list[str] = []
    for requested in outputs:
        node, port = split_tensor_name(str(requested).strip())
        if node not in nodes:
            if str(requested) in nodes:  # a node name that itself ends in ':<digits>'
                node, port = str(requested), 0
            else:
                close = difflib.get_close_matches(node, list(nodes), n=5, cutoff=0.5)
                candidates = list(dict.fromkeys(close + [split_tensor_name(s)[0] for s in sinks]))[:8]
                listing = ", ".join(f"'{c}'" for c in candidates) if candidates else "(none)"
                raise GraphError(f"output '{requested}' is not a node of the graph in '{source}'; candidates: {listing}.")
        chosen.append(tensor_name(node, port))
    if not chosen:
        raise GraphError(f"no outputs requested for the graph in '{source}'.")
    return tuple(dict.fromkeys(chosen))


def graph_from_graphdef(graph_def: graph_pb2.GraphDef, outputs: Sequence[str] | None = None, source: str = "<graphdef>") -> Graph:
    """Convert a parsed GraphDef to an untyped :class:`~polytf.graph.graph.Graph`.

    Args:
        graph_def: the proto.
        outputs: node or tensor names to return (``"name"`` means ``"name:0"``); ``None`` takes
            every sink node (see :func:`default_outputs`).
        source: the file name used in messages and stored in ``Graph.source``.

    Function calls are inlined first (:func:`~polytf.frontend.function_inlining.inline_function_calls`),
    then while loops unrolled (:func:`~polytf.frontend.while_loops.unroll_while_loops`).
    Tensor attributes (a ``Const``'s value) are decoded only for the nodes kept: the
    fan-in of the outputs, and the placeholders.

    Raises:
        GraphError: duplicate node names, an input naming a missing node, a cycle, an unknown
            output, a tensor attribute that cannot be decoded, a function call that cannot be inlined,
            a while loop that cannot be unrolled (a trip count known only at run time).
        ShapeError: a kept constant larger than ``FrontendConfig.max_constant_bytes``.
    """
    graph_def = inline_function_calls(graph_def, source)
    graph_def = unroll_while_loops(graph_def, source)
    raw: dict[str, Node] = {}
    duplicates: list[str] = []
    for node_def in graph_def.node:
        name = node_def.name
        if name in raw:
            duplicates.append(name)
            continue
        inputs: list[str] = []
        controls: list[str] = []
        for item in node_def.input:
            canonical, is_control = _canonical_input(item)
            (controls if is_control else inputs).append(canonical)
        try:
            attrs = decode_attrs(node_def.attr, name)
        except (ValueError, TypeError) as exc:
            raise GraphError(
                f"node '{name}' ({node_def.op}) in '{source}' has an attribute that cannot be decoded: {exc}"
            ) from None
        raw[name] = Node(
            name=name,
            op=node_def.op,
            inputs=tuple(inputs),
            control_inputs=tuple(dict.fromkeys(controls)),
            attrs=attrs,
        )
    if duplicates:
        shown = ", ".join(f"'{d}'" for d in sorted(set(duplicates))[:8])
        raise GraphError(f"the graph in '{source}' has duplicate node names: {shown}.")

    names = list(raw)
    deps: dict[str, list[str]] = {}
    dangling: list[str] = []
    for name, node in raw.items():
        producers = [split_tensor_name(t)[0] for t in node.inputs] + list(node.control_inputs)
        for producer in producers:
            if producer not in raw:
                dangling.append(f"'{name}' reads '{producer}'")
        deps[name] = producers
    if dangling:
        shown = "; ".join(dangling[:8]) + ("; ..." if len(dangling) > 8 else "")
        raise GraphError(
            f"the graph in '{source}' has inputs naming nodes that do not exist ({shown}); "
            "the file may be truncated or not a complete frozen graph."
        )

    order = _topological_order(names, deps, source, {name: node.op for name, node in raw.items()})
    nodes = {name: raw[name] for name in order}
    selected = _select_outputs(nodes, outputs, source)
    # only the fan-in of the outputs (and the placeholders, the model's signature) is kept:
    # nothing else is ever typed, decoded or compiled
    live = live_node_names(nodes, selected)
    nodes = {name: _decoded(node) for name, node in nodes.items() if name in live}
    return Graph(nodes=nodes, outputs=selected, source=source)


def _decoded(node: Node) -> Node:
    """``node`` with a ``Const``'s ``value`` decoded (checked against the size cap of
    :class:`~polytf.config.FrontendConfig` first: :meth:`LazyTensor.value`).

    Only that attribute is ever read as an array; tensor attributes of other nodes (no op
    polytf supports has one) stay undecoded :class:`LazyTensor` values, so a large tensor
    hidden in an attribute nobody reads costs nothing.
    """
    value = node.attrs.get("value")
    if node.op != "Const" or not isinstance(value, LazyTensor):
        return node
    return Node(node.name, node.op, node.inputs, node.control_inputs, {**node.attrs, "value": value.value()})


def load_graph(path: str | os.PathLike[str], outputs: Sequence[str] | None = None, signature: str | None = None) -> Graph:
    """Read a frozen GraphDef file, or one signature of a SavedModel directory, into an
    untyped :class:`~polytf.graph.graph.Graph`.

    Args:
        path: a binary (``.pb``) or text (``.pbtxt``) GraphDef, or a SavedModel directory
            (frozen by TensorFlow: :mod:`polytf.frontend.saved_model`; placeholders and
            outputs then carry the signature's input names and output keys).
        outputs: node or tensor names to return (``"Identity"`` or ``"Identity:0"``); by default
            port 0 of every node nothing consumes, except ``NoOp``, ``Const`` and ``Placeholder``.
        signature: the SavedModel signature (default ``serving_default``); only for SavedModels.

    Returns:
        The graph with nodes in topological order (file order kept where possible), inputs as
        canonical ``"producer:port"`` names, control inputs apart, attributes decoded; ``types``
        and ``constants`` are left empty for shape inference.

    Raises:
        GraphError: the file cannot be read, is not a GraphDef, or the graph is inconsistent.
    """
    from polytf.frontend.saved_model import freeze_signature, is_saved_model

    source = str(path)
    if is_saved_model(path):
        frozen = freeze_signature(path, signature)
        graph_def = graph_pb2.GraphDef.FromString(frozen.SerializeToString())
        return graph_from_graphdef(graph_def, outputs=outputs, source=source)
    if signature is not None:
        raise GraphError(f"--signature / signature= is for SavedModel directories; '{source}' is a frozen GraphDef file")
    graph_def = parse_graphdef(path)
    return graph_from_graphdef(graph_def, outputs=outputs, source=source)
