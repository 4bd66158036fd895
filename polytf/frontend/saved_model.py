"""SavedModel directories as input: one signature frozen to a GraphDef whose placeholders and
outputs carry the signature's names.

A SavedModel (``saved_model.pb`` + ``variables/``) holds functions and a checkpoint, not a
frozen graph. TensorFlow reads it: :func:`freeze_signature` loads the directory with
``tf.saved_model.load``, takes the signature's concrete function, and folds the variables
into constants with ``convert_variables_to_constants_v2`` (the same freezing the model zoo
uses), so TensorFlow must be installed (``pip install 'polytf[tensorflow]'``); a frozen
``.pb`` needs nothing but polytf.

The frozen graph's placeholders are renamed to the signature's input names and its output
``Identity`` nodes to the signature's output keys, so that ``polytf.load(directory)`` takes
``model(**{input_name: array})`` and returns ``{output_key: array}`` as the signature does.
Node names do not enter tuning-cache keys, so a SavedModel and its frozen GraphDef share
tuning records.

Source: TensorFlow's SavedModel guide (tensorflow.org/guide/saved_model, "Specifying
signatures during export") and ``tf.saved_model.load``'s ``signatures`` mapping.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from polytf.errors import GraphError
from polytf.frontend.tensorflow_import import import_tensorflow

__all__ = ["DEFAULT_SIGNATURE", "is_saved_model", "freeze_signature"]

#: The signature TensorFlow Serving and Keras' ``model.export`` use.
DEFAULT_SIGNATURE = "serving_default"


def is_saved_model(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory holding ``saved_model.pb``."""
    directory = Path(path)
    return directory.is_dir() and (directory / "saved_model.pb").is_file()


def freeze_signature(path: str | os.PathLike[str], signature: str | None = None) -> Any:
    """The signature ``signature`` of the SavedModel at ``path`` as a frozen GraphDef proto.

    Args:
        path: a SavedModel directory.
        signature: signature key (default :data:`DEFAULT_SIGNATURE`).

    Returns:
        A ``GraphDef`` (TensorFlow's proto class; it serialises to the format polytf's
        frontend parses) whose placeholders are named after the signature's inputs and
        whose outputs are ``Identity`` nodes named after the signature's output keys.

    Raises:
        DependencyMissingError: TensorFlow is not installed.
        GraphError: not a SavedModel, TensorFlow cannot load it, or no such signature (the
            message lists the signatures it has).
    """
    shown = str(path)
    if not is_saved_model(path):
        raise GraphError(f"cannot read '{shown}' as a SavedModel: it is not a directory with a saved_model.pb")
    signature = signature or DEFAULT_SIGNATURE
    tf = import_tensorflow("reading a SavedModel directory (without it, give polytf a frozen GraphDef .pb instead)")
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    try:
        loaded = tf.saved_model.load(shown)
    except Exception as error:  # TensorFlow raises assorted errors on damaged directories
        raise GraphError(f"TensorFlow cannot load the SavedModel '{shown}': {type(error).__name__}: {str(error)[:300]}") from None
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if signature not in signatures:
        available = ", ".join(sorted(signatures)) or "none"
        raise GraphError(f"the SavedModel '{shown}' has no signature '{signature}'; its signatures: {available} (choose one with --signature)")
    function = signatures[signature]
    frozen = convert_variables_to_constants_v2(function)
    graph_def = frozen.graph.as_graph_def()
    input_names = _signature_inputs(function, frozen)
    output_names = _signature_outputs(function, frozen)
    return _renamed(graph_def, {**input_names, **output_names})


def _signature_inputs(function: Any, frozen: Any) -> dict[str, str]:
    """Placeholder node name -> signature input name."""
    specs = function.structured_input_signature[1]
    placeholders = [tensor.op.name for tensor in frozen.inputs if tensor.dtype != "resource"]
    names = {}
    for key, spec in specs.items():
        wanted = getattr(spec, "name", None) or key
        match = next((p for p in placeholders if p == wanted or p == key), None)
        if match is not None:
            names[match] = key
    return names


def _signature_outputs(function: Any, frozen: Any) -> dict[str, str]:
    """Output node name -> signature output key (TensorFlow flattens the output dict by sorted key)."""
    keys = sorted(function.structured_outputs)
    return {tensor.op.name: key for key, tensor in zip(keys, frozen.outputs)}


def _renamed(graph_def: Any, renames: dict[str, str]) -> Any:
    """``graph_def`` with nodes renamed (``old -> new``); a node already called ``new`` is moved
    aside first (``new`` + ``_1``, ...), and every input that names a renamed node follows."""
    taken = {node.name for node in graph_def.node}
    mapping: dict[str, str] = {}
    for old, new in renames.items():
        if old == new:
            continue
        if new in taken and new not in renames:
            suffix = 1
            while f"{new}_{suffix}" in taken:
                suffix += 1
            mapping[new] = f"{new}_{suffix}"
            taken.add(f"{new}_{suffix}")
        mapping[old] = new
        taken.add(new)
    if not mapping:
        return graph_def

    def rename_input(text: str) -> str:
        control = text.startswith("^")
        name, colon, port = text.lstrip("^").partition(":")
        return ("^" if control else "") + mapping.get(name, name) + colon + port

    for node in graph_def.node:
        node.name = mapping.get(node.name, node.name)
        renamed_inputs = [rename_input(i) for i in node.input]
        del node.input[:]
        node.input.extend(renamed_inputs)
    return graph_def
