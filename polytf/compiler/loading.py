"""Loading a model: a model file built for a target from its tuning records.

Steps of :func:`load_model` (``polytf.load``)::

    ModelSource, BuildOptions ─► backend ─► placeholders ─► size symbols? ─► prepare ─► tuning records ─► compile steps ─► pack weights ─► model
                                 CPU or     (kept, else     none: static     (kept,     for the target,   record, else     (kept, else      CompiledModel
                                 CUDA       read)           some: Dynamic-   else read  threads, knobs    default recipe   packed now)      or CudaModel
                                                            Model, steps 2-5 ... lower)
                                                            per size called

1. backend: :func:`~polytf.compiler.backends.backend_of_options`, chosen once (``"cuda"``
   without CuPy or a GPU fails here, before the model is read); then the placeholders'
   declared shapes (kept by an earlier load of the same file: :mod:`polytf.compiler.load_cache`,
   else from the graph, read once: :func:`~polytf.compiler.preparation.read_graph`) give the
   size symbols (:func:`~polytf.compiler.symbolic_inputs.symbolic_signature`). With symbols
   (a ``None`` batch), the model is a :class:`~polytf.compiler.dynamic_model.DynamicModel`
   whose every size goes through steps 2 to 5 as a static model; it is built for each
   symbol's smallest size at once, so that a model polytf cannot compile fails here, not at
   its first call;
2. prepare: the prepared model an earlier load of the same file kept for these shapes, else
   :func:`polytf.compiler.preparation.prepare_model` (and kept); then the C heap's free pages
   given back (:mod:`polytf.compiler.native_heap`);
3. tuning records: :func:`polytf.compiler.recorded_recipes.stored_recipes`, looked up under
   the target's fingerprint and thread count, so that one target never uses another's;
4. compile steps and model: :meth:`Backend.build_model <polytf.compiler.backends.Backend.build_model>`,
   every kernel compiled with its record's recipe, else its default recipe
   (:mod:`polytf.compiler.kernel_compilation`; linked from the compiled-code cache when it
   has them);
5. constants: the prepared graph is let go, then the weights are packed
   (:meth:`Model.pack_constants <polytf.runtime.model.Model.pack_constants>`), each weight
   released once packed; on the CPU, the packed weights an earlier load kept for these
   recipes are mapped instead (and kept when packed now).

With the compiled-code cache on (``compile_cache``), a second load of an unchanged file
does no isl or LLVM work and runs no graph pass, lowering or weight packing: it hashes the
file (or finds its hash remembered), maps the kept entries and links the kept kernels.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from polytf.compiler.backends import Backend, backend_of_options
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.dynamic_model import DynamicModel
from polytf.compiler.load_cache import LoadCache
from polytf.compiler.model_source import ModelSource
from polytf.compiler.native_heap import return_free_heap_memory
from polytf.compiler.recorded_recipes import stored_recipes
from polytf.compiler.symbolic_inputs import declared_shapes, symbolic_signature
from polytf.config import CodegenConfig, code_knobs
from polytf.graph import Graph, split_tensor_name
from polytf.graph.size_symbols import SymbolicSignature
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.runtime.model import Model
from polytf.storage.model_images import ModelImageCache

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
    kept = LoadCache(ModelImageCache(options.cache_dir), source, options.fallback) if options.code_cache_enabled() else None
    reader = _GraphReader(source)
    declared = kept.declared_shapes() if kept is not None else None
    if declared is None:
        declared = declared_shapes(reader.graph())
        if kept is not None:
            kept.save_declared_shapes(declared)
    signature = symbolic_signature(declared, source.input_shapes, first_call_shapes)
    build = _Build(source, signature, reader, options, backend, codegen, progress, kept)
    if signature.is_static:
        return build.model({}, None)
    model = DynamicModel(os.fspath(source.path), signature, build.model)
    first = signature.smallest_sizes()
    if first_call_shapes:
        first |= signature.bind(first_call_shapes)
    model.at_sizes(**first)
    return model


class _GraphReader:
    """The graph of a model file, read only if a step needs it, and once for the steps of one
    build."""

    def __init__(self, source: ModelSource) -> None:
        self.source = source
        self._graph: Graph | None = None

    def graph(self) -> Graph:
        """The graph, read now or earlier (and kept)."""
        from polytf.compiler.preparation import read_graph  # the frontend: only when a file is read

        if self._graph is None:
            self._graph = read_graph(self.source)
        return self._graph

    def take(self) -> Graph:
        """The graph, no longer kept here: its caller holds the only reference, so that its
        weights can go before they are packed (each weight held once: the peak of a load)."""
        graph, self._graph = self.graph(), None
        return graph


@dataclass(frozen=True)
class _Build:
    """Steps 2 to 5 (module docstring) of one load, for any sizes of its symbols."""

    source: ModelSource
    signature: SymbolicSignature
    reader: _GraphReader
    options: BuildOptions
    backend: Backend
    codegen: CodegenConfig
    progress: Callable[[str], None] | None
    kept: LoadCache | None

    def model(self, sizes: dict[str, int], base: Model | None) -> Model:
        """The static model of the symbols' ``sizes`` (``{}`` without symbols); ``base``: the
        model at a smaller batch size whose kernels it may run slice by slice
        (:meth:`Backend.build_model <polytf.compiler.backends.Backend.build_model>`). The graph, when
        it must be read, is not kept: another size of a dynamic model reads it again (a build
        that reads it compiles kernels too, seconds), so that a dynamic model holds no weight
        but its sizes' packed ones."""
        shapes = self.signature.concrete_shapes(sizes)
        source = self.source.with_shapes({**shapes, **{name: shape for name, shape in self.source.input_shapes.items() if split_tensor_name(name)[0] not in shapes}})
        key = self.kept.prepared_key(shapes) if self.kept is not None else None
        prepared = self.kept.prepared(key) if self.kept is not None else None
        if prepared is None:
            from polytf.compiler.preparation import prepare_model  # the passes and lowering: not on a warm load

            prepared = prepare_model(source, fallback=self.options.fallback, graph=self.reader.take())
            if self.kept is not None:
                self.kept.save_prepared(key, prepared)
        return_free_heap_memory()  # the front half's freed arrays: not in the load's peak
        cached = stored_recipes(prepared, self.options, self.backend.target, self.backend.threads, self.codegen)
        model = self.backend.build_model(prepared, progress=self.progress, cached=cached, base=base)
        # The graph and its weights go before the weights are packed: each weight is then held
        # either as read or packed, never both (the peak resident set of a load).
        del prepared
        self._pack(model, key, base)
        return_free_heap_memory()  # the build's freed temporaries and the weights as read
        return model

    def _pack(self, model: Model, prepared_key: dict | None, base: Model | None) -> None:
        """Pack ``model``'s weights: those kept for its recipes when the cache has them (then
        mapped, not packed), else packed now (and kept); for a size of a dynamic model, the
        weights equal to ``base``'s are then held as ``base``'s arrays
        (:meth:`CompiledModel.share_constants`), before the first execution context binds them."""
        kept = self.kept if isinstance(model, CompiledModel) else None
        key, mapped = None, False
        if kept is not None:
            recipes = [[name, recipe.to_dict()] for name, recipe in model.recipes.items()]
            key = kept.packed_key(prepared_key, self.backend.target.fingerprint(), code_knobs(self.codegen), recipes)
            packed = kept.packed(key)
            mapped = packed is not None and model.use_packed_weights(packed)
        if isinstance(model, CompiledModel) and isinstance(base, CompiledModel):
            model.share_constants(base)
        model.pack_constants()  # the packing still to do, and the first execution context
        if kept is not None and not mapped:
            kept.save_packed(key, model.packed_weights)
