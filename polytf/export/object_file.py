"""One relocatable object from the kernels, the entry points and the weights; a shared library from it.

The kernels' optimised modules, the entry-point module and the weights module are linked
into one LLVM module (``llvm::Linker``, through llvmlite's ``ModuleRef.link_in``), every
symbol but the model's public entry points is made internal (two exported models link into
one program without clashing), and the target machine writes an ELF object with
position-independent code (:meth:`polytf.targets.cpu.CpuTarget.object_target_machine`).
The kernels are not optimised again: their machine code comes from the same IR that
``polytf.load`` JIT-compiles, by the same code generator at the same level.

A shared library is linked by the system C compiler driver for the target (``cc`` on the
host, ``aarch64-linux-gnu-gcc`` for AArch64; ``$CC`` overrides the host's) with
``-shared -lgomp -lm``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm

from polytf.errors import CompileError
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import parse_verified

__all__ = ["RUNTIME_LIBRARIES", "link_object", "c_compiler", "link_shared_library"]

#: Libraries a program using an exported model links (OpenMP's runtime, the C math library).
RUNTIME_LIBRARIES = ("-lgomp", "-lm")


def link_object(modules: Sequence[tuple[str, str]], public: Sequence[str], target: CpuTarget) -> bytes:
    """An ELF object of the LLVM modules ``(what, IR text)`` linked together, only the
    ``public`` symbols left external.

    Raises:
        CompileError: LLVM rejected a module, or the link failed (a polytf bug).
    """
    (first_name, first_text), *rest = modules
    linked = parse_verified(first_text, first_name)
    for what, text in rest:
        module = parse_verified(text, what)
        try:
            linked.link_in(module)
        except RuntimeError as error:
            raise CompileError(f"LLVM could not link {what} into the model: {error}") from None
    keep = set(public)
    for value in [*linked.functions, *linked.global_variables]:
        if not value.is_declaration and value.name not in keep:
            value.linkage = llvm.Linkage.internal
    missing = keep - {f.name for f in linked.functions if not f.is_declaration}
    if missing:
        raise CompileError(f"the linked model defines no {', '.join(sorted(missing))}")
    try:
        linked.verify()
        return target.object_target_machine().emit_object(linked)
    except RuntimeError as error:
        raise CompileError(f"LLVM could not write the model's object code: {error}") from None


def c_compiler(target: CpuTarget) -> str | None:
    """The C compiler driver that links programs for ``target``, or None: ``$CC``, ``cc``,
    ``gcc`` or ``clang`` on the host; ``<arch>-linux-gnu-gcc`` for a cross target."""
    if target.host_architecture:
        candidates = [os.environ.get("CC", ""), "cc", "gcc", "clang"]
    else:
        candidates = [f"{target.architecture}-linux-gnu-gcc", f"{target.architecture}-linux-gnu-cc"]
    for candidate in candidates:
        if candidate and shutil.which(candidate.split()[0]):
            return candidate
    return None


def link_shared_library(object_path: Path, library_path: Path, compiler: str) -> None:
    """Link ``object_path`` into the shared library ``library_path`` with ``compiler``.

    Raises:
        CompileError: the compiler failed (its output is in the message).
    """
    command = [*compiler.split(), "-shared", "-o", str(library_path), str(object_path), *RUNTIME_LIBRARIES]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise CompileError(f"`{' '.join(command)}` failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
