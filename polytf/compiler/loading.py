"""Loading a model: a model file built for a target from its tuning records.

Steps of :func:`load_model` (``polytf.load``)::

    ModelSource, BuildOptions ─► backend ─► read ─► size symbols? ─► prepare ─► tuning records ─► compile steps ─► model
                                 CPU or     the     none: static     types ...  for the target,   record, else     CompiledModel
                                 CUDA       graph   some: a Dynamic- lower      threads, knobs    default recipe   or CudaModel
                                                    Model, steps 2-5 for each size called

1. backend: :func:`~polytf.compiler.backends.backend_of_options`, chosen once (``"cuda"``
   without CuPy or a GPU fails here, before the model is read); then the graph is read
   (:func:`~polytf.compiler.preparation.read_graph`) and its size symbols found
   (:func:`~polytf.compiler.symbolic_inputs.symbolic_signature`). With symbols (a ``None``
   batch), the model is a :class:`~polytf.compiler.dynamic_model.DynamicModel` whose every
   size goes through steps 2 to 5 as a static model; it is built for each symbol's smallest
   size at once, so that a model polytf cannot compile fails here, not at its first call;
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
from collections.abc import Callable, Mapping, Sequence

from polytf.compiler.backends import Backend, backend_of_options
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.dynamic_model import DynamicModel
from polytf.compiler.model_source import ModelSource
from polytf.compiler.native_heap import return_free_heap_memory
from polytf.compiler.preparation import prepare_model, read_graph
from polytf.compiler.recorded_recipes import stored_recipes
from polytf.compiler.symbolic_inputs import symbolic_signature
from polytf.config import CodegenConfig
from polytf.graph import Graph, split_tensor_name
from polytf.runtime.model import Model

__all__ = ["load_model"]


def load_model(
    source: ModelSource | str | os.PathLike,
    options: BuildOptions | None = None,
    progress: Callable[[str], None] | None = None,
    first_call_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Model | DynamicModel:
    """The model of ``source`` built as ``options`` say (default ``BuildOptions()``), from the
    tuning records (module docstring): untuned kernels, and kernels whose record cannot be
    used, get the default recipe (the latter with a CacheWarning). See :func:`polytf.load`.
    ``progress`` is told each kernel compiled (None: a progress bar on a terminal while more
    than a few compile: :func:`~polytf.compiler.kernel_compilation.compile_steps`).
    ``first_call_shapes`` (placeholder name -> shape) are the shapes of the arrays the first
    call will pass: a dynamic model is built for their sizes instead of the smallest ones.

    Returns:
        A :class:`~polytf.runtime.model.Model`, or, when an input has a size symbol, a
        :class:`~polytf.compiler.dynamic_model.DynamicModel` already built for the symbols'
        smallest sizes (or those of ``first_call_shapes``).

    Raises:
        DependencyMissingError: target ``"cuda"`` without CuPy or a GPU (before the model is
            read); a storage URL whose driver is not installed.
        CacheError: a storage URL that is invalid or whose server cannot be reached.
        GraphError, UnsupportedOpError, ShapeError: the model cannot be compiled.
        SizeError: ``first_call_shapes`` do not fit the size symbols (before any compiling).
    """
    source, options = ModelSource.of(source), options or BuildOptions()
    codegen = CodegenConfig()
    backend = backend_of_options(options, codegen)
    read = [read_graph(source)]
    signature = symbolic_signature(read[0], source.input_shapes, first_call_shapes)
    if signature.is_static:
        if first_call_shapes:  # a placeholder of unknown rank takes the first call's shape
            source = source.with_shapes({**signature.shapes, **source.input_shapes})
        # popped: the build holds the only reference to the graph as read, so that its weights
        # are gone before they are packed (each weight held once: the peak of a load)
        return _built_model(source, read.pop(), options, backend, codegen, progress)
    graph = read.pop()  # kept by the dynamic model: every size is built from it

    def build(sizes: dict[str, int]) -> Model:
        return _built_model(source.with_shapes(signature.concrete_shapes(sizes)), graph, options, backend, codegen, progress)

    model = DynamicModel(os.fspath(source.path), signature, build)
    first = signature.smallest_sizes()
    if first_call_shapes:
        first |= signature.bind({split_tensor_name(name)[0]: shape for name, shape in first_call_shapes.items()})
    model.at_sizes(**first)
    return model


def _built_model(
    source: ModelSource, graph: Graph, options: BuildOptions, backend: Backend, codegen: CodegenConfig, progress: Callable[[str], None] | None
) -> Model:
    """Steps 2 to 5 (module docstring): ``source``, whose every size is given, and its
    ``graph`` as read, built into a model."""
    prepared = prepare_model(source, fallback=options.fallback, graph=graph)
    del graph  # this frame's reference: the caller holds none for a static model
    return_free_heap_memory()  # the front half's freed arrays: not in the load's peak
    cached = stored_recipes(prepared, options, backend.target, backend.threads, codegen)
    model = backend.build_model(prepared, progress=progress, cached=cached)
    # The graph and its weights go before the weights are packed: each weight is then held
    # either as read or packed, never both (the peak resident set of a load).
    del prepared
    model.pack_constants()
    return_free_heap_memory()  # the build's freed temporaries and the weights as read
    return model
