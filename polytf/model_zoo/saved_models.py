"""Zoo models exported as TensorFlow SavedModel directories (the format users most often
hand over), with variables in ``variables/`` rather than frozen constants.

The export wraps the model in a ``tf.Module`` whose ``serving_default`` signature takes the
zoo model's placeholders by name and returns ``{"output": ...}``; Keras models keep their
weights as variables (a checkpoint under ``variables/``), raw-op models keep their weights
as constants of the signature's graph.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from polytf.model_zoo.freeze import MODEL_NAMES, SIZED_MODELS, _build, _normalize_specs
from polytf.model_zoo.keras_models import import_tensorflow

__all__ = ["write_saved_model", "SIGNATURE_NAME", "SIGNATURE_OUTPUT"]

#: The signature every zoo SavedModel has.
SIGNATURE_NAME = "serving_default"
#: The key of the signature's one output.
SIGNATURE_OUTPUT = "output"


def write_saved_model(name: str, directory: str | os.PathLike[str], batch: int = 1) -> Path:
    """Export zoo model ``name`` (batch ``batch``) as a SavedModel directory.

    The signature :data:`SIGNATURE_NAME` takes the placeholders of the frozen zoo model
    (same names, static shapes and dtypes) and returns ``{SIGNATURE_OUTPUT: output}``;
    its outputs equal those of the frozen GraphDef written by
    :func:`polytf.model_zoo.write_model` for the same name and batch.

    Raises:
        ValueError: an unknown name or a sized model (``matmul``), which has no weights.
        DependencyMissingError: TensorFlow is not installed.
    """
    if name not in MODEL_NAMES or name in SIZED_MODELS:
        choices = ", ".join(n for n in MODEL_NAMES if n not in SIZED_MODELS)
        raise ValueError(f"no SavedModel export for {name!r}; choose one of {choices}")
    if int(batch) < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    tf = import_tensorflow()
    model, placeholders = _build(name, int(batch), None)
    specs = _normalize_specs(tf, list(placeholders))
    is_keras = hasattr(model, "layers") and hasattr(model, "get_weights")
    target = model if is_keras else getattr(model, "python_function", model)

    module = tf.Module()
    module.model = model if is_keras else None

    def serve(*args: Any) -> dict[str, Any]:
        if is_keras:
            output = target(args[0] if len(args) == 1 else list(args), training=False)
        else:
            output = target(*args)
        return {SIGNATURE_OUTPUT: output}

    signature = tf.function(serve, input_signature=specs)
    module.serve = signature
    out = Path(directory)
    out.parent.mkdir(parents=True, exist_ok=True)
    tf.saved_model.save(module, str(out), signatures={SIGNATURE_NAME: signature.get_concrete_function()})
    return out
