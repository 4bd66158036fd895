"""Toolchains for the export tests: the system C compiler, and the AArch64 cross compiler with
``qemu-aarch64`` (each test needing one is skipped without it, or fails under
``POLYTF_REQUIRE_SYSTEM_TOOLS=1``: :mod:`system_tools`). Programs are built and run by
:mod:`polytf.export.benchmark_program`."""

from __future__ import annotations

from system_tools import require_tool

from polytf.export.benchmark_program import AARCH64_SYSROOT, Toolchain, build_program, run_program

__all__ = ["aarch64_toolchain", "build_program", "native_toolchain", "run_program"]


def native_toolchain() -> Toolchain:
    return Toolchain(str(require_tool("cc", "compiles and links the C programs of the export tests")))


def aarch64_toolchain() -> Toolchain:
    compiler = require_tool("aarch64-linux-gnu-gcc", "links AArch64 programs against cross-compiled models (Debian: gcc-aarch64-linux-gnu)")
    emulator = require_tool("qemu-aarch64", "runs the AArch64 programs of the cross-compilation tests (Debian: qemu-user)")
    return Toolchain(str(compiler), (str(emulator), "-L", AARCH64_SYSROOT))
