"""A C program that runs an exported model on inputs from files and times it.

``polytf compile`` users link their own programs (:mod:`polytf.export.exporter` shows one);
this one is for checking an export: the tests and ``results/aot_export.py`` link it against
``NAME.o`` (natively, or with a cross compiler and ``qemu-aarch64``) and compare its outputs
with ``polytf.load``'s. Usage of the built program::

    program THREADS REPEATS WEIGHTS [BATCH] INPUT_FILE... OUTPUT_FILE...

Each input file holds the raw bytes of one input (C order, the header's dtype and size);
each output is written the same way (``BATCH``: the batch of a model that takes it as an
argument, the files then that batch's sizes). ``WEIGHTS`` is the ``NAME.weights`` path for ``NAME_init``, or ``-`` (not called). With
``REPEATS`` > 0 the model is run 3 times untimed and ``REPEATS`` times timed on one workspace
(``NAME_run_with_workspace``, ``clock_gettime(CLOCK_MONOTONIC)`` around each call), and the
program prints ``median_s <seconds>``. The exit status is the model's status, or 100 + an
I/O failure.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polytf.export.exporter import ExportedModel
from polytf.export.object_file import RUNTIME_LIBRARIES

__all__ = ["AARCH64_SYSROOT", "ProgramRun", "Toolchain", "benchmark_program_source", "build_program", "run_program"]

#: Where Debian's AArch64 cross toolchain keeps the target's libraries (``qemu-aarch64 -L``).
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"


@dataclass(frozen=True)
class Toolchain:
    """How to build and start a program for one target.

    Attributes:
        compiler: the C compiler driver (``cc``, ``aarch64-linux-gnu-gcc``).
        runner: the command that starts a program, before its path (``("qemu-aarch64", "-L",
            AARCH64_SYSROOT)`` for AArch64 on another machine; empty to run it directly).
    """

    compiler: str
    runner: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProgramRun:
    """What one run of the program gave.

    Attributes:
        status: its exit status (0, the model's status, or 100 + an I/O failure).
        outputs: output name -> array (empty unless ``status`` is 0).
        median_s: the median latency printed (with ``repeats`` > 0), seconds.
        stderr: what it wrote to standard error.
    """

    status: int
    outputs: dict[str, np.ndarray]
    median_s: float | None
    stderr: str


def build_program(exported: ExportedModel, toolchain: Toolchain, link: str = "object") -> Path:
    """Write the program's source next to the export and build it, linked against the object
    (``link="object"``) or the shared library (``"shared"``); returns the executable.

    Raises:
        subprocess.CalledProcessError: the compiler failed.
    """
    directory = exported.header_path.parent
    source = directory / f"{exported.name}_program.c"
    source.write_text(benchmark_program_source(exported))
    executable = directory / f"{exported.name}_program"
    if link == "object":
        inputs = [str(exported.object_path), *RUNTIME_LIBRARIES]
    else:
        inputs = [str(exported.shared_library_path), f"-Wl,-rpath,{directory}"]
    command = [toolchain.compiler, "-O2", "-std=c99", "-Wall", "-Werror", f"-I{directory}", str(source), *inputs, "-o", str(executable)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return executable


def run_program(
    exported: ExportedModel,
    executable: Path,
    inputs: Mapping[str, np.ndarray],
    toolchain: Toolchain,
    threads: int = 1,
    repeats: int = 0,
    weights: Path | None = None,
    timeout_s: float = 600,
) -> ProgramRun:
    """Run ``executable`` (from :func:`build_program`) on ``inputs`` (by input name), with
    ``weights`` for ``NAME_init`` (None: not called), timing ``repeats`` calls."""
    directory = executable.parent
    arguments = []
    for i, port in enumerate(exported.inputs):
        path = directory / f"input{i}.bin"
        np.ascontiguousarray(inputs[port.name], dtype=port.dtype).tofile(path)
        arguments.append(str(path))
    output_paths = [directory / f"output{i}.bin" for i in range(len(exported.outputs))]
    for path in output_paths:
        path.unlink(missing_ok=True)
    sizes = [] if exported.batch is None else [str(_batch_of(exported, inputs))]
    command = [*toolchain.runner, str(executable), str(threads), str(repeats), str(weights) if weights else "-", *sizes, *arguments, *map(str, output_paths)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    outputs = {}
    if result.returncode == 0:
        for port, path in zip(exported.outputs, output_paths):
            shape = port.shape if exported.batch is None else (-1, *port.shape[1:])
            outputs[port.name] = np.fromfile(path, dtype=port.dtype).reshape(shape)
    match = re.search(r"median_s ([0-9.eE+-]+)", result.stdout)
    return ProgramRun(result.returncode, outputs, float(match.group(1)) if match else None, result.stderr)


def _batch_of(exported: ExportedModel, inputs: Mapping[str, np.ndarray]) -> int:
    """The batch of ``inputs`` for a model that takes its batch as an argument: the first
    input's first dimension over its rows per sample."""
    port = exported.inputs[0]
    rows = port.shape[0] // exported.batch.multiple
    return int(np.shape(inputs[port.name])[0]) // rows


def benchmark_program_source(exported: ExportedModel) -> str:
    """The C source of the program (module docstring) for ``exported``."""
    name, upper = exported.name, exported.name.upper()
    batched = exported.batch is not None
    first = 5 if batched else 4  # argv index of the first file
    size = "_SIZE(batch)" if batched else "_SIZE"
    ports = [("INPUT", i, p) for i, p in enumerate(exported.inputs)] + [("OUTPUT", i, p) for i, p in enumerate(exported.outputs)]
    arrays = [f"    {p.c_type} *{kind.lower()}{i} = calloc({upper}_{kind}{i}{size}, sizeof({p.c_type}));" for kind, i, p in ports]
    reads = [
        f'    if (!{kind.lower()}{i} || read_file(argv[{first} + {n}], {kind.lower()}{i}, {upper}_{kind}{i}{size} * sizeof({p.c_type}))) return 101;'
        for n, (kind, i, p) in enumerate(ports)
        if kind == "INPUT"
    ]
    writes = [
        f"    if (write_file(argv[{first} + {n}], output{i}, {upper}_OUTPUT{i}{size} * sizeof({p.c_type}))) return 102;"
        for n, (kind, i, p) in enumerate(ports)
        if kind == "OUTPUT"
    ]
    call_arguments = ", ".join(f"{kind.lower()}{i}" for kind, i, _ in ports)
    batch_argument = "batch, " if batched else ""
    batch_read = "    int64_t batch = atoll(argv[4]);" if batched else ""
    workspace_size = f"{name}_workspace_bytes(batch)" if batched else f"{name}_workspace_bytes()"
    return f"""/* Runs {name} on inputs read from files and times it (generated by polytf). */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "{name}.h"

static int read_file(const char *path, void *data, size_t bytes) {{
    FILE *file = fopen(path, "rb");
    if (!file) return 1;
    size_t got = fread(data, 1, bytes, file);
    fclose(file);
    return got != bytes;
}}

static int write_file(const char *path, const void *data, size_t bytes) {{
    FILE *file = fopen(path, "wb");
    if (!file) return 1;
    size_t put = fwrite(data, 1, bytes, file);
    return fclose(file) != 0 || put != bytes;
}}

static int by_value(const void *a, const void *b) {{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}}

int main(int argc, char **argv) {{
    if (argc != {first} + {len(ports)}) {{
        fprintf(stderr, "usage: %s THREADS REPEATS WEIGHTS|- {'BATCH ' if batched else ''}{' '.join(f'{kind}{i}' for kind, i, _ in ports)}\\n", argv[0]);
        return 100;
    }}
{batch_read}
    int threads = atoi(argv[1]);
    int repeats = atoi(argv[2]);
    int status = {upper}_OK;
    if (strcmp(argv[3], "-")) status = {name}_init(argv[3]);  /* "-": weights inside the object (or none read) */
    if (status != {upper}_OK) {{ fprintf(stderr, "{name}_init: status %d\\n", status); return status; }}
{chr(10).join(arrays)}
{chr(10).join(reads)}
    void *workspace = NULL;
    if (posix_memalign(&workspace, {upper}_WORKSPACE_ALIGNMENT, {workspace_size} ? {workspace_size} : 64)) return 103;
    status = {name}_run_with_workspace({call_arguments}, workspace, {batch_argument}threads);
    if (status != {upper}_OK) {{ fprintf(stderr, "{name}_run_with_workspace: status %d\\n", status); return status; }}
{chr(10).join(writes)}
    if (repeats > 0) {{
        double *seconds = calloc((size_t)repeats, sizeof(double));
        if (!seconds) return 103;
        for (int i = 0; i < 3; i++) {name}_run_with_workspace({call_arguments}, workspace, {batch_argument}threads);
        for (int i = 0; i < repeats; i++) {{
            struct timespec begin, end;
            clock_gettime(CLOCK_MONOTONIC, &begin);
            {name}_run_with_workspace({call_arguments}, workspace, {batch_argument}threads);
            clock_gettime(CLOCK_MONOTONIC, &end);
            seconds[i] = (double)(end.tv_sec - begin.tv_sec) + 1e-9 * (double)(end.tv_nsec - begin.tv_nsec);
        }}
        qsort(seconds, (size_t)repeats, sizeof(double), by_value);
        printf("median_s %.9f\\n", repeats % 2 ? seconds[repeats / 2] : 0.5 * (seconds[repeats / 2 - 1] + seconds[repeats / 2]));
        free(seconds);
    }}
    free(workspace);
    return 0;
}}
"""
