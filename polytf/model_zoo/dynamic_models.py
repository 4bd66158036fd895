"""Zoo models frozen the way users export them: with ``None`` dimensions.

A Keras model saved for serving keeps its batch dimension ``None``, and a BERT export its
batch and sequence length; the frozen GraphDef's placeholders then declare ``-1`` there, and
the graph reads the sizes at run time (``Shape`` -> ``StridedSlice`` -> ``Pack`` ->
``Reshape``). polytf loads such a model with size symbols
(:mod:`polytf.compiler.dynamic_model`). The models are the zoo's
(:mod:`polytf.model_zoo.freeze`), with the same seeded weights:

* ``cifar_cnn``, ``mobilenet_v2``, ``resnet50``, ``transformer_encoder``: ``"input"``
  ``[None, ...]`` (a ``None`` batch);
* ``bert_encoder``: int32 ``"input"`` and ``"attention_mask"`` ``[None, None]`` (batch and
  sequence length, at most 128 tokens).

``python -m polytf.model_zoo resnet50 --batch none -o resnet50.pb`` writes one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from polytf.model_zoo.freeze import freeze_to_graphdef
from polytf.model_zoo.keras_models import cifar_cnn
from polytf.model_zoo.language_models import bert_encoder
from polytf.model_zoo.modern_models import keras_application, mobilenet_v2, transformer_encoder

__all__ = ["DYNAMIC_MODELS", "dynamic_model_inputs", "freeze_dynamic_model", "write_dynamic_model"]

#: Zoo models that can be frozen with ``None`` dimensions: name -> placeholders
#: ``((name, shape, dtype), ...)``, ``None`` where the size is the call's.
DYNAMIC_MODELS: dict[str, tuple[tuple[str, tuple[int | None, ...], str], ...]] = {
    "cifar_cnn": (("input", (None, 32, 32, 3), "float32"),),
    "mobilenet_v2": (("input", (None, 224, 224, 3), "float32"),),
    "resnet50": (("input", (None, 224, 224, 3), "float32"),),
    "transformer_encoder": (("input", (None, 128, 256), "float32"),),
    "bert_encoder": (("input", (None, None), "int32"), ("attention_mask", (None, None), "int32")),
}


def dynamic_model_inputs(name: str) -> tuple[tuple[str, tuple[int | None, ...], str], ...]:
    """The placeholders of dynamic zoo model ``name``: ``((name, shape, dtype), ...)``.

    Raises:
        ValueError: a model not in :data:`DYNAMIC_MODELS`.
    """
    if name not in DYNAMIC_MODELS:
        raise ValueError(f"zoo model {name!r} has no form with None dimensions; choose one of {', '.join(DYNAMIC_MODELS)}")
    return DYNAMIC_MODELS[name]


def freeze_dynamic_model(name: str) -> Any:
    """Build zoo model ``name`` with its ``None`` dimensions and freeze it; returns the
    ``GraphDef`` (placeholders as :data:`DYNAMIC_MODELS` says, output node ``"Identity"``).

    Raises:
        ValueError: a model not in :data:`DYNAMIC_MODELS`.
    """
    specs = dynamic_model_inputs(name)
    if name == "cifar_cnn":
        model = cifar_cnn(None)
    elif name == "mobilenet_v2":
        model = mobilenet_v2(None)
    elif name == "transformer_encoder":
        model = transformer_encoder(None)
    elif name == "bert_encoder":
        model = bert_encoder(None, sequence=None)
    else:
        model = keras_application(name, None)
    return freeze_to_graphdef(model, list(specs), unknown_sizes=True)


def write_dynamic_model(name: str, path: str | os.PathLike[str]) -> Path:
    """Write :func:`freeze_dynamic_model` of ``name`` as a binary GraphDef to ``path`` (parent
    folders created); returns the path.

    Raises:
        ValueError: a model not in :data:`DYNAMIC_MODELS`.
    """
    graph_def = freeze_dynamic_model(name)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(graph_def.SerializeToString(deterministic=True))
    return out
