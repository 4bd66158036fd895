"""``polytf compile``: a model as an object file, a C header and a shared library (tfcompile-style).

    compile_model("model.pb", "out")  writes
        out/model.o        every kernel (tuned recipe from the cache, else the default one), the
                           entry points, and the weights in .rodata (up to a size threshold)
        out/model.h        the C declarations (polytf.export.c_header)
        out/model.weights  the weights, past the threshold (read by model_init)
        out/model.so       a shared library, when a C compiler for the target is installed

The path from the graph is the one ``polytf.load`` takes (:func:`polytf.compiler.preparation.prepare_model`,
the cache's records for this target and thread count, :func:`~polytf.compiler.kernel_compilation.compile_steps`),
except that kernels stop at optimised LLVM IR (:mod:`polytf.export.kernel_code`) and a C entry
function replaces the Python runtime (:mod:`polytf.export.entry_functions`). XLA's ``tfcompile``
(tensorflow/compiler/aot) does the same for TensorFlow graphs: an object file and a header that
a program links without TensorFlow.

A complete C program using the CIFAR CNN exported as ``cifar_cnn`` (``polytf compile
models/cifar_cnn.pb -o out``)::

    #include <stdio.h>
    #include "cifar_cnn.h"

    int main(void) {
        static float image[CIFAR_CNN_INPUT0_SIZE];    /* [1, 32, 32, 3] */
        static float logits[CIFAR_CNN_OUTPUT0_SIZE];  /* [1, 10] */
        for (int i = 0; i < CIFAR_CNN_INPUT0_SIZE; i++) image[i] = (float)(i % 255) / 255.0f;
        int status = cifar_cnn_init("out/cifar_cnn.weights");  /* does nothing when the weights are inside */
        if (status == CIFAR_CNN_OK) status = cifar_cnn_run(image, logits, 2);
        if (status != CIFAR_CNN_OK) { fprintf(stderr, "cifar_cnn: error %d\\n", status); return 1; }
        for (int i = 0; i < CIFAR_CNN_OUTPUT0_SIZE; i++) printf("%g\\n", logits[i]);
        return 0;
    }

built with ``cc -O2 -Iout main.c out/cifar_cnn.o -lgomp -lm -o main``.

A model with a ``None`` batch (and no other size symbol) is lowered at its batch's smallest
size ``b`` and exported with the batch as an argument, ``NAME_run(..., int64_t batch, int
threads)``: every kernel runs its batch-``b`` code on the batch's slices
(:mod:`polytf.export.batch_layout`); a model with a kernel that mixes samples is refused,
naming the kernel.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from polytf.compiler.build_options import BuildOptions
from polytf.compiler.kernel_compilation import compile_steps
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.compiler.recorded_recipes import stored_recipes
from polytf.compiler.symbolic_inputs import source_signature
from polytf.config import CodegenConfig
from polytf.errors import ArgumentError, CompileError
from polytf.export.batch_layout import ExportedBatch, SlicedCall, sliced_linkable_kernel
from polytf.export.c_header import header_text
from polytf.export.entry_functions import entry_module, weights_symbol
from polytf.export.kernel_code import linkable_kernel
from polytf.export.model_layout import WEIGHTS, ModelLayout, TensorPort, layout_model
from polytf.export.object_file import c_compiler, link_object, link_shared_library
from polytf.export.weights import DEFAULT_EMBED_LIMIT_BYTES, weights_file_header, weights_module
from polytf.lowering.host_fallback import HostStep
from polytf.output_paths import writable_folder
from polytf.poly.sample_slicing import sample_slicing
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.cpu import CpuTarget
from polytf.version import __version__

__all__ = ["ExportedModel", "compile_model", "default_model_name"]

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ExportedModel:
    """What :func:`compile_model` wrote.

    Attributes:
        name: the C prefix of every symbol and the files' stem.
        object_path, header_path: ``NAME.o`` and ``NAME.h``.
        weights_path: ``NAME.weights``, or None (the weights are inside the object).
        shared_library_path: ``NAME.so``, or None (no C compiler for the target, or not asked).
        inputs, outputs: the entry function's parameters (names, shapes, dtypes).
        triple, cpu, features: the target.
        threads: the thread count the recipes were chosen for (the cache's key).
        kernels: the kernels' names, execution order.
        tuned_kernels: those compiled with a recipe from a tuning record (the rest: default recipes).
        recipes: kernel name -> its recipe.
        workspace_bytes, weights_bytes: sizes of the workspace and of the weights (the
            workspace of a call at ``batch.multiple`` when the batch is an argument).
        batch: the batch argument of ``NAME_run`` (a model with a ``None`` batch:
            :mod:`polytf.export.batch_layout`); None: every size fixed. ``inputs`` and
            ``outputs`` then have their shapes at ``batch.multiple``.
    """

    name: str
    object_path: Path
    header_path: Path
    weights_path: Path | None
    shared_library_path: Path | None
    inputs: tuple[TensorPort, ...]
    outputs: tuple[TensorPort, ...]
    triple: str
    cpu: str
    features: str
    threads: int
    kernels: tuple[str, ...]
    tuned_kernels: tuple[str, ...]
    recipes: dict[str, ScheduleRecipe] = field(repr=False)
    workspace_bytes: int = 0
    weights_bytes: int = 0
    batch: ExportedBatch | None = None


def default_model_name(path: str | os.PathLike) -> str:
    """A C identifier from the model file's name (``models/cifar-cnn.pb`` -> ``cifar_cnn``)."""
    stem = Path(path).name
    for suffix in (".pbtxt", ".pb"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "model"
    return "_" + name if name[0].isdigit() else name


def compile_model(
    source: ModelSource | str | os.PathLike,
    output_dir: str | os.PathLike,
    options: BuildOptions | None = None,
    *,
    name: str | None = None,
    target_triple: str | None = None,
    cpu: str | None = None,
    features: str | None = None,
    embed_limit_bytes: int = DEFAULT_EMBED_LIMIT_BYTES,
    shared_library: bool = True,
    progress: Callable[[str], None] | None = None,
    recipes: Mapping[str, ScheduleRecipe] | None = None,
) -> ExportedModel:
    """Compile the model ``source`` ahead of time into ``output_dir`` (module docstring).

    Args:
        source: the model: a frozen GraphDef (``.pb``/``.pbtxt``) or SavedModel directory, as
            for :func:`polytf.load`.
        output_dir: where the files go (created if needed; files of the same name are replaced).
        options: how it is built (default ``BuildOptions()``): the thread count whose tuning
            records are used (default: the cores available; the program may run with any
            thread count), the cache directory and storage they are read from; target
            ``"cpu"`` only. ``fallback=False`` refuses a node polytf cannot compile while
            reading the model (UnsupportedOpError); True (default) refuses it after lowering,
            naming every such node and why (an exported model cannot run host steps either way).
        name: C prefix of the symbols and stem of the files; default from the model's file name.
        target_triple: LLVM triple or ``aarch64``; default the host. Another architecture is
            cross-compiled: its kernels use records tuned on such a machine (copied into the
            cache), else their default recipes for that target's vector lanes and registers.
        cpu, features: LLVM CPU name and features (default the host's; ``generic`` and the
            CPU's own features for a cross target).
        embed_limit_bytes: weights larger than this go to ``NAME.weights``.
        shared_library: also link ``NAME.so`` when a C compiler for the target is installed.
        progress: called with each kernel's name as it is compiled.
        recipes: kernel name -> the recipe to compile it with, before any record (as
            :func:`polytf.compiler.model_builder.build_model` takes them).

    Returns:
        What was written.

    Raises:
        CompileError: an invalid name or triple, a target other than ``"cpu"``, a node that
            only runs on the host, or a failed link.
        ArgumentError: ``output_dir`` is a file, or cannot be written or created (checked first).
        GraphError, UnsupportedOpError, ShapeError: as :func:`polytf.load`.
        CacheError, DependencyMissingError: a storage URL that cannot be used.
    """
    source, options = ModelSource.of(source), options or BuildOptions()
    name = name or default_model_name(source.path)
    if not _C_IDENTIFIER.fullmatch(name):
        raise CompileError(f"--name {name!r} is not a C identifier (letters, digits and _, not starting with a digit)")
    if options.target != "cpu":
        raise CompileError(f"an exported model runs on the CPU (target_triple chooses which); target {options.target!r} cannot be exported")
    directory = writable_folder(output_dir, "output folder")  # before minutes of compiling
    codegen = CodegenConfig()
    target = CpuTarget(codegen, cpu_name=cpu, features=features, triple=target_triple)
    threads = options.thread_count()
    model_file = Path(source.path).name
    batch, sliced = None, ()
    batched = _batched_sources(source)
    if batched is not None:
        batch, source, larger = batched
    prepared = prepare_model(source, fallback=options.fallback)
    cached = stored_recipes(prepared, options, target, threads, codegen)
    steps, tuned = compile_steps(prepared, recipes, target, threads, progress, cached, compiler=linkable_kernel(target))
    if batch is not None:
        steps, sliced = _sliced_steps(steps, prepare_model(larger, fallback=options.fallback), threads, model_file, batch)
    layout = layout_model(prepared.graph, steps, model_file)
    if batch is not None:
        _check_batched_ports(layout, batch, model_file)
    external = len(layout.weights) > embed_limit_bytes

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ArgumentError(f"output folder {output_dir}: cannot create it ({error.strerror})") from None
    data_layout = str(target.target_machine.target_data)
    entry = target.optimise(entry_module(layout, name, external, target.triple, data_layout, batch, sliced), f"{name} entry points")
    modules = [(f"the entry points of {name}", str(entry))]
    if not external:
        modules.append((f"the weights of {name}", weights_module(layout.weights, weights_symbol(name), target.triple, data_layout)))
    kernels = {call.kernel.symbol: call.kernel for call in layout.calls}
    modules += [(f"kernel {symbol}", kernel.llvm_ir) for symbol, kernel in kernels.items()]
    public = [f"{name}_run", f"{name}_run_with_workspace", f"{name}_workspace_bytes", f"{name}_init"]
    object_path = directory / f"{name}.o"
    _write_atomically(object_path, link_object(modules, public, target))
    header_path = directory / f"{name}.h"
    _write_atomically(header_path, header_text(layout, name, model_file, threads, target.triple, target.cpu_name, external, __version__, batch).encode())
    weights_path = directory / f"{name}.weights"
    if external:
        _write_atomically(weights_path, weights_file_header(layout.tag, len(layout.weights)), layout.weights)
    else:
        weights_path.unlink(missing_ok=True)  # a stale file of an earlier export must not be mistaken for this one's
        weights_path = None
    library_path = None
    compiler = c_compiler(target) if shared_library else None
    if compiler is not None:
        library_path = directory / f"{name}.so"
        link_shared_library(object_path, library_path, compiler)
    return ExportedModel(
        name=name,
        object_path=object_path,
        header_path=header_path,
        weights_path=weights_path,
        shared_library_path=library_path,
        inputs=layout.inputs,
        outputs=layout.outputs,
        triple=target.triple,
        cpu=target.cpu_name,
        features=target.features,
        threads=threads,
        kernels=tuple(call.kernel.symbol for call in layout.calls),
        tuned_kernels=tuned,
        recipes={call.kernel.symbol: call.kernel.recipe for call in layout.calls},
        workspace_bytes=layout.workspace_bytes,
        weights_bytes=len(layout.weights),
        batch=batch,
    )


def _batched_sources(source: ModelSource) -> tuple[ExportedBatch, ModelSource, ModelSource] | None:
    """For a model whose one size symbol is a batch (module docstring of
    :mod:`polytf.export.batch_layout`): the batch argument, the source at the symbol's
    smallest size ``b`` and at ``2 b``; None for a model with every size given.

    Raises:
        CompileError: a size symbol that is not a batch (a sequence length), or a range
            holding one multiple of its minimum only.
    """
    signature = source_signature(source)
    if signature.is_static:
        return None
    batch = signature.batch_symbol
    others = [name for name in signature.symbols if name != batch]
    if batch is None or others:
        symbols = ", ".join(f"{name} ({signature.symbols[name].range_text})" for name in (others or list(signature.symbols)))
        raise CompileError(
            f"model {Path(source.path).name}: an exported model takes its batch as an argument, but no other size symbol: {symbols}; "
            f"give each its size (--input {next(iter(signature.shapes))}:...)"
        )
    symbol = signature.symbols[batch]
    if symbol.maximum is not None and symbol.maximum < 2 * symbol.minimum:
        raise CompileError(f"model {Path(source.path).name}: batch {batch} in {symbol.range_text} holds one multiple of {symbol.minimum}: give the batch (--input)")
    smallest, larger = {batch: symbol.minimum}, {batch: 2 * symbol.minimum}
    exported = ExportedBatch(batch, symbol.minimum, symbol.minimum, symbol.maximum)
    return exported, source.with_shapes(signature.concrete_shapes(smallest)), source.with_shapes(signature.concrete_shapes(larger))


def _check_batched_ports(layout: ModelLayout, batch: ExportedBatch, model_file: str) -> None:
    """Every input and output of a model exported with its batch as an argument must have the
    batch as its first dimension.

    Raises:
        CompileError: an input without it, or an output that is a constant.
    """
    for port in layout.inputs:
        if not port.shape or port.shape[0] % batch.multiple:
            raise CompileError(f"model {model_file}: input '{port.name}' {list(port.shape)} has no batch {batch.symbol} as its first dimension; give every size (--input)")
    for copy in layout.output_copies:
        if copy.source.base == WEIGHTS:
            raise CompileError(f"model {model_file}: output '{layout.outputs[copy.output].name}' is a constant, not batch-sized; export at a fixed batch (--input)")


def _sliced_steps(steps: list, larger: PreparedModel, threads: int, model_file: str, batch: ExportedBatch) -> tuple[list, tuple[SlicedCall, ...]]:
    """The kernels of ``steps`` (at the batch ``b``) with their scratch copies per thread, and
    how each runs on slices, from the same kernels at ``2 b`` (``larger``).

    Raises:
        CompileError: a kernel that is not the same at ``2 b`` but for the batch (it mixes
            the samples of a batch: a reduction over the batch, a transpose that moves it).
    """
    at_larger = {kernel.scop.name: kernel.scop for kernel in larger.kernels}
    result, sliced = [], []
    for step in steps:
        if isinstance(step, HostStep):
            result.append(step)  # refused by the layout, with every host node named
            continue
        lowered, kernel = step
        slicing = sample_slicing(at_larger[lowered.scop.name], lowered.scop) if lowered.scop.name in at_larger else None
        if slicing is None:
            ops = ", ".join(f"'{node}' ({op})" for node, op in lowered.scop.ops)
            raise CompileError(
                f"model {model_file}: kernel {lowered.scop.name} ({ops}) does not compute each sample of batch {batch.symbol} alone, "
                f"so the batch cannot be an argument of the exported model; export it at a fixed batch (--input NAME:8,...)"
            )
        kernel, call = sliced_linkable_kernel(kernel, slicing, threads)
        result.append((lowered, kernel))
        sliced.append(call)
    return result, tuple(sliced)


def _write_atomically(path: Path, *chunks: bytes) -> None:
    """Write ``chunks`` one after the other to ``path``: a reader sees the old file or the new one."""
    temporary = path.with_name(path.name + ".partial")
    with open(temporary, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
    os.replace(temporary, path)

