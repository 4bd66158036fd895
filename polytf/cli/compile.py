"""``polytf compile MODEL -o DIR``: the model as an object file, a C header and a shared library.

Calls :func:`polytf.export.compile_model` with the model and build options of the
arguments (:mod:`polytf.cli.model_options`) and prints what it wrote, the entry point and
how to link it.
"""

from __future__ import annotations

import argparse

from rich.markup import escape

from polytf.cli.console import console, stdout
from polytf.cli.model_options import build_options, model_source
from polytf.export import RUNTIME_LIBRARIES, c_parameters, compile_model

__all__ = ["execute"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf compile``; returns the exit status."""
    source = model_source(arguments, outputs=arguments.output)
    options = build_options(arguments)
    with console.status("compiling kernels") as status:
        exported = compile_model(
            source,
            arguments.output_dir,
            options,
            name=arguments.name,
            target_triple=arguments.target_triple,
            cpu=arguments.cpu,
            features=arguments.features,
            embed_limit_bytes=int(arguments.embed_weights_limit_mb * 1024 * 1024),
            shared_library=arguments.shared_library,
            progress=lambda kernel: status.update(f"compiling {escape(kernel)}"),
        )
    untuned = len(exported.kernels) - len(exported.tuned_kernels)
    stdout.print(
        f"{exported.name}: {len(exported.kernels)} kernels for {exported.triple} ({exported.cpu}), "
        f"{len(exported.tuned_kernels)} with tuned recipes (threads {exported.threads}), {untuned} with default recipes"
    )
    written = [exported.object_path, exported.header_path, exported.weights_path, exported.shared_library_path]
    for path in written:
        if path is not None:
            stdout.print(f"wrote {path} ({path.stat().st_size} bytes)")
    if exported.shared_library_path is None and arguments.shared_library:
        stdout.print("no C compiler for this target: no shared library (link the object instead)")
    batch = "int64_t batch, " if exported.batch is not None else ""
    stdout.print(f"entry point: int {exported.name}_run({c_parameters(exported.inputs, exported.outputs)}, {batch}int threads)", highlight=False)
    if exported.batch is not None:
        limit = f"to {exported.batch.maximum}" if exported.batch.maximum is not None else "up"
        stdout.print(
            f"the batch {exported.batch.symbol} is an argument: any multiple of {exported.batch.multiple} from {exported.batch.minimum} {limit} "
            "(a fixed batch: --input NAME:8,...)",
            highlight=False,
        )
    stdout.print(f"link with: cc program.c {exported.object_path} {' '.join(RUNTIME_LIBRARIES)}", highlight=False)
    return 0
