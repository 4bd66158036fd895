"""The arguments that name a model and how to build it, shared by the commands that read one.

``polytf tune``, ``run``, ``compile`` and ``show`` take ``MODEL``, ``--signature``,
``--input NAME:SHAPE``, ``--output``/``--fetch`` (what model:
:class:`~polytf.compiler.model_source.ModelSource`) and ``--no-fallback``, ``--threads``,
``--target``, ``--cache-dir``, ``--storage`` (how to build it:
:class:`~polytf.compiler.build_options.BuildOptions`). The ``add_*`` functions declare them
once for every command; :func:`model_source` and :func:`build_options` turn the parsed
arguments into the two values, checked once, that the command hands to the library.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from polytf.compiler.build_options import TARGET_NAMES, BuildOptions
from polytf.compiler.model_source import ModelSource

__all__ = [
    "add_bucket_argument",
    "add_model_arguments",
    "add_output_argument",
    "add_storage_argument",
    "add_target_argument",
    "bucket_sizes",
    "build_options",
    "input_shapes",
    "model_source",
    "thread_count",
]


def add_model_arguments(command: argparse.ArgumentParser, inputs: bool = True) -> None:
    """``MODEL``, ``--signature``, ``--cache-dir``, ``--threads``, ``--input NAME:SHAPE`` (unless
    not ``inputs``: ``polytf run`` reads arrays instead) and ``--no-fallback``."""
    command.add_argument("model", help="frozen GraphDef (binary .pb or text .pbtxt) or SavedModel directory")
    command.add_argument("--signature", metavar="NAME", help="SavedModel signature to compile (default serving_default)")
    command.add_argument("--cache-dir", help="tuning-record cache (default: $POLYTF_CACHE_DIR or the user cache directory)")
    command.add_argument("--threads", type=thread_count, help="threads per kernel, at least 1, or auto (default: $POLYTF_THREADS or all CPUs)")
    if inputs:
        command.add_argument(
            "--input",
            action="append",
            metavar="NAME:SHAPE",
            help="a placeholder's shape, e.g. --input x:1,784, or with a size known only at the call: x:N,784 or x:N=1..64,784 "
            "(repeatable; a dimension the GraphDef leaves unknown is such a size: N for the batch, S for a sequence)",
        )
    command.add_argument(
        "--no-fallback",
        dest="fallback",
        action="store_false",
        help="refuse the model when a node cannot be compiled, instead of running that node's numpy reference on the host "
        "between the compiled kernels (the default; tune and show list such nodes and why)",
    )


def thread_count(text: str) -> int | None:
    """``--threads``: a whole number of at least 1, or ``auto`` (None: ``$POLYTF_THREADS`` or
    all CPUs); argparse's error otherwise."""
    if text.strip().lower() == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count: give a whole number of at least 1, or auto") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or auto: $POLYTF_THREADS or all CPUs), not {value}")
    return value


def add_output_argument(command: argparse.ArgumentParser, flag: str = "--output", description: str = "output node") -> None:
    """``--output NAME`` (repeatable; ``polytf run`` calls it ``--fetch``): the outputs of the
    :class:`~polytf.compiler.model_source.ModelSource`."""
    command.add_argument(flag, action="append", metavar="NAME", help=f"{description} (repeatable; default: the graph's sink nodes)")


def add_storage_argument(command: argparse.ArgumentParser, reading_only: bool = True) -> None:
    """``--storage URL``: the database the records are read from (and, for ``tune``, kept in)."""
    what = "tuning records are read from" if reading_only else "Optuna studies and tuning records are kept in"
    command.add_argument(
        "--storage",
        metavar="URL",
        help=f"postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE: the database the {what}, shared by machines "
        "(default: $POLYTF_STORAGE, else the cache directory; needs pip install 'polytf[postgresql]')",
    )


def add_target_argument(command: argparse.ArgumentParser, description: str) -> None:
    """``--target {cpu,cuda}`` (default cpu), described for ``command``."""
    command.add_argument("--target", choices=TARGET_NAMES, default="cpu", help=description)


def add_bucket_argument(command: argparse.ArgumentParser, what: str) -> None:
    """``--buckets SYMBOL=SIZES`` (repeatable): the sizes of a size symbol the command ``what``."""
    command.add_argument(
        "--buckets",
        action="append",
        metavar="SYMBOL=SIZES",
        help=f"sizes of a size symbol (a dimension known only at the call, e.g. a None batch) to {what}, e.g. --buckets N=1,8,32 "
        "(repeatable; every combination; default: each symbol's smallest size)",
    )


def bucket_sizes(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``--buckets SYMBOL=SIZES`` options as symbol -> sizes (:func:`polytf.frontend.parse_bucket_spec`).

    Raises:
        SystemExit: a malformed spec (``error: --buckets 'N=0': ...``, status 1).
    """
    from polytf.frontend import parse_bucket_spec

    buckets: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        try:
            name, sizes = parse_bucket_spec(spec)
        except ValueError as error:
            raise SystemExit(f"error: --buckets {spec!r}: {error}") from None
        buckets[name] = tuple(dict.fromkeys(buckets.get(name, ()) + sizes))
    return buckets


def input_shapes(specs: Sequence[str] | None) -> dict[str, tuple[int | str, ...]]:
    """``--input NAME:SHAPE`` options as placeholder name -> shape
    (:func:`polytf.frontend.parse_input_spec`).

    Raises:
        SystemExit: a malformed spec (``error: --input 'x': ...``, status 1).
    """
    from polytf.frontend import parse_input_spec  # the frontend loads numpy: not for --help

    shapes = {}
    for spec in specs or []:
        try:
            name, shape = parse_input_spec(spec)
        except ValueError as error:
            raise SystemExit(f"error: --input {spec!r}: {error}") from None
        shapes[name] = shape
    return shapes


def model_source(arguments: argparse.Namespace, shapes: Mapping[str, Sequence[int]] | None = None, outputs: Sequence[str] | None = None) -> ModelSource:
    """The model the arguments name: ``MODEL`` and ``--signature``, with ``shapes`` (default:
    the ``--input NAME:SHAPE`` options) and ``outputs`` (none: the graph's sinks).

    Raises:
        SystemExit: a malformed ``--input``.
        PolytfError: an invalid shape or output (see ModelSource).
    """
    shapes = input_shapes(arguments.input) if shapes is None else shapes
    return ModelSource(arguments.model, arguments.signature, shapes, tuple(outputs) if outputs else None)


def build_options(arguments: argparse.Namespace) -> BuildOptions:
    """How the arguments say to build the model: ``--no-fallback``, ``--threads``, ``--target``
    (cpu where the command has none), ``--cache-dir`` and ``--storage``.

    Raises:
        PolytfError: an invalid setting, e.g. ``--threads 0`` (see BuildOptions).
    """
    return BuildOptions(
        fallback=arguments.fallback,
        threads=arguments.threads,
        target=getattr(arguments, "target", "cpu"),
        cache_dir=arguments.cache_dir,
        storage=arguments.storage,
    )
