"""Ahead-of-time export: a model as an object file, a C header and a shared library.

``polytf compile MODEL -o DIR`` and :func:`polytf.compile` call :func:`compile_model`
(:mod:`polytf.export.exporter` documents the files and shows a complete C program; a model
with a ``None`` batch takes it as an argument: :mod:`polytf.export.batch_layout`).
"""

from polytf.export.batch_layout import ExportedBatch
from polytf.export.c_header import c_parameters
from polytf.export.entry_functions import STATUS_CODES
from polytf.export.exporter import ExportedModel, compile_model, default_model_name
from polytf.export.model_layout import TensorPort
from polytf.export.object_file import RUNTIME_LIBRARIES, c_compiler
from polytf.export.weights import DEFAULT_EMBED_LIMIT_BYTES

__all__ = [
    "DEFAULT_EMBED_LIMIT_BYTES",
    "RUNTIME_LIBRARIES",
    "STATUS_CODES",
    "ExportedBatch",
    "ExportedModel",
    "TensorPort",
    "c_compiler",
    "c_parameters",
    "compile_model",
    "default_model_name",
]
