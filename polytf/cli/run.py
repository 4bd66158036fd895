"""``polytf run MODEL --input NAME=FILE --output OUT.npz``: run a model on arrays.

A placeholder dimension the GraphDef leaves unknown takes its size from the input array
(a size symbol: :mod:`polytf.compiler.dynamic_model`; a size of 0, or two inputs that
disagree on one, is an error before anything is compiled). An input file is an ``.npy`` array, or an
``.npz`` archive: its array of the input's name (``x`` or ``x:0``), else its only array. The
output file is checked before anything is compiled; the model is built as ``polytf.load``
builds it (:func:`polytf.compiler.loading.load_model`: each kernel with its tuning record's
recipe, else its default one) and its outputs are written to exactly the file named, as an
``.npz`` archive keyed by output name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from polytf.cli.console import stdout
from polytf.cli.model_options import build_options, model_source
from polytf.compiler.dynamic_model import DynamicModel
from polytf.compiler.loading import load_model
from polytf.errors import ArgumentError
from polytf.frontend import parse_input_file_spec
from polytf.output_paths import writable_file

__all__ = ["execute", "read_input_array"]


def read_input_array(name: str, path: Path) -> np.ndarray:
    """The array of input ``name`` in the file at ``path``: an ``.npy`` array, or from an
    ``.npz`` archive the array named ``name`` (or ``name`` without ``:0``, or with it), else
    the archive's only array.

    Raises:
        ArgumentError: the file cannot be read, holds no array, or is an archive of several
            arrays none of which is named for the input (the message lists them).
    """
    if not path.is_file():
        raise ArgumentError(f"--input {name}={path}: no such file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        raise ArgumentError(f"--input {name}={path}: not a numpy array file (.npy, as numpy.save writes) or archive (.npz, numpy.savez)") from None
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded:
        names = list(loaded.files)
        for candidate in (name, name.removesuffix(":0"), f"{name}:0"):
            if candidate in names:
                return loaded[candidate]
        if len(names) == 1:
            return loaded[names[0]]
        if not names:
            raise ArgumentError(f"--input {name}={path}: the archive holds no array")
        raise ArgumentError(
            f"--input {name}={path}: the archive holds arrays {names} and none is named '{name}'; "
            f"name the input after one of them, or save the input's array alone (.npy)"
        )


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf run``; returns the exit status.

    Raises:
        SystemExit: a malformed ``--input``.
        ArgumentError: an input file that cannot be read, an output file that cannot be
            written (both checked before the model is compiled).
    """
    output = writable_file(arguments.output, "--output")
    feeds = {}
    for spec in arguments.input or []:
        try:
            name, path = parse_input_file_spec(spec)
        except ValueError as error:
            raise SystemExit(f"error: --input {spec!r}: {error}") from None
        feeds[name] = read_input_array(name, path)
    source = model_source(arguments, {}, arguments.fetch)
    # a dimension unknown in the GraphDef is a size symbol: built for the arrays' sizes
    model = load_model(source, build_options(arguments), first_call_shapes={name: value.shape for name, value in feeds.items()})
    if isinstance(model, DynamicModel):
        model = model.at_sizes_of(feeds)
    results = model(**feeds)  # numpy arrays in, numpy arrays out (on the GPU too)
    try:
        with output.open("wb") as handle:  # the file named, not NAME.npz as np.savez(NAME) writes
            np.savez(handle, **results)
    except OSError as error:
        raise ArgumentError(f"--output {arguments.output}: cannot write it ({error.strerror})") from None
    for name, value in results.items():
        stdout.print(f"{name}: {value.dtype}{list(value.shape)}")
    stdout.print(f"wrote {output} ({len(getattr(model, 'tuned_kernels', ()))}/{len(model.kernels)} kernels tuned)")
    return 0
