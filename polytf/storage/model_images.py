"""ModelImageCache: what a load computed from a model file, kept so the next load maps it.

A cold ``polytf.load`` reads the GraphDef, runs the graph passes, lowers the fusion groups and
packs (and Winograd-transforms) the weights; none of that depends on anything but the model
file's bytes, the load's settings and polytf's version. The compiled-code cache
(:mod:`polytf.storage.object_cache`) keeps the kernels; this cache keeps the rest, so that a
warm load does nothing twice (OpenVINO's model cache keeps its compiled blob the same way).
Layout, inside the cache directory of :class:`~polytf.storage.cache.KernelCache`::

    models/<digest>.<kind>.polytf     one entry: a header, then its payload

Each entry is an opaque payload (the compiler's: a pickled prepared model, packed weights)
with a little JSON ``meta`` beside it, for one exact key. Its file is::

    b"POLYTF-MODEL 1\\n"
    one line of JSON: {"key": ..., "kind": ..., "meta": ..., "payload_bytes": N, "sha256": <hex of the payload>}
    zero bytes up to a multiple of 64 (so that arrays in the payload are aligned)
    N payload bytes

A file is mapped into memory, not read: its payload is a read-only ``memoryview`` of the
mapping (numpy arrays made from it share the pages, which the kernel reads in once). Nothing
read back is trusted: an entry is used only if its magic, header, size and SHA-256 are right
and its stored key equals the key looked up; otherwise it is one
:class:`~polytf.errors.CacheWarning` naming the file and the reason, and the caller builds the
entry again (and overwrites the file). Entries are written to a temporary file renamed over
the entry under the ``models`` lock.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from polytf.errors import CacheError, CacheWarning
from polytf.storage.cache import KernelCache, clear_entries, write_entry
from polytf.storage.cache_key import describe_key_differences, stored_key

__all__ = ["ALIGNMENT", "IMAGE_SUFFIX", "ModelImageCache", "warn_ignored_entry"]

MAGIC = b"POLYTF-MODEL 1\n"
IMAGE_SUFFIX = ".polytf"
#: payloads start at a multiple of this many bytes of the file
ALIGNMENT = 64
#: the largest header line read
MAX_HEADER_BYTES = 1 << 20


class ModelImageCache:
    """Entries of ``models/`` in a cache directory (module docstring).

    Args:
        directory: the cache directory (default that of :class:`KernelCache`:
            ``$POLYTF_CACHE_DIR`` or the user cache directory).
    """

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self._cache = KernelCache(directory)
        self.directory = self._cache.directory / "models"

    def path(self, kind: str, key: dict) -> Path:
        """The file of the entry of ``kind`` (a word: ``prepared``, ``packed``) for ``key``."""
        return self.directory / f"{stored_key(key)['digest']}.{kind}{IMAGE_SUFFIX}"

    def load(self, kind: str, key: dict) -> tuple[dict, memoryview] | None:
        """The ``meta`` and payload of the entry of ``kind`` for ``key`` (a JSON object), or
        None: no entry, or one that cannot be used (then one CacheWarning naming the file and
        why). The payload is a read-only view of the file mapped into memory. Never raises
        because of a file's contents."""
        expected = stored_key(key)
        path = self.path(kind, key)
        try:
            with path.open("rb") as handle:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as error:  # ValueError: an empty file cannot be mapped
            warn_ignored_entry(path, f"it cannot be read ({getattr(error, 'strerror', None) or error})")
            return None
        try:
            header, payload = _parse(memoryview(mapped))
        except CacheError as error:
            warn_ignored_entry(path, str(error))
            return None
        if header["kind"] != kind or header["key"] != expected:
            warn_ignored_entry(path, describe_key_differences(header["key"], expected, made="made", holder="the file") if header["kind"] == kind else f"it holds a {header['kind']} entry")
            return None
        return header["meta"], payload

    def save(self, kind: str, key: dict, meta: dict, payload: Sequence[bytes | memoryview]) -> Path:
        """Write the entry of ``kind`` for ``key``: ``meta`` (a JSON object) and the
        concatenation of ``payload``'s buffers, atomically, under the ``models`` lock.

        Raises:
            CacheError: the file cannot be written.
        """
        digest = hashlib.sha256()
        size = 0
        for part in payload:
            digest.update(part)
            size += memoryview(part).nbytes
        header = {"key": stored_key(key), "kind": kind, "meta": meta, "payload_bytes": size, "sha256": digest.hexdigest()}
        head = MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n"
        head += b"\0" * (-len(head) % ALIGNMENT)
        return write_entry(self._cache, self.directory, self.path(kind, key), [head, *payload], f"{kind} model entry")

    def entries(self) -> list[tuple[Path, int]]:
        """Every entry file of ``models/`` and its size in bytes, sorted by name."""
        if not self.directory.is_dir():
            return []
        return [(path, path.stat().st_size) for path in sorted(self.directory.iterdir()) if path.name.endswith(IMAGE_SUFFIX)]

    def clear(self) -> int:
        """Delete every entry (and temporary files left by a killed writer); returns how many
        entries were removed.

        Raises:
            CacheError: a file cannot be removed.
        """
        return clear_entries(self._cache, self.directory, (IMAGE_SUFFIX,), "model entries")


def warn_ignored_entry(path: Path, reason: str) -> None:
    """The one CacheWarning of an unusable entry: its file, the reason, the fallback."""
    warnings.warn(CacheWarning(f"ignoring cached model entry {path}: {reason}; it is built again"), stacklevel=3)


def _parse(data: memoryview) -> tuple[dict, memoryview]:
    """The header and payload of an entry's bytes; CacheError says what is wrong."""
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise CacheError("it is not a polytf model entry (wrong magic)")
    head = bytes(data[len(MAGIC) : len(MAGIC) + MAX_HEADER_BYTES])
    end = head.find(b"\n")
    if end < 0:
        raise CacheError("its header is not terminated (a truncated file)")
    try:
        header = json.loads(head[:end])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CacheError(f"its header is not valid JSON ({error})") from None
    fields = {"key": dict, "kind": str, "meta": dict, "payload_bytes": int, "sha256": str}
    if not isinstance(header, dict) or any(not isinstance(header.get(name), kind) for name, kind in fields.items()):
        raise CacheError(f"its header lacks the fields {', '.join(fields)}")
    start = len(MAGIC) + end + 1
    start += -start % ALIGNMENT
    payload = data[start:]
    if payload.nbytes != header["payload_bytes"]:
        raise CacheError(f"its payload has {payload.nbytes} bytes, its header says {header['payload_bytes']} (a truncated file)")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise CacheError("its SHA-256 does not match its contents (a corrupt file)")
    return header, payload
