"""Inlining of function calls: a GraphDef whose ``PartitionedCall`` / ``StatefulPartitionedCall``
nodes, and nodes whose op type names a library function, are replaced by the functions' bodies.

This is what Grappler's function optimizer does before any other pass
(tensorflow/core/grappler/optimizers/function_optimizer.cc, with
tensorflow/core/common_runtime/inline_function_utils.cc): polytf compiles every function, so
``_noinline`` and ``_XlaMustCompile`` (Keras 3 marks ``Conv2D(groups > 1)`` and
``jit_compile=True`` functions so) are ignored. The body of a call ``c`` becomes nodes named
``c/<body node>``, and ``c`` itself an ``Identity``/``IdentityN`` of the returned tensors, so
readers of ``c:i`` need no rewriting (:class:`~polytf.frontend.function_library.FunctionLibrary`).
``While``/``If`` nodes and the library itself are kept for the passes that handle them.
"""

from __future__ import annotations

from typing import Any

from polytf.frontend.function_library import FunctionLibrary, fresh_prefix, name_scopes

__all__ = ["inline_function_calls"]


def inline_function_calls(graph_def: Any, source: str = "<graphdef>") -> Any:
    """``graph_def`` with every function call inlined, nested calls included.

    Args:
        graph_def: a ``GraphDef`` proto; it is not modified.
        source: the file it came from, for messages.

    Returns:
        ``graph_def`` itself when it calls no function; otherwise a new ``GraphDef`` of the
        same class with the same library and versions, each call replaced in place (file
        order kept) by its body and a node of the call's name standing for its outputs.

    Raises:
        GraphError: a call of a function the library lacks (naming the node and the function),
            a recursion (naming the cycle of functions), or a body that cannot be inlined
            (:meth:`FunctionLibrary.instantiate_body`).
    """
    if not len(graph_def.library.function):
        return graph_def
    library = FunctionLibrary.from_graphdef(graph_def, source)
    callees = [library.callee(node) for node in graph_def.node]
    if not any(callees):
        return graph_def
    scopes = name_scopes({node.name for node in graph_def.node})
    inlined = type(graph_def)()
    inlined.versions.CopyFrom(graph_def.versions)
    inlined.library.CopyFrom(graph_def.library)
    for node, callee in zip(graph_def.node, callees):
        if callee is None:
            inlined.node.add().CopyFrom(node)
            continue
        nodes = library.inline_call(node, fresh_prefix(node.name, scopes))
        scopes |= name_scopes({n.name for n in nodes})
        inlined.node.extend(nodes)
    return inlined
