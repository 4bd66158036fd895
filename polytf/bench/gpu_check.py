"""``python -m polytf.bench.gpu_check``: the CUDA target checked on a GPU machine in one command.

A GPU machine is lent now and then, for minutes, with no package registry; its image has
Python 3.12, CuPy and PyTorch but not islpy, Optuna or platformdirs (the wheels
:mod:`polytf.bench.gpu_wheels` fetches beforehand into ``.whl/``). From the repository root::

    python3 -m polytf.bench.gpu_check --wheels .whl --out OUT

1. **wheels**: installs the brought wheels into a temporary folder (``pip install --no-index
   --no-deps --target``) and, for a source tree that was never installed, lays polytf out
   there as an installation would (``schedules/``, ``autotune/`` and ``targets/`` as
   ``polytf.schedules``, ``polytf.autotune``, ``polytf.targets``); then runs the rest in a
   child Python on that path, with ``PYTHONSAFEPATH=1`` (Python 3.11+) so that neither it nor
   the processes it starts (pytest, tuning and compile workers, all ``python -m ...`` from the
   repository root) import the source tree's unmapped ``polytf`` from the working directory.
2. **environment**: prints and records the GPU (name, SMs, memory, driver) and the versions
   it runs with (:mod:`polytf.bench.gpu_check_environment`).
3. **tests**: ``pytest tests/gpu -q`` (every test's outcome from its JUnit XML; not ``-x``,
   so one failure does not hide the others).
4. **bench**: the rows of :mod:`polytf.bench.gpu_check_rows` (MatMul 4096² and 1024² against
   cuBLAS, ResNet50's distinct conv layers at batch 8 against cuDNN, a Transformer encoder
   and the whole ResNet50 at batch 8 beside PyTorch), each output checked against the CPU
   reference before it is timed.

Progress is printed as it goes, ``gpu_check.json`` and ``gpu_check.md`` are rewritten in
``OUT`` after every step (:mod:`polytf.bench.gpu_check_report`), and a failing step, test or
row is recorded with its reason and the check goes on. ``--time-limit`` (default 420 s)
leaves out the rows that would start after it, so the whole run, installs included, ends
within 8 minutes. Ctrl-C or SIGTERM keeps the report of what finished.

``--dry-run`` runs the same steps without CuPy or a GPU: the tests are collected, not run,
and the rows run at small sizes on the CPU emulation of the device
(:class:`~polytf.runtime.cuda.emulation.EmulatedDevice`, PTX still emitted for sm_90); the
test suite runs it, so the script cannot rot.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "lay_out_source_tree", "install_wheels", "DEFAULT_TIME_LIMIT_S"]

#: The check's own time limit: rows that would start after it are left out (8 minutes in all
#: with the machine's start, the installs and the report).
DEFAULT_TIME_LIMIT_S = 420.0
#: Set in the child run after the bootstrap: its value is the bootstrap's JSON (start, steps).
_CHILD_VARIABLE = "POLYTF_GPU_CHECK_BOOTSTRAP"
#: Top-level folders of the repository that install as subpackages of polytf (pyproject's package-dir).
_MAPPED_SUBPACKAGES = ("schedules", "autotune", "targets")


def _repository_root() -> Path:
    return Path(__file__).resolve().parents[2]


def lay_out_source_tree(root: Path, folder: Path) -> Path:
    """Make ``folder/polytf`` the package an installation of the source tree ``root`` would
    have (symbolic links to ``root/polytf``'s entries and to ``root/schedules``,
    ``root/autotune``, ``root/targets``); returns ``folder``, for ``sys.path``."""
    package = folder / "polytf"
    package.mkdir(parents=True, exist_ok=True)
    for entry in (root / "polytf").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in _MAPPED_SUBPACKAGES:
        (package / name).symlink_to(root / name)
    return folder


def install_wheels(wheels: list[Path], folder: Path) -> None:
    """``pip install --no-index --no-deps --target folder`` the ``wheels``.

    Raises:
        RuntimeError: pip failed (its last lines in the message).
    """
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile", "--target", str(folder), *map(str, wheels)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError("pip could not install the wheels: " + " ".join((result.stderr or result.stdout).strip().splitlines()[-3:]))


def _bootstrap(args: argparse.Namespace, argv: list[str]) -> int | None:
    """Step 1 (module docstring): install the wheels and lay out the tree where needed, then run
    the check in a child on that path and return its exit status; None when nothing was
    needed (the check runs in this process)."""
    started = time.time()
    wheels = sorted(args.wheels.glob("*.whl")) if args.wheels is not None and args.wheels.is_dir() else []
    installed = importlib.util.find_spec("polytf.targets") is not None
    if not wheels and installed:
        detail = "nothing to install: polytf is installed" + (f"; no wheels in {args.wheels}" if args.wheels is not None else "")
        os.environ[_CHILD_VARIABLE] = json.dumps({"started": started, "steps": [{"step": "wheels", "status": "ok", "seconds": 0.0, "detail": detail}]})
        return None
    folder = Path(tempfile.mkdtemp(prefix="polytf-gpu-check-"))
    paths, details, status = [], [], "ok"
    try:
        if wheels:
            _progress(started, f"installing {len(wheels)} wheels from {args.wheels}")
            try:
                install_wheels(wheels, folder / "site")
                paths.append(str(folder / "site"))
                details.append(f"installed {len(wheels)} wheels ({', '.join(w.name.split('-')[0] for w in wheels)})")
            except RuntimeError as error:
                status, details = "failed", [str(error)]
        if not installed:
            paths.insert(0, str(lay_out_source_tree(_repository_root(), folder / "source")))
            details.append("laid out the source tree as installed")
        step = {"step": "wheels", "status": status, "seconds": time.time() - started, "detail": "; ".join(details)}
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
        environment[_CHILD_VARIABLE] = json.dumps({"started": started, "steps": [step]})
        if not installed:  # no Python started from here (the check, pytest, tuning and compile workers) imports the cwd's polytf
            environment["PYTHONSAFEPATH"] = "1"
        return subprocess.run([sys.executable, "-m", "polytf.bench.gpu_check", *argv], env=environment).returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _progress(started: float, message: str) -> None:
    print(f"[{time.time() - started:6.1f} s] {message}", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m polytf.bench.gpu_check",
        description="Check polytf's CUDA target on this GPU: GPU tests, then MatMul, ResNet50 conv layers, a Transformer encoder "
        "and ResNet50 against cuBLAS, cuDNN and PyTorch, each output checked against the CPU reference. Writes gpu_check.json "
        "and gpu_check.md to --out after every step.",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--wheels", type=Path, help="folder of wheels to install first (made by python -m polytf.bench.gpu_wheels)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: collect the tests and run small rows on the CPU emulation")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, help="seconds after which no row starts (default %(default)s)")
    parser.add_argument("--tests", type=Path, default=Path("tests/gpu"), help="the GPU tests (default %(default)s)")
    parser.add_argument("--skip-tests", action="store_true", help="leave the GPU tests out")
    parser.add_argument("--rows", help="only the rows whose label contains one of these comma-separated words (e.g. matmul,resnet50)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if _CHILD_VARIABLE not in os.environ:
        status = _bootstrap(args, argv)
        if status is not None:
            return status
    bootstrap = json.loads(os.environ[_CHILD_VARIABLE])
    from polytf.bench.gpu_check_steps import CheckRun

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM as Ctrl-C: the report of what finished stays
    run = CheckRun(args, bootstrap, command=" ".join(["python3 -m polytf.bench.gpu_check", *argv]))
    return run.execute()


if __name__ == "__main__":
    sys.exit(main())
