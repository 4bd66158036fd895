"""polytf: a polyhedral loop-nest compiler and autotuner for TensorFlow graphs.

Typical use::

    import polytf
    model = polytf.load("model.pb")             # a None batch stays a size symbol N
    outputs = model(input=x)                    # {output node name: array}, any batch size
    polytf.tune("model.pb", trials=20)          # tune and cache (buckets={"N": (1, 8)}: per size)
    polytf.compile("model.pb", "out", input_shapes={"input": (1, 224, 224, 3)})  # out/model.o + .h

What model is read and how it is built can also be given as two values, made (and checked)
once and passed to any of the three::

    source = polytf.ModelSource("model.pb", input_shapes={"x": (1, 784)})
    options = polytf.BuildOptions(threads=2, cache_dir="cache")
    polytf.tune(source, trials=20, options=options)
    model = polytf.load(source, options=options)

``import polytf`` needs neither TensorFlow nor CuPy.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from polytf.compiler.build_options import BuildOptions
from polytf.compiler.model_source import ModelSource
from polytf.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from polytf.autotune.model_tuner import TuneReport, TuningProgress
    from polytf.compiler.dynamic_model import DynamicModel
    from polytf.export import ExportedModel
    from polytf.runtime.cpu.compiled_model import CompiledModel
    from polytf.runtime.cuda.model import CudaModel


def load(
    path: str | os.PathLike | ModelSource,
    cache_dir: str | os.PathLike | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    threads: int | str | None = None,
    fallback: bool = True,
    signature: str | None = None,
    target: str = "cpu",
    storage: str | None = None,
    *,
    compile_cache: bool = True,
    options: BuildOptions | None = None,
    progress: bool = True,
) -> CompiledModel | CudaModel | DynamicModel:
    """Compile a frozen GraphDef into a callable model, using tuned recipes from the cache.

    Args:
        path: frozen GraphDef, binary ``.pb`` or text ``.pbtxt``, or a SavedModel directory
            (read with TensorFlow; inputs and outputs then carry the signature's names); or a
            :class:`ModelSource` (then without ``input_shapes``, ``outputs``, ``signature``).
        cache_dir: tuning-record cache; default ``$POLYTF_CACHE_DIR`` or the user cache dir.
        input_shapes: placeholder name -> shape, to fix unknown dimensions (sizes), or to name
            and bound them: ``{"x": ("N=1..64", 224, 224, 3)}``. A dimension the GraphDef leaves
            unknown (a Keras ``None``) and ``input_shapes`` does not fix is a size symbol known
            only at the call: ``N`` on axis 0, ``S`` on axis 1, shared by every input.
        outputs: output node names (``name`` or ``name:port``); default the graph's sinks.
        threads: threads per kernel (at least 1); default (None or ``"auto"``) ``$POLYTF_THREADS``
            or all available CPUs.
        fallback: nodes whose op has a numpy reference but no lowering (or a lowering that
            fails for their attributes) run on the host between the compiled kernels
            (``model.host_nodes`` lists them and why); False refuses such a model with
            :class:`~polytf.errors.UnsupportedOpError` instead.
        signature: the SavedModel signature to compile (default ``serving_default``).
        target: ``"cpu"`` (native code for this machine's CPU) or ``"cuda"`` (PTX for the
            current NVIDIA GPU, run through CuPy; needs ``pip install 'polytf[cuda]'`` and a
            GPU). Tuning records are per target: ``polytf tune --target cuda`` fills the
            GPU's.
        storage: where the tuning records are read: None (default) reads ``$POLYTF_STORAGE``,
            else the cache directory; ``"postgresql://USER@HOST/DATABASE"`` uses the records
            that ``polytf tune --storage`` wrote to that database from any machine (those of
            this CPU, thread count and versions: they are in each record's key); nothing is
            read from the cache directory then. Needs ``pip install 'polytf[postgresql]'``.
        compile_cache: link each kernel from the object code kept in the cache directory by
            an earlier load or tune (no isl, no LLVM: a warm load takes well under a second)
            and keep the code of those compiled now; False (or ``POLYTF_NO_CODE_CACHE=1``)
            compiles everything afresh and keeps nothing, for debugging. CPU only.
        options: ``cache_dir``, ``threads``, ``fallback``, ``target``, ``storage`` and
            ``compile_cache`` as one :class:`BuildOptions` (then without those arguments).
        progress: show a progress bar on stderr while more than a few kernels compile, when
            stderr is a terminal (tqdm); False: never.

    Returns:
        When an input has a size symbol: a
        :class:`~polytf.compiler.dynamic_model.DynamicModel`, callable with arrays of any
        sizes in the symbols' ranges (a size of 0, one out of range, or inputs that disagree
        on a symbol raise :class:`~polytf.errors.SizeError` before anything runs). It is
        built for the symbols' smallest sizes now and for each other size at its first call
        (from the cache's records and compiled code when that size was built or tuned
        before; a batch that is a multiple of the smallest one runs the smallest batch's
        kernels on its slices wherever a kernel computes each sample alone, compiling none
        of them: :mod:`polytf.compiler.sliced_kernels`); ``model.at_sizes(N=8)`` is the
        model below for those sizes.
        With ``target="cuda"``: a :class:`~polytf.runtime.cuda.model.CudaModel` that keeps
        every tensor on the GPU (weights uploaded once): numpy arrays in give numpy arrays
        out; CuPy arrays in give CuPy arrays out, with no copy to the host. Otherwise a
        :class:`~polytf.runtime.cpu.compiled_model.CompiledModel`, called as
        ``model(**{placeholder_name: array}) -> {output_name: array}``, safe to call from
        several threads at once. Kernels without a usable tuning record use the default
        recipe: a corrupt, foreign (another key) or illegal record is skipped with one
        :class:`~polytf.errors.CacheWarning` naming the record file and the reason.

    Raises:
        GraphError, UnsupportedOpError, ShapeError: the model cannot be compiled (the
        message names the file, node or op).
        DependencyMissingError: ``target="cuda"`` on a machine without CuPy or an NVIDIA GPU;
            a ``storage`` URL whose driver is not installed.
        CacheError: a ``storage`` URL that is invalid or whose server cannot be reached.
        PolytfError: an unknown ``target``, a thread count below 1, an argument of the wrong
            kind, or an argument given twice (beside a ModelSource or BuildOptions).
    """
    from polytf.compiler.loading import load_model  # the compiler: loaded on first use

    source = ModelSource.of(path, signature, input_shapes, outputs)
    settings = {"fallback": fallback, "threads": threads, "target": target, "cache_dir": cache_dir, "storage": storage, "compile_cache": compile_cache}
    return load_model(source, BuildOptions.of(options, **settings), progress=None if progress else _silent)


def _silent(message: str) -> None:
    """A progress callback that shows nothing (``progress=False``)."""


def tune(
    path: str | os.PathLike | ModelSource,
    trials: int = 20,
    cache_dir: str | os.PathLike | None = None,
    retune: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    threads: int | str | None = None,
    seed: int = 0,
    progress: TuningProgress | bool | None = None,
    time_budget_s: float | None = None,
    fallback: bool = True,
    signature: str | None = None,
    target: str = "cpu",
    storage: str | None = None,
    *,
    options: BuildOptions | None = None,
    buckets: Mapping[str, Sequence[int]] | None = None,
) -> TuneReport | dict[str, TuneReport]:
    """Tune every kernel of a model by measurement and store the winners in the cache.

    Each kernel gets an Optuna study of ``trials`` candidate schedules; every candidate
    is checked against the numpy reference before it may win. Kernels that already
    have a record are reused unless ``retune``.

    With ``time_budget_s``, the tuning takes that much wall time instead (``trials`` is
    then ignored): every kernel's default recipe is measured first, then the trials go a
    few at a time to the kernels whose improvement lowers the model's latency the most
    (Ansor's task scheduler, Zheng et al., OSDI 2020, §6), and kernels that differ only in
    shape start from each other's best recipes. The budget is the wall time of the call,
    reading the model and the final timing of the whole model included (the kernels are
    tuned until 15% of it is left). Records are written after each slice of trials and reused
    by the next call; ``retune`` starts every kernel afresh within the budget.

    Args:
        path: frozen GraphDef, binary ``.pb`` or text ``.pbtxt``, or a SavedModel directory, or
            a :class:`ModelSource`: as for :func:`load`.
        trials: trials per kernel study (without a time budget).
        cache_dir, input_shapes, outputs, threads, fallback, signature, options: as for
            :func:`load` (host nodes are not tuned; the report lists them).
        retune: ignore existing records and restart the kernels' studies.
        seed: seed of the sampler, the scheduler's random choices and the test inputs.
        progress: what to show while it runs: None (default) a progress display on stderr
            when stderr is a terminal (a bar per kernel with its trials and best time so far;
            ``polytf tune``'s), True always (a line per kernel where stderr is no terminal),
            False nothing, or a :class:`~polytf.autotune.model_tuner.TuningProgress` receiving
            the events.
        time_budget_s: wall-clock budget of the tuning, seconds (e.g.
            ``polytf.durations.parse_duration("10m")``); None: ``trials`` per kernel.
        target: ``"cpu"`` or ``"cuda"``: tune GPU recipes (thread blocks, thread tiles,
            shared memory), each candidate compiled to PTX, verified and timed with CUDA
            events on the current GPU in a worker process; ``threads`` is then ignored.
        storage: where the Optuna studies and the records live: None (default) reads
            ``$POLYTF_STORAGE``, else the cache directory; ``"postgresql://USER@HOST/DATABASE"``
            keeps them in that database, so that tuners on several machines work on one
            model's kernels at once: each kernel's ``trials`` are split between them (claimed
            under a PostgreSQL advisory lock, none run twice, never more than ``trials`` in
            total), and ``load(..., storage=...)`` on any machine of the same CPU uses them.
            The cache directory then only serialises the timings of this machine's tuners.
        buckets: for a model with size symbols (see :func:`load`), symbol -> the sizes to
            tune it at (``{"N": (1, 8, 32)}``; every combination, each tuned as the model of
            its sizes; a symbol left out: its smallest size). A call of the loaded model at
            those sizes uses their records.

    Returns:
        A :class:`~polytf.autotune.model_tuner.TuneReport` (per-kernel default and tuned
        latency, trials and seconds spent, and the whole model's latency before and after);
        for a model with size symbols, bucket (``"N=8"``) -> its report, in order (an
        interrupted bucket is the last).

    Raises:
        ArgumentError: ``trials`` below 1, ``threads`` below 1, or a ``time_budget_s`` that is
            not positive (a ValueError too; raised before anything is read or written).
        TuningError: a kernel's default recipe fails.
        GraphError, UnsupportedOpError, ShapeError: the model cannot be compiled.
        SizeError: a bucket of an unknown symbol, or a size outside its symbol's range.
        DependencyMissingError: ``target="cuda"`` on a machine without CuPy or an NVIDIA GPU;
            a ``storage`` URL whose driver is not installed.
        CacheError: a ``storage`` URL that is invalid or whose server cannot be reached (the
            message shows it with its password hidden).
        PolytfError: an invalid argument, or one given twice (as for :func:`load`).
    """
    from polytf.autotune.model_tuner import tune_model  # the tuner: loaded on first use

    source = ModelSource.of(path, signature, input_shapes, outputs)
    options = BuildOptions.of(options, fallback=fallback, threads=threads, target=target, cache_dir=cache_dir, storage=storage)
    if progress is None:
        progress = sys.stderr.isatty()
    if progress is True:
        from polytf.autotune.tuning_display import RichTuningProgress  # the display `polytf tune` shows

        shown = RichTuningProgress()
    else:  # the caller's own TuningProgress, or nothing (False)
        shown = contextlib.nullcontext(progress or None)
    from polytf.compiler.symbolic_inputs import sized_sources
    from polytf.graph.size_symbols import sizes_text

    sized = sized_sources(source, buckets)
    reports: dict[str, TuneReport] = {}
    with shown as display:
        for sizes, sized_source in sized:
            report = tune_model(sized_source, options, trials=trials, retune=retune, seed=seed, progress=display, time_budget_s=time_budget_s)
            if not sizes:
                return report
            reports[sizes_text(sizes)] = report
            if report.interrupted:
                break
    return reports


def compile(  # noqa: A001 - the public name of `polytf compile`, as tfcompile's
    path: str | os.PathLike | ModelSource,
    output_dir: str | os.PathLike,
    name: str | None = None,
    target_triple: str | None = None,
    cpu: str | None = None,
    features: str | None = None,
    threads: int | str | None = None,
    cache_dir: str | os.PathLike | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    signature: str | None = None,
    storage: str | None = None,
    embed_limit_bytes: int | None = None,
    shared_library: bool = True,
    *,
    options: BuildOptions | None = None,
) -> ExportedModel:
    """Compile a model ahead of time: ``output_dir/NAME.o`` (every kernel with its tuned
    recipe from the cache, else its default one, the weights in read-only data, and
    ``int NAME_run(const float *in0, ..., float *out0, ..., int threads)`` running the whole
    model), ``NAME.h`` (declarations, shapes, dtypes, status codes), ``NAME.weights`` when
    the weights exceed ``embed_limit_bytes`` (default 256 MiB; read by ``NAME_init(path)``),
    and ``NAME.so`` when a C compiler for the target is installed. A program links
    ``NAME.o -lgomp -lm`` and needs no Python, TensorFlow or polytf;
    :mod:`polytf.export.exporter` shows a complete C program.

    Args:
        path: frozen GraphDef or SavedModel directory, or a :class:`ModelSource`.
        output_dir: where the files go (created if needed).
        name: C prefix of the symbols and stem of the files (default from ``path``).
        target_triple: ``None`` (this machine) or another LLVM triple, e.g.
            ``"aarch64-unknown-linux-gnu"`` (or ``"aarch64"``): cross-compiled, with that
            target's vector width and registers; records tuned on such a machine are used
            when the cache or ``storage`` has them, default recipes otherwise.
        cpu, features: LLVM CPU name and feature string (default: this CPU's, or
            ``"generic"`` for another triple).
        threads: the thread count whose tuning records are used (default all CPUs); the
            program passes its own thread count to ``NAME_run``.
        cache_dir, input_shapes, outputs, signature, storage, options: as for :func:`load`
            (target ``"cpu"`` only).
        embed_limit_bytes: weights past this size go to ``NAME.weights``.
        shared_library: also link ``NAME.so`` (when a C compiler is found).

    Returns:
        An :class:`~polytf.export.ExportedModel` naming the files, the parameters and the
        kernels compiled from tuning records.

    Raises:
        CompileError: an invalid name or triple, a node that only runs on the host (an
            exported model has no Python to run it), or a failed link.
        GraphError, UnsupportedOpError, ShapeError: the model cannot be compiled.
        PolytfError: an invalid argument, or one given twice (as for :func:`load`).
    """
    from polytf.export import DEFAULT_EMBED_LIMIT_BYTES, compile_model  # the exporter: loaded on first use

    source = ModelSource.of(path, signature, input_shapes, outputs)
    options = BuildOptions.of(options, threads=threads, cache_dir=cache_dir, storage=storage)
    return compile_model(
        source, output_dir, options, name=name, target_triple=target_triple, cpu=cpu, features=features, shared_library=shared_library,
        embed_limit_bytes=DEFAULT_EMBED_LIMIT_BYTES if embed_limit_bytes is None else embed_limit_bytes,
    )


__all__ = ["BuildOptions", "ModelSource", "__version__", "compile", "load", "tune"]
