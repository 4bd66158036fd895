"""The machine a benchmark ran on: CPU (``/proc/cpuinfo`` and LLVM's view of the host), cores,
numpy and its BLAS (via threadpoolctl), software versions and the date.

Results name the machine because every figure in them is specific to it (DESIGN: "figures are
ratios against a baseline measured in the same run, with the machine and threads named").
No absolute path of the machine is recorded: library files appear by their file name only.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["describe_machine", "blas_info", "cpu_model_name", "llvm_host_cpu", "machine_summary", "NOTABLE_FEATURES"]

#: CPU features worth naming in a report (vector width and FMA decide GEMM peak).
NOTABLE_FEATURES = ("avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512_bf16", "amx-tile", "neon", "sve")


def cpu_model_name() -> str:
    """The CPU's marketing name from ``/proc/cpuinfo`` (``model name``), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "cpu model", "hardware")) and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def llvm_host_cpu() -> dict[str, Any]:
    """LLVM's host CPU name (what polytf compiles for, e.g. ``"znver3"``) and its features.

    Returns:
        ``{"name": str, "notable": {feature: bool}, "features": [enabled feature, ...]}``.
    """
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    enabled = sorted(name for name, on in features.items() if on)
    return {
        "name": llvm.get_host_cpu_name(),
        "notable": {name: bool(features.get(name, False)) for name in NOTABLE_FEATURES if name in features},
        "features": enabled,
    }


def blas_info() -> list[dict[str, Any]]:
    """numpy's BLAS and OpenMP libraries as threadpoolctl sees them in this process.

    Returns:
        One dict per library: ``user_api`` (``"blas"``/``"openmp"``), ``internal_api``
        (``"openblas"``, ``"mkl"``, ...), ``version``, ``architecture`` (the kernel set in use,
        e.g. ``"Haswell"``), ``threading_layer``, ``num_threads``, ``library`` (file name).
        Empty when threadpoolctl is not installed.
    """
    try:
        import numpy  # noqa: F401 - loads the BLAS threadpoolctl should see
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    libraries = []
    for info in threadpool_info():
        entry = {
            key: info.get(key)
            for key in ("user_api", "internal_api", "version", "architecture", "threading_layer", "num_threads")
        }
        entry["library"] = Path(info.get("filepath") or "").name
        libraries.append(entry)
    return libraries


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=10"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def describe_machine() -> dict[str, Any]:
    """Everything :mod:`polytf.bench.report` names about the machine and the software.

    Returns:
        A JSON-serialisable dict: ``cpu``, ``llvm_cpu`` (see :func:`llvm_host_cpu`), ``cores``
        (``os.cpu_count()``), ``usable_cpus`` (CPUs this process may run on), ``system``,
        ``python``, ``numpy``, ``blas`` (see :func:`blas_info`, in this parent process),
        ``openblas_coretype`` (``$OPENBLAS_CORETYPE`` or None), ``polytf``, ``commit``, ``date``
        (ISO 8601, local time with offset).
    """
    import numpy

    import polytf

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {
        "cpu": cpu_model_name(),
        "llvm_cpu": llvm_host_cpu(),
        "cores": os.cpu_count(),
        "usable_cpus": usable,
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "blas": blas_info(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
        "polytf": polytf.__version__,
        "commit": _git_commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def describe_blas(libraries: list[dict[str, Any]], coretype: str | None = None) -> str:
    """``"OpenBLAS 0.3.31 (pthreads, kernels: Haswell, OPENBLAS_CORETYPE=Haswell)"``, or a note that
    threadpoolctl found no BLAS."""
    blas = [lib for lib in libraries if lib.get("user_api") == "blas"]
    if not blas:
        return "BLAS unknown (threadpoolctl not installed or no BLAS loaded)"
    parts = []
    for lib in blas:
        name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(
            lib.get("internal_api") or "", lib.get("internal_api") or "BLAS"
        )
        details = [
            d for d in (lib.get("threading_layer"), f"kernels: {lib['architecture']}" if lib.get("architecture") else None) if d
        ]
        if lib.get("internal_api") == "openblas":
            details.append(f"OPENBLAS_CORETYPE={coretype}" if coretype else "OPENBLAS_CORETYPE unset")
        parts.append(
            f"{name} {lib.get('version') or '?'} ({', '.join(details)})" if details else f"{name} {lib.get('version') or '?'}"
        )
    return "; ".join(parts)


def machine_summary(machine: dict[str, Any]) -> str:
    """One sentence naming CPU, LLVM CPU and vector features, cores, numpy and its BLAS."""
    llvm_cpu = machine.get("llvm_cpu", {})
    notable = llvm_cpu.get("notable", {})
    features = ", ".join(f"{name} {'yes' if on else 'no'}" for name, on in notable.items() if name in ("avx2", "fma", "avx512f"))
    return (
        f"{machine.get('cpu')} (LLVM host CPU `{llvm_cpu.get('name')}`: {features}), {machine.get('cores')} cores "
        f"({machine.get('usable_cpus')} usable); {machine.get('system')}; Python {machine.get('python')}, numpy {machine.get('numpy')} "
        f"with {describe_blas(machine.get('blas', []), machine.get('openblas_coretype'))}"
    )
