"""Frontend: frozen TensorFlow GraphDef files -> polytf's graph IR (no TensorFlow needed).

Public API:
    :func:`load_graph` reads a ``.pb``/``.pbtxt`` file into an untyped :class:`~polytf.graph.graph.Graph`
    (function calls inlined: :func:`inline_function_calls`, :class:`FunctionLibrary`);
    :func:`parse_input_spec` / :func:`parse_input_file_spec` parse the CLI's ``--input`` options.
"""

from polytf.frontend.attributes import decode_attr, decode_tensor, dtype_name
from polytf.frontend.function_inlining import inline_function_calls
from polytf.frontend.function_library import FunctionLibrary
from polytf.frontend.graphdef import default_outputs, graph_from_graphdef, load_graph, parse_graphdef
from polytf.frontend.input_spec import parse_bucket_spec, parse_input_file_spec, parse_input_spec

__all__ = [
    "load_graph",
    "parse_graphdef",
    "graph_from_graphdef",
    "default_outputs",
    "parse_bucket_spec",
    "parse_input_spec",
    "parse_input_file_spec",
    "decode_attr",
    "decode_tensor",
    "dtype_name",
    "FunctionLibrary",
    "inline_function_calls",
]
