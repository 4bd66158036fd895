"""Loading a model: a model file built for a target from its tuning records.

Steps of :func:`load_model` (``polytf.load``)::

    ModelSource, BuildOptions ─► backend ─► prepare ─► tuning records ─► compile steps ─► model
                                 CPU or     read ...   for the target,   record, else     CompiledModel
                                 CUDA       lower      threads, knobs    default recipe   or CudaModel

1. backend: :func:`~polytf.compiler.backends.backend_of_options`, chosen once (``"cuda"``
   without CuPy or a GPU fails here, before the model is read);
2. prepare: :func:`polytf.compiler.preparation.prepare_model`, then the C heap's free pages
   given back (:mod:`polytf.compiler.native_heap`);
3. tuning records: :func:`polytf.compiler.recorded_recipes.stored_recipes`, looked up under
   the target's fingerprint and thread count, so that one target never uses another's;
4. compile steps and model: :meth:`Backend.build_model <polytf.compiler.backends.Backend.build_model>`,
   every kernel compiled with its record's recipe, else its default recipe
   (:mod:`polytf.compiler.kernel_compilation`);
5. constants: the prepared graph is let go, then the weights are packed
   (:meth:`Model.pack_constants <polytf.runtime.model.Model.pack_constants>`), each weight
   released once packed.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from polytf.compiler.backends import backend_of_options
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.model_source import ModelSource
from polytf.compiler.native_heap import return_free_heap_memory
from polytf.compiler.preparation import prepare_model
from polytf.compiler.recorded_recipes import stored_recipes
from polytf.config import CodegenConfig
from polytf.runtime.model import Model

__all__ = ["load_model"]


def load_model(source: ModelSource | str | os.PathLike, options: BuildOptions | None = None, progress: Callable[[str], None] | None = None) -> Model:
    """The model of ``source`` built as ``options`` say (default ``BuildOptions()``), from the
    tuning records (module docstring): untuned kernels, and kernels whose record cannot be
    used, get the default recipe (the latter with a CacheWarning). See :func:`polytf.load`.
    ``progress`` is told each kernel compiled (None: a progress bar on a terminal while more
    than a few compile: :func:`~polytf.compiler.kernel_compilation.compile_steps`).

    Raises:
        DependencyMissingError: target ``"cuda"`` without CuPy or a GPU (before the model is
            read); a storage URL whose driver is not installed.
        CacheError: a storage URL that is invalid or whose server cannot be reached.
        GraphError, UnsupportedOpError, ShapeError: the model cannot be compiled.
    """
    source, options = ModelSource.of(source), options or BuildOptions()
    codegen = CodegenConfig()
    backend = backend_of_options(options, codegen)
    prepared = prepare_model(source, fallback=options.fallback)
    return_free_heap_memory()  # the front half's freed arrays: not in the load's peak
    cached = stored_recipes(prepared, options, backend.target, backend.threads, codegen)
    model = backend.build_model(prepared, progress=progress, cached=cached)
    # The graph and its weights go before the weights are packed: each weight is then held
    # either as read or packed, never both (the peak resident set of a load).
    del prepared
    model.pack_constants()
    return_free_heap_memory()  # the build's freed temporaries and the weights as read
    return model
