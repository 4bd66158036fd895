"""``polytf run MODEL --input NAME=FILE.npy --output OUT.npz``: run a model on arrays.

Each input array's shape fixes its placeholder's; the model is built as ``polytf.load``
builds it (:func:`polytf.compiler.loading.load_model`: each kernel with its tuning
record's recipe, else its default one) and its outputs are written to an ``.npz`` file,
keyed by output name.
"""

from __future__ import annotations

import argparse

import numpy as np

from polytf.cli.console import stdout
from polytf.cli.model_options import build_options, model_source
from polytf.compiler.loading import load_model
from polytf.frontend import parse_input_file_spec

__all__ = ["execute"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf run``; returns the exit status.

    Raises:
        SystemExit: a malformed ``--input`` or an input file that cannot be read.
    """
    feeds = {}
    for spec in arguments.input or []:
        try:
            name, path = parse_input_file_spec(spec)
        except ValueError as error:
            raise SystemExit(f"error: --input {spec!r}: {error}") from None
        try:
            feeds[name] = np.load(path)
        except (OSError, ValueError) as error:
            raise SystemExit(f"error: cannot read input '{name}' from {path}: {error}") from None
    source = model_source(arguments, {name: value.shape for name, value in feeds.items()}, arguments.fetch)
    model = load_model(source, build_options(arguments))
    results = model(**feeds)  # numpy arrays in, numpy arrays out (on the GPU too)
    np.savez(arguments.output, **results)
    for name, value in results.items():
        stdout.print(f"{name}: {value.dtype}{list(value.shape)}")
    stdout.print(f"wrote {arguments.output} ({len(getattr(model, 'tuned_kernels', ()))}/{len(model.kernels)} kernels tuned)")
    return 0
