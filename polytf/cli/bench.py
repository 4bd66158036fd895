"""``polytf bench``: time polytf against numpy, TensorFlow and XLA (or, with ``--target cuda``,
against cuBLAS and cuDNN on the GPU) and write a report.

The bench is a program of its own (:mod:`polytf.bench`): this command hands it the parsed
arguments and the consoles.
"""

from __future__ import annotations

import argparse

from polytf.bench.cuda_runner import cuda_options_from_arguments, run_cuda_bench
from polytf.bench.runner import options_from_arguments, run_bench
from polytf.cli.console import console, stdout

__all__ = ["execute"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf bench``; returns the bench's exit status."""
    if arguments.target == "cuda":
        if arguments.threads:
            console.print("[yellow]--threads is ignored with --target cuda[/]")
        return run_cuda_bench(cuda_options_from_arguments(arguments), console=console, stdout=stdout)
    return run_bench(options_from_arguments(arguments), console=console, stdout=stdout)
