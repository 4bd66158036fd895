"""``polytf bench``: time polytf against numpy, TensorFlow, XLA, OpenVINO and ONNX Runtime (or,
with ``--target cuda``, against cuBLAS and cuDNN on the GPU) and write a report.

The bench is a program of its own (:mod:`polytf.bench`): this command hands it the parsed
arguments and the consoles.
"""

from __future__ import annotations

import argparse

from polytf.bench.options import options_from_arguments
from polytf.bench.runner import run_bench
from polytf.cli.console import console, stdout

__all__ = ["execute"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf bench`` (on the backend ``--target`` names); returns the bench's exit status."""
    return run_bench(options_from_arguments(arguments), console=console, stdout=stdout)
