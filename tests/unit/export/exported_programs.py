"""Toolchains for the export tests: the system C compiler, and the AArch64 cross compiler with
``qemu-aarch64`` (each test needing one is skipped without it, or fails under
``POLYTF_REQUIRE_SYSTEM_TOOLS=1``: :mod:`system_tools`). Programs are built and run by
:mod:`polytf.export.benchmark_program`."""

from __future__ import annotations

import numpy as np
from system_tools import require_tool

from polytf.export import STATUS_CODES, ExportedModel
from polytf.export.benchmark_program import AARCH64_SYSROOT, Toolchain, build_program, run_program

__all__ = ["aarch64_toolchain", "build_program", "check_gather_program", "native_toolchain", "run_program"]


def native_toolchain() -> Toolchain:
    return Toolchain(str(require_tool("cc", "compiles and links the C programs of the export tests")))


def aarch64_toolchain() -> Toolchain:
    compiler = require_tool("aarch64-linux-gnu-gcc", "links AArch64 programs against cross-compiled models (Debian: gcc-aarch64-linux-gnu)")
    emulator = require_tool("qemu-aarch64", "runs the AArch64 programs of the cross-compilation tests (Debian: qemu-user)")
    return Toolchain(str(compiler), (str(emulator), "-L", AARCH64_SYSROOT))


def check_gather_program(exported: ExportedModel, toolchain: Toolchain, table: np.ndarray, ids: np.ndarray, bad_ids: tuple[int, ...], position: int) -> None:
    """Build and run the program of the embedding model (export_graphs.write_embedding_graphdef,
    outputs ``out`` and ``ids_out``): ``out`` is ``relu(table[ids])`` and ``ids_out`` the ids
    passed through; each id of ``bad_ids`` put at ``position`` is refused with
    ERROR_INDEX_OUT_OF_RANGE."""
    program = build_program(exported, toolchain)
    run = run_program(exported, program, {"ids": ids}, toolchain)
    assert run.status == 0, run.stderr
    np.testing.assert_array_equal(run.outputs["out"], np.maximum(table[ids], 0))
    np.testing.assert_array_equal(run.outputs["ids_out"], ids)
    for bad in bad_ids:
        wrong = ids.copy()
        wrong[position] = bad
        assert run_program(exported, program, {"ids": wrong}, toolchain).status == STATUS_CODES["ERROR_INDEX_OUT_OF_RANGE"]
