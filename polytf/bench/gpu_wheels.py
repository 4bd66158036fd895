"""The wheels a GPU machine's image lacks, fetched here for it to bring along.

The GPU machines polytf is checked on (:mod:`polytf.bench.gpu_check`) reach no package
registry. Their image has Python 3.12 with CuPy, PyTorch, llvmlite, numpy, protobuf and
most of what polytf needs (:data:`GPU_IMAGE_PACKAGES`), but not islpy, Optuna and its
dependencies, or platformdirs. This command resolves polytf's run-time requirements from
the installed distributions' metadata (PEP 508 markers evaluated for CPython 3.12 on x86-64
Linux, no extras), leaves out what the image has, and downloads each missing one at the
version installed here (the versions the tests ran with) as a CPython 3.12 manylinux or
pure-Python wheel::

    python -m polytf.bench.gpu_wheels              # fills .whl/ (git-ignored) and prints its size

The folder then holds exactly one wheel per package (older ones are removed), which
``pip install --no-index --no-deps --target DIR .whl/*.whl`` installs on a Python 3.12
without network (about 8 MiB: islpy, Optuna, alembic, Mako, colorlog, SQLAlchemy,
platformdirs). ``--also NAME`` adds a package the image has, at this machine's version
(llvmlite, should the image's be older than the 0.45 polytf needs; its wheel alone is about
57 MiB).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["GPU_IMAGE_PACKAGES", "WHEEL_PLATFORMS", "missing_requirements", "download_wheels", "keep_only", "main"]

#: Distributions the GPU machines' image already has (its package list; names normalised as
#: in PEP 503): what polytf needs of them is not brought.
GPU_IMAGE_PACKAGES = frozenset(
    {
        "cupy-cuda13x", "filelock", "hypothesis", "llvmlite", "markupsafe", "numpy", "packaging", "pip", "protobuf", "pytest",
        "pyyaml", "rich", "setuptools", "tensorboard", "threadpoolctl", "torch", "tqdm", "typing-extensions", "markdown-it-py",
        "mdurl", "pygments", "six", "werkzeug", "markdown", "grpcio", "absl-py", "tensorboard-data-server", "pillow", "wheel",
        "matplotlib",
    }
)  # fmt: skip
#: Platform tags a wheel may have for the GPU image (glibc 2.28 and older manylinux tags)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: The environment of the GPU image, for PEP 508 markers
_IMAGE_ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them (``PyYAML`` -> ``pyyaml``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def missing_requirements(root: str = "polytf", image: frozenset[str] = GPU_IMAGE_PACKAGES) -> dict[str, str]:
    """Every distribution ``root`` needs at run time (transitively, no extras) that ``image``
    lacks, with the version installed here: ``{normalised name: version}``.

    Raises:
        metadata.PackageNotFoundError: a requirement is not installed here (install polytf
            with ``pip install -e .`` first).
    """
    from packaging.requirements import Requirement

    needed: dict[str, str] = {}
    pending = [root]
    seen = {normalise(root)}
    while pending:
        distribution = metadata.distribution(pending.pop())
        for text in distribution.requires or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(_IMAGE_ENVIRONMENT):
                continue
            name = normalise(requirement.name)
            if name in seen or name in image:
                continue
            seen.add(name)
            needed[name] = metadata.version(name)
            pending.append(name)
    return dict(sorted(needed.items()))


def _wheel_name(path: Path) -> str:
    """The normalised distribution name of a wheel file (``SQLAlchemy-2.1.9-cp312-...whl`` -> ``sqlalchemy``)."""
    return normalise(path.name.split("-")[0])


def download_wheels(packages: dict[str, str], folder: Path) -> list[Path]:
    """Download ``packages`` (name -> version) as CPython 3.12 x86-64 Linux wheels into
    ``folder``, one command per package so that a failure names it, and remove any other wheel
    of the same packages there (two versions of one would stop the install). Returns the wheels.

    Raises:
        RuntimeError: pip found no such wheel (the message has pip's last lines).
    """
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [flag for platform in WHEEL_PLATFORMS for flag in ("--platform", platform)]
    for name, version in packages.items():
        command = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
            "--implementation", "cp", *platforms, "--dest", str(folder), f"{name}=={version}",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"no CPython 3.12 x86-64 wheel of {name}=={version}: {tail}")
    return keep_only(packages, folder)


def keep_only(packages: dict[str, str], folder: Path) -> list[Path]:
    """Remove every wheel of ``folder`` that is not of ``packages`` (name -> version) at its
    version; returns the wheels that stay, sorted."""
    wheels = []
    for path in sorted(folder.glob("*.whl")):
        name, version = _wheel_name(path), path.name.split("-")[1]
        if name in packages and normalise(version) == normalise(packages[name]):
            wheels.append(path)
        else:
            path.unlink()  # another version, or a package no longer needed
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m polytf.bench.gpu_wheels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=Path(".whl"), help="folder for the wheels (default .whl, git-ignored)")
    parser.add_argument("--also", action="append", default=[], metavar="NAME", help="bring this installed package too (repeatable)")
    parser.add_argument("--list", action="store_true", help="print what would be fetched, download nothing")
    args = parser.parse_args(argv)
    packages = missing_requirements()
    for name in args.also:
        packages[normalise(name)] = metadata.version(name)
    if args.list:
        for name, version in packages.items():
            print(f"{name}=={version}")
        return 0
    try:
        wheels = download_wheels(packages, args.dest)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    total = sum(path.stat().st_size for path in wheels)
    for path in wheels:
        print(f"{path.stat().st_size / 2**20:7.2f} MiB  {path.name}")
    print(f"{len(wheels)} wheels, {total / 2**20:.2f} MiB in {args.dest}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
