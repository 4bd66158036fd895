"""The C header of an exported model (``NAME.h``).

It declares the entry points of :mod:`polytf.export.entry_functions` with typed pointers,
and gives each input and output's name, dtype, rank, shape and element count as
constants (``NAME_INPUT0_SHAPE``...), the status codes, the thread count the kernels were
tuned for, whether the weights are in a file, and the libraries to link. It is plain C99
and also compiles as C++ (``extern "C"``).
"""

from __future__ import annotations

from polytf.export.batch_layout import ExportedBatch
from polytf.export.entry_functions import STATUS_CODES
from polytf.export.model_layout import ModelLayout, TensorPort
from polytf.export.object_file import RUNTIME_LIBRARIES
from polytf.plan.buffers import ALIGNMENT_BYTES

__all__ = ["c_parameters", "header_text"]


def _port_constants(prefix: str, kind: str, index: int, port: TensorPort, batch: ExportedBatch | None = None) -> list[str]:
    macro = f"{prefix}_{kind}{index}"
    if batch is not None:  # the shape at batch.multiple: its first dimension scales with the batch
        per_batch = port.elements // batch.multiple
        shape = [f"{batch.symbol}" if axis == 0 else str(size) for axis, size in enumerate(port.shape)]
        rows = port.shape[0] // batch.multiple
        first = batch.symbol if rows == 1 else f"{batch.symbol} * {rows}"
        return [
            f"/* {kind.lower()} {index}: '{port.name}', {port.dtype} [{', '.join([first, *shape[1:]])}] */",
            f'#define {macro}_NAME "{port.name}"',
            f'#define {macro}_DTYPE "{port.dtype}"',
            f"#define {macro}_RANK {len(port.shape)}",
            f"#define {macro}_SIZE(batch) ((size_t)(batch) * {per_batch})  /* elements at that batch */",
            f"static const int64_t {macro}_SHAPE_PER_SAMPLE[{max(len(port.shape), 1)}] = {{{', '.join([str(rows), *shape[1:]]) or '1'}}};  /* first dimension: per sample */",
        ]
    shape = ", ".join(str(d) for d in port.shape) or "1"
    return [
        f"/* {kind.lower()} {index}: '{port.name}', {port.dtype} {list(port.shape)} */",
        f'#define {macro}_NAME "{port.name}"',
        f'#define {macro}_DTYPE "{port.dtype}"',
        f"#define {macro}_RANK {len(port.shape)}",
        f"#define {macro}_SIZE {port.elements}  /* elements */",
        f"static const int64_t {macro}_SHAPE[{max(len(port.shape), 1)}] = {{{shape}}};",
    ]


def c_parameters(inputs: tuple[TensorPort, ...], outputs: tuple[TensorPort, ...]) -> str:
    """The input and output parameters of ``NAME_run`` as C (``const float *x, float *y``)."""
    return ", ".join([f"const {p.c_type} *{p.parameter}" for p in inputs] + [f"{p.c_type} *{p.parameter}" for p in outputs])


def header_text(
    layout: ModelLayout, name: str, source: str, threads: int, triple: str, cpu: str, external_weights: bool, version: str, batch: ExportedBatch | None = None
) -> str:
    """The header of model ``name`` (see the module docstring).

    Args:
        layout: the model's buffers.
        name: the C prefix of every symbol.
        source: the model file it was exported from (named in the comment).
        threads: the thread count its kernels' recipes were chosen for.
        triple, cpu: the target the object was compiled for.
        external_weights: whether ``NAME_init`` must read ``NAME.weights``.
        version: polytf's version.
        batch: the batch argument (``layout`` at ``batch.multiple``), or None.
    """
    upper = name.upper()
    batch_parameter = "int64_t batch, " if batch is not None else ""
    lines = [
        f"/* {name}.h: the model {source}, compiled ahead of time by polytf {version} (`polytf compile`).",
        f" * Target: {triple}, CPU {cpu}. Do not edit: run `polytf compile` again.",
        " *",
        f" * Link: cc program.c {name}.o {' '.join(RUNTIME_LIBRARIES)}     (or link {name}.so)",
        " * Runtime dependencies: OpenMP's runtime (libgomp) and the C library (libc, libm); no Python,",
        " * TensorFlow or polytf.",
        " *",
        f" * {name}_init(path) once (it reads {name}.weights when {upper}_WEIGHTS_EXTERNAL is 1, else does",
        f" * nothing), then {name}_run(inputs..., outputs..., threads) as often as needed. Arrays are",
        " * C-contiguous (row-major) with the shapes below. Every function returns a status: 0 is",
        f" * {upper}_OK. {name}_run allocates a workspace per call; {name}_run_with_workspace takes one",
        f" * of {name}_workspace_bytes() bytes, {upper}_WORKSPACE_ALIGNMENT-byte aligned, that the caller",
        " * reuses across calls (one call at a time per workspace; its contents need no initialisation).",
        " * Calls on distinct workspaces may run at once from several threads.",
        " */",
        f"#ifndef {upper}_H",
        f"#define {upper}_H",
        "",
        "#include <stdbool.h>",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
    ]
    lines += [f"#define {upper}_{code} {value}" for code, value in STATUS_CODES.items()]
    if batch is not None:
        lines += [
            "",
            f"/* The batch ({batch.symbol}, the first dimension of every input and output) is an argument: a multiple of",
            f" * {upper}_BATCH_MULTIPLE from {upper}_BATCH_MIN to {upper}_BATCH_MAX (0: no bound); another is {upper}_ERROR_INVALID_BATCH. */",
            f"#define {upper}_BATCH_MIN {batch.minimum}",
            f"#define {upper}_BATCH_MAX {batch.maximum or 0}",
            f"#define {upper}_BATCH_MULTIPLE {batch.multiple}",
        ]
    lines += [
        "",
        f"#define {upper}_THREADS {threads}  /* the thread count the kernels were tuned for */",
        f"#define {upper}_WEIGHTS_EXTERNAL {int(external_weights)}",
        f"#define {upper}_WORKSPACE_ALIGNMENT {ALIGNMENT_BYTES}",
        f"#define {upper}_INPUT_COUNT {len(layout.inputs)}",
        f"#define {upper}_OUTPUT_COUNT {len(layout.outputs)}",
        "",
    ]
    for i, port in enumerate(layout.inputs):
        lines += _port_constants(upper, "INPUT", i, port, batch) + [""]
    for i, port in enumerate(layout.outputs):
        lines += _port_constants(upper, "OUTPUT", i, port, batch) + [""]
    joined = c_parameters(layout.inputs, layout.outputs)
    lines += [
        f"/* Bytes of the workspace {name}_run_with_workspace takes{' at that batch (0: a batch it does not take)' if batch else ''}. */",
        f"size_t {name}_workspace_bytes({'int64_t batch' if batch else 'void'});",
        "",
        f"/* Read the weights from `weights_path` ({name}.weights) when {upper}_WEIGHTS_EXTERNAL is 1; call",
        " * once, before the first run and not while one runs. Otherwise does nothing (NULL is fine). */",
        f"int {name}_init(const char *weights_path);",
        "",
        "/* Run the model. `threads` >= 1: OpenMP threads of each parallel kernel. */",
        f"int {name}_run({joined}, {batch_parameter}int threads);",
        "",
        "/* Run the model on a caller-provided workspace (see above). */",
        f"int {name}_run_with_workspace({joined}, void *workspace, {batch_parameter}int threads);",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {upper}_H */",
        "",
    ]
    return "\n".join(lines)
