"""Where a command writes, checked before any work is done: a model that runs for minutes and
then cannot write its result has lost those minutes.

A file to write (``polytf run --output``) must not be a folder, and its folder must exist and
be writable; a folder to write into (``polytf compile -o``, the bench's report folder) must be
a writable folder, or not exist yet below a writable one (it is created then). Each failure is
an :class:`~polytf.errors.ArgumentError` naming the argument, the path and what is wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

from polytf.errors import ArgumentError

__all__ = ["writable_file", "writable_folder"]


def writable_file(path: str | os.PathLike, argument: str) -> Path:
    """``path`` as a Path, once it is known to be writable as a file.

    Raises:
        ArgumentError: ``path`` is a folder, its folder does not exist or cannot be written.
    """
    target = Path(path).expanduser()
    if target.is_dir():
        raise ArgumentError(f"{argument} {path}: this is a folder; give a file name")
    folder = target.parent
    if folder.exists() and not folder.is_dir():
        raise ArgumentError(f"{argument} {path}: {folder} is a file, not a folder; write elsewhere")
    if not folder.is_dir():
        raise ArgumentError(f"{argument} {path}: the folder {folder} does not exist; create it first or write elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ArgumentError(f"{argument} {path}: no permission to write there; choose another path")
    return target


def writable_folder(path: str | os.PathLike, argument: str) -> Path:
    """``path`` as a Path, once it is known to be a writable folder or creatable as one.

    Raises:
        ArgumentError: ``path`` (or a folder above it) is a file, or the nearest existing
            folder above it cannot be written.
    """
    target = Path(path).expanduser()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "this is a file" if existing == target else f"{existing} is a file"
        raise ArgumentError(f"{argument} {path}: {what}, not a folder; give a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ArgumentError(f"{argument} {path}: no permission to write in {existing}; choose another folder")
    return target
