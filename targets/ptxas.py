"""``ptxas``: NVIDIA's PTX assembler, run on any machine to check the PTX polytf emits.

The ``nvidia-cuda-nvcc`` wheel (a test extra of polytf) ships a ``ptxas`` that needs only
libc, so PTX can be assembled for ``sm_80`` and ``sm_90`` without a GPU; with ``-v`` it
reports each kernel's registers, spills and shared memory (``ptxas --help``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from polytf.errors import CompileError

_USAGE = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def find_ptxas() -> Path | None:
    """``ptxas`` from the ``nvidia-cuda-nvcc`` wheel (``nvidia/cu*/bin`` or
    ``nvidia/cuda_nvcc/bin``), else the one on ``PATH``, else None."""
    try:
        import nvidia
    except ImportError:
        nvidia = None
    for root in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(root).glob("*/bin/ptxas")):
            if candidate.is_file():
                return candidate
    found = shutil.which("ptxas")
    return Path(found) if found else None


@dataclass(frozen=True)
class PtxasReport:
    """What ``ptxas -v`` says of one assembled PTX module.

    Attributes:
        registers: registers per thread of each kernel, in the order ptxas reports them.
        spill_bytes: bytes of spill stores plus spill loads, all kernels.
        log: ptxas's whole output.
    """

    registers: tuple[int, ...]
    spill_bytes: int
    log: str


def assemble(ptx: str, architecture: str, ptxas: Path | None = None) -> PtxasReport:
    """Assemble ``ptx`` for ``architecture`` (e.g. ``"sm_90"``) with ``ptxas -v``.

    Raises:
        CompileError: no ptxas (install polytf's ``test`` extra), or ptxas rejected the PTX
            (its message is in the error).
    """
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise CompileError("ptxas not found: pip install nvidia-cuda-nvcc (polytf's test extra) or put CUDA's bin directory on PATH")
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run([str(ptxas), f"-arch={architecture}", "-v", "-o", str(Path(directory) / "kernel.cubin"), str(source)], capture_output=True, text=True)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise CompileError(f"ptxas -arch={architecture} rejected the PTX: {log.strip()[:2000]}")
    spills = sum(int(stores) + int(loads) for stores, loads in _SPILLS.findall(log))
    return PtxasReport(tuple(int(r) for r in _USAGE.findall(log)), spills, log)


__all__ = ["PtxasReport", "assemble", "find_ptxas"]
