"""What a load keeps so that the next load of the same file does nothing twice.

A warm ``polytf.load`` links every kernel from the compiled-code cache
(:mod:`polytf.compiler.code_cache`); this module keeps the rest of what a cold load computed
from the model file alone, in the model-image cache (:mod:`polytf.storage.model_images`)::

    model file ─► content digest ─► placeholders' declared shapes   (kind "placeholders")
    (SHA-256; the                 ─► prepared model at these shapes  (kind "prepared": the typed,
    file's size and                                                   optimized graph, fusion groups,
    times remembered)                                                 lowered Scops)
                                  ─► packed weights for these recipes (kind "packed": panels and
                                                                      Winograd-transformed filters)

Keys hold the file's SHA-256, the load's settings (signature, shapes, outputs, fallback), the
graph-pass and frontend settings, and the polytf/islpy/llvmlite, numpy and Python versions; the
packed weights' key adds the prepared model's key, the target's fingerprint and every
kernel's recipe. A prepared model is pickled (protocol 5, its arrays stored out of band and
aligned), so that a warm load maps its weights from the file instead of copying them; packed
weights are raw aligned arrays, mapped the same way. The cache directory is the user's own,
and an entry is unpickled only after its SHA-256 and key were checked, as the code cache does.

The file's SHA-256 is remembered beside its path, size, inode and modification times (git's
index does the same), so that an unchanged file is not hashed again at every load.
"""

from __future__ import annotations

import contextlib
import copyreg
import hashlib
import io
import mmap
import os
import pickle
import sys
import warnings
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from types import MappingProxyType

import numpy as np

from polytf.compiler.model_source import ModelSource
from polytf.config import FrontendConfig, GraphPassConfig
from polytf.errors import CacheError, CacheWarning
from polytf.storage.cache_key import current_versions, stored_key
from polytf.storage.model_images import ALIGNMENT, ModelImageCache, warn_ignored_entry

__all__ = ["LoadCache"]

#: changes whenever what an entry holds changes shape
FORMAT = 2


class LoadCache:
    """The model-image entries of one model file (module docstring).

    Args:
        images: the model-image cache of the cache directory.
        source: the model; a SavedModel directory has no entries (its variables are frozen
            by TensorFlow at each load).
        fallback: the load's ``fallback`` setting (it changes the prepared model).
    """

    def __init__(self, images: ModelImageCache, source: ModelSource, fallback: bool) -> None:
        self.images = images
        self.source = source
        self._writable = True
        path = Path(source.path)
        self.digest = _file_digest(images, path) if path.is_file() else None
        self._base = None if self.digest is None else {
            "format": FORMAT,
            "file_sha256": self.digest,
            "signature": source.signature,
            "outputs": None if source.outputs is None else list(source.outputs),
            "fallback": bool(fallback),
            "passes": asdict(GraphPassConfig()),
            "frontend": asdict(FrontendConfig.from_environment()),
            "versions": {**current_versions(), "numpy": np.__version__, "python": sys.version.split()[0]},
        }

    @property
    def enabled(self) -> bool:
        """False for a source without entries (a SavedModel directory)."""
        return self._base is not None

    # -- placeholders --------------------------------------------------------------------
    def declared_shapes(self) -> dict[str, tuple[int | None, ...] | None] | None:
        """Placeholder name -> its declared shape (None: unknown dimension; None for an unknown
        rank), as an earlier load of this file recorded them; None when none is kept."""
        found = self._load("placeholders", self._base)
        if found is None:
            return None
        shapes = found[0].get("shapes")
        if not isinstance(shapes, dict):
            return None
        return {name: None if shape is None else tuple(shape) for name, shape in shapes.items()}

    def save_declared_shapes(self, shapes: Mapping[str, tuple[int | None, ...] | None]) -> None:
        """Record the placeholders' declared shapes (:meth:`declared_shapes`)."""
        if self.enabled:
            self._save("placeholders", self._base, {"shapes": {name: None if shape is None else list(shape) for name, shape in shapes.items()}}, [])

    # -- prepared models -----------------------------------------------------------------
    def prepared_key(self, input_shapes: Mapping[str, tuple[int, ...]]) -> dict | None:
        """The key of the prepared model at ``input_shapes`` (every size given)."""
        if not self.enabled:
            return None
        return {**self._base, "input_shapes": {name: list(shape) for name, shape in sorted(input_shapes.items())}}

    def prepared(self, key: dict | None):
        """The prepared model of ``key`` (a :class:`~polytf.compiler.preparation.PreparedModel`
        whose arrays are read-only views of the mapped file), or None."""
        found = self._load("prepared", key)
        if found is None:
            return None
        meta, payload = found
        try:
            buffers = [payload[offset : offset + size] for offset, size in meta["buffers"]]
            return pickle.loads(payload[: meta["pickle_bytes"]], buffers=buffers)  # noqa: S301 - checked entry (module docstring)
        except Exception as error:  # noqa: BLE001 - an entry of another polytf: built again
            warn_ignored_entry(self.images.path("prepared", key), f"it cannot be unpickled ({type(error).__name__}: {error})")
            return None

    def save_prepared(self, key: dict | None, prepared) -> None:
        """Keep ``prepared`` as the prepared model of ``key``."""
        if key is None:
            return
        buffers: list[pickle.PickleBuffer] = []
        stream = io.BytesIO()
        _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(prepared)
        data = stream.getvalue()
        raw = [buffer.raw() for buffer in buffers]
        parts, offsets = _aligned([data, *raw])
        meta = {"pickle_bytes": len(data), "buffers": [[offset, view.nbytes] for offset, view in zip(offsets[1:], raw)]}
        self._save("prepared", key, meta, parts)

    # -- packed weights ------------------------------------------------------------------
    def packed_key(self, prepared_key: dict | None, target_fingerprint: dict, knobs: dict, recipes: list) -> dict | None:
        """The key of the packed weights of the prepared model of ``prepared_key`` whose
        kernels run ``recipes`` (in order) on the target of ``target_fingerprint`` with the
        code knobs ``knobs`` (:func:`polytf.config.code_knobs`: what else changes a kernel's
        data layout)."""
        if prepared_key is None:
            return None
        return {
            "prepared": stored_key(prepared_key)["digest"],
            "target": target_fingerprint,
            "knobs": knobs,
            "recipes": recipes,
            "versions": self._base["versions"],
        }

    def packed(self, key: dict | None) -> dict[str, np.ndarray] | None:
        """Packed weights by key (read-only arrays mapped from the file), or None."""
        found = self._load("packed", key)
        if found is None:
            return None
        meta, payload = found
        try:
            return {name: np.frombuffer(payload, np.dtype(dtype), int(np.prod(shape, dtype=np.int64)), offset).reshape(shape) for name, dtype, shape, offset in meta["arrays"]}
        except (KeyError, TypeError, ValueError) as error:
            warn_ignored_entry(self.images.path("packed", key), f"its arrays cannot be read ({error})")
            return None

    def save_packed(self, key: dict | None, arrays: Mapping[str, np.ndarray]) -> None:
        """Keep ``arrays`` (key -> packed weight) as the packed weights of ``key``."""
        if key is None:
            return
        contiguous = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
        parts, offsets = _aligned([value.data.cast("B") if value.size else b"" for value in contiguous.values()])
        meta = {"arrays": [[name, value.dtype.str, list(value.shape), offset] for (name, value), offset in zip(contiguous.items(), offsets)]}
        self._save("packed", key, meta, parts)

    def _load(self, kind: str, key: dict | None) -> tuple[dict, memoryview] | None:
        return None if key is None else self.images.load(kind, key)

    def _save(self, kind: str, key: dict, meta: dict, parts: list) -> None:
        """Write an entry; a failure (a read-only or full disk) is one CacheWarning for the
        load, which goes on without writing more entries (none when the cache directory itself
        cannot be written: the compiled-code cache says so, once)."""
        if not self._writable:
            return
        try:
            self.images.save(kind, key, meta, parts)
        except CacheError as error:
            self._writable = False
            cache_directory = self.images.directory.parent
            if cache_directory.is_dir() and os.access(cache_directory, os.W_OK):
                warnings.warn(CacheWarning(f"the prepared model and packed weights are not kept: {error}"), stacklevel=3)


def read_only_mapping(items: dict) -> MappingProxyType:
    """A read-only view of ``items`` (how a pickled ``MappingProxyType`` is made again)."""
    return MappingProxyType(items)


class _Pickler(pickle.Pickler):
    """A pickler that also takes the read-only mappings the graph's values hold."""

    dispatch_table = {**copyreg.dispatch_table, MappingProxyType: lambda proxy: (read_only_mapping, (dict(proxy),))}


def _aligned(parts: list) -> tuple[list, list[int]]:
    """``parts`` with zero padding before each so that each starts at a multiple of
    :data:`~polytf.storage.model_images.ALIGNMENT` bytes of the payload; returns the parts to
    write and each part's offset."""
    written, offsets, position = [], [], 0
    for part in parts:
        padding = -position % ALIGNMENT
        if padding:
            written.append(b"\0" * padding)
            position += padding
        offsets.append(position)
        written.append(part)
        position += memoryview(part).nbytes
    return written, offsets


def _file_digest(images: ModelImageCache, path: Path) -> str:
    """The SHA-256 of the file at ``path``: remembered for its path, size, inode and times,
    else computed (and remembered)."""
    stat = path.stat()
    identity = {"path": os.fspath(path.resolve()), "size": stat.st_size, "inode": stat.st_ino, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns}
    found = images.load("file", identity)
    if found is not None and isinstance(found[0].get("sha256"), str):
        return found[0]["sha256"]
    with path.open("rb") as handle:
        if stat.st_size:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                digest = hashlib.sha256(mapped).hexdigest()
        else:
            digest = hashlib.sha256(b"").hexdigest()
    with contextlib.suppress(CacheError):  # not remembered: hashed again next time
        images.save("file", identity, {"sha256": digest}, [])
    return digest
