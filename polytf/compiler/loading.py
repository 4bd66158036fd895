"""Loading a model: a GraphDef file built for a target from its tuning records.

:func:`load_model` is what :func:`polytf.load` does: choose the backend once
(:func:`~polytf.compiler.backends.select_backend`: ``"cuda"`` without CuPy or a GPU fails
here, before the model is read), prepare the graph
(:func:`~polytf.compiler.model_builder.prepare_model`), read the recipes of its kernels
from the tuning storage under the target's fingerprint and thread count
(:func:`~polytf.compiler.model_builder.stored_recipes`), and build the backend's model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from polytf.compiler.backends import select_backend
from polytf.compiler.model_builder import prepare_model, stored_recipes
from polytf.config import CodegenConfig
from polytf.runtime.model import Model

__all__ = ["load_model"]


def load_model(
    path: str | os.PathLike, cache_dir: str | os.PathLike | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None, threads: int | None = None, fallback: bool = True, signature: str | None = None,
    target: str = "cpu", storage: str | None = None,
) -> Model:
    """A model of ``path`` for ``target`` (``"cpu"``: a
    :class:`~polytf.runtime.cpu.compiled_model.CompiledModel`; ``"cuda"``: a
    :class:`~polytf.runtime.cuda.model.CudaModel`), built from the tuning cache (untuned
    kernels, and kernels whose record cannot be used, get the default recipe; the latter
    with a CacheWarning). Records are looked up under the target's fingerprint, so one
    target never uses another's. ``storage`` (default ``$POLYTF_STORAGE``): a
    ``postgresql://`` URL whose records are used instead of the cache directory's
    (:func:`~polytf.storage.tuning_storage.open_tuning_storage`). See :func:`polytf.load`.

    Raises:
        DependencyMissingError: ``target="cuda"`` without CuPy or a GPU (before the model is
            read); a storage URL whose driver is not installed.
        CacheError: a storage URL that is invalid or whose server cannot be reached.
    """
    codegen = CodegenConfig()
    backend = select_backend(target, codegen, threads)
    prepared = prepare_model(path, input_shapes, outputs, fallback=fallback, signature=signature)
    cached = stored_recipes(prepared, storage, cache_dir, backend.target, backend.threads, codegen)
    return backend.build_model(prepared, cached=cached)
