"""ObjectCache: compiled kernels (machine code) on disk, beside the tuning records.

A tuning record stores a recipe; replaying it (isl scheduling, LLVM IR, LLVM's optimiser and
code generator) costs seconds per model. The object cache keeps what that replay produces,
as numba's ``cache=True`` keeps object code beside a module and OpenVINO's ``CACHE_DIR``
keeps compiled blobs, so that the next load only links it (:mod:`polytf.compiler.code_cache`).
Layout, inside the cache directory of :class:`~polytf.storage.cache.KernelCache`::

    objects/<digest>.o.polytf         one compiled kernel: header, kernel facts, object code
    objects/<digest>.default.json     the default recipe of one kernel on one machine

An **object entry** holds a kernel's relocatable object code for one exact
:class:`ObjectKey`: the kernel's computation (Scop fingerprint), its recipe, the arrays whose
packing runs ahead of time, the target's fingerprint (triple, CPU name and features, LLVM and
llvmlite versions), the code knobs of :mod:`polytf.config` and the polytf/islpy/llvmlite
versions. Its file is::

    b"POLYTF-OBJECT 1\\n"
    one line of JSON: {"key": ..., "symbol": ..., "kernel": ..., "facts_bytes": F,
                       "object_bytes": N, "sha256": <hex of the F + N bytes below>}
    F bytes of kernel facts (opaque here: the compiler's), then N bytes of object code

A **default-recipe entry** remembers a kernel's default recipe (a search-space analysis with
isl dependences: 5 ms a kernel) under a :class:`DefaultRecipeKey`.

Nothing read back is trusted: an entry is used only if its magic, header, sizes and SHA-256
are right and its stored key equals the key looked up; otherwise it is one
:class:`~polytf.errors.CacheWarning` naming the file and the reason, and the caller
recompiles (and overwrites the file). Entries are written to a temporary file renamed over
the entry under the ``objects`` lock, so a reader sees a whole old entry or a whole new one;
two processes writing the same entry write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path

from polytf.errors import CacheError, CacheWarning
from polytf.storage.cache import KernelCache, clear_entries, write_entry
from polytf.storage.cache_key import current_versions, describe_key_differences, digest_problem, stored_key

__all__ = ["DefaultRecipeKey", "KernelObject", "ObjectCache", "ObjectEntry", "ObjectKey", "OBJECT_SUFFIX", "DEFAULT_RECIPE_SUFFIX"]

MAGIC = b"POLYTF-OBJECT 1\n"
OBJECT_SUFFIX = ".o.polytf"
DEFAULT_RECIPE_SUFFIX = ".default.json"
#: the largest header line read (a key is a few kilobytes)
MAX_HEADER_BYTES = 1 << 20
_HEADER_FIELDS = {"key": dict, "symbol": str, "kernel": str, "facts_bytes": int, "object_bytes": int, "sha256": str}


@dataclass(frozen=True)
class ObjectKey:
    """Everything that changes a kernel's machine code.

    Attributes:
        scop_fingerprint: the kernel's computation, shapes and dtypes (``Scop.fingerprint``;
            kernel and tensor names do not enter it, so identical kernels share an entry).
        recipe: the recipe, as its JSON object.
        constant_arrays: the kernel's arrays that hold weights (their packing is left out of
            the code), sorted.
        target: the target's fingerprint (triple, CPU name, features, LLVM version).
        knobs: code-changing settings of polytf.config.
        versions: polytf, islpy and llvmlite versions.
        facts: what the entry's kernel facts and code mean: 2 since ``argument_bytes`` count the
            bytes up to the last element a kernel touches
            (:func:`polytf.poly.access_bounds.required_bytes`), not its arrays' whole shapes; 3
            since kernel bodies flush denormals as TensorFlow does (``CodegenConfig.ieee_denormals``
            off); entries made before are not linked.
    """

    scop_fingerprint: str
    recipe: dict
    constant_arrays: tuple[str, ...]
    target: dict
    knobs: dict
    versions: dict = field(default_factory=current_versions)
    facts: int = 3

    def as_dict(self) -> dict:
        """The key as an entry stores it (JSON values), with its ``digest`` (computed once)."""
        return self._stored

    @cached_property
    def _stored(self) -> dict:
        return stored_key({item.name: getattr(self, item.name) for item in fields(self)})

    def digest(self) -> str:
        """32 hexadecimal digits of the SHA-256 of the key's canonical JSON (the entry's file name)."""
        return self.as_dict()["digest"]


@dataclass(frozen=True)
class DefaultRecipeKey:
    """What a kernel's default recipe depends on: its computation, the target, the thread
    count, the host's cache sizes (the analytic tile sizes read them), the knobs and versions."""

    scop_fingerprint: str
    target: dict
    threads: int
    cache_sizes: dict
    knobs: dict
    versions: dict = field(default_factory=current_versions)

    def as_dict(self) -> dict:
        return stored_key(asdict(self))


@dataclass(frozen=True)
class KernelObject:
    """One compiled kernel as the cache keeps it.

    Attributes:
        symbol: the kernel's entry point in ``object_code``.
        kernel: the name of the kernel it was compiled for (for ``polytf cache list``; identical
            kernels of other names share the entry).
        facts: what the compiler needs besides the code to run it (arrays, buffer sizes, weight
            packings), serialised by the compiler.
        object_code: relocatable object code for the key's target.
    """

    symbol: str
    kernel: str
    facts: bytes
    object_code: bytes


@dataclass(frozen=True)
class ObjectEntry:
    """One file of ``objects/`` as ``polytf cache list`` and ``verify`` see it.

    Attributes:
        path: the file.
        size_bytes: its size.
        kind: ``"object"`` or ``"default recipe"``.
        kernel: the kernel it was compiled for ("" if unreadable or a default recipe).
        key: its stored key (``{}`` if unreadable).
        problem: why it can never be used (corrupt, truncated, inconsistent), or None.
    """

    path: Path
    size_bytes: int
    kind: str
    kernel: str
    key: dict
    problem: str | None

    @property
    def cpu(self) -> str:
        """The CPU name of its key ("" if unreadable)."""
        target = self.key.get("target")
        return str(target.get("cpu", "")) if isinstance(target, dict) else ""


def warn_ignored_object(path: Path | str, reason: str) -> None:
    """The one CacheWarning of an unusable cache file: its path, the reason, the fallback."""
    warnings.warn(CacheWarning(f"ignoring compiled kernel {path}: {reason}; the kernel is compiled again"), stacklevel=3)


class ObjectCache:
    """Compiled kernels and default recipes in ``objects/`` of a cache directory (module
    docstring).

    Args:
        directory: the cache directory (default that of :class:`KernelCache`:
            ``$POLYTF_CACHE_DIR`` or the user cache directory).
    """

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self._cache = KernelCache(directory)
        self.directory = self._cache.directory / "objects"

    def object_path(self, key: ObjectKey | dict) -> Path:
        digest = key["digest"] if isinstance(key, dict) else key.digest()
        return self.directory / f"{digest}{OBJECT_SUFFIX}"

    def default_recipe_path(self, key: DefaultRecipeKey | dict) -> Path:
        digest = (key if isinstance(key, dict) else key.as_dict())["digest"]
        return self.directory / f"{digest}{DEFAULT_RECIPE_SUFFIX}"

    # -- objects -----------------------------------------------------------------------
    def load(self, key: ObjectKey) -> KernelObject | None:
        """The entry of ``key``, or None: no entry, or one that cannot be used (then one
        CacheWarning naming the file and why). Never raises because of a file's contents."""
        expected = key.as_dict()
        path = self.object_path(expected)
        data = _read(path)
        if data is None:
            return None
        try:
            header, facts, code = _parse_object(data)
        except CacheError as error:
            warn_ignored_object(path, str(error))
            return None
        if header["key"] != expected:
            warn_ignored_object(path, describe_key_differences(header["key"], expected, made="compiled", holder="the file"))
            return None
        return KernelObject(header["symbol"], header["kernel"], facts, code)

    def save(self, key: ObjectKey, entry: KernelObject) -> Path:
        """Write ``entry`` as the object of ``key``, atomically, under the ``objects`` lock.

        Raises:
            CacheError: the file cannot be written.
        """
        payload = entry.facts + entry.object_code
        header = {
            "key": key.as_dict(),
            "symbol": entry.symbol,
            "kernel": entry.kernel,
            "facts_bytes": len(entry.facts),
            "object_bytes": len(entry.object_code),
            "sha256": hashlib.sha256(payload).hexdigest(),
        }
        data = MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload
        return self._write(self.object_path(header["key"]), data)

    def load_file(self, path: Path) -> KernelObject | None:
        """The entry in the object file ``path`` whatever its key (``polytf cache verify``), or
        None when it cannot be read or is corrupt."""
        try:
            header, facts, code = _parse_object(path.read_bytes())
        except (OSError, CacheError):
            return None
        return KernelObject(header["symbol"], header["kernel"], facts, code)

    # -- default recipes -----------------------------------------------------------------
    def load_default_recipe(self, key: DefaultRecipeKey) -> tuple[dict, bool] | None:
        """The recipe (JSON object) remembered for ``key`` and whether the entry's SHA-256 of
        it matched (an entry written before the entries had one: False), or None (absent, or
        unusable: then one CacheWarning). The caller checks the recipe against its kernel
        unless the SHA-256 matched: the entry is then what this cache wrote, for exactly this
        key, as an object entry is."""
        expected = key.as_dict()
        path = self.default_recipe_path(expected)
        text = _read(path)
        if text is None:
            return None
        try:
            value = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            warn_ignored_object(path, f"it is not valid JSON ({error})")
            return None
        if not isinstance(value, dict) or not {"key", "recipe"} <= set(value) <= {"key", "recipe", "sha256"} or not isinstance(value["recipe"], dict):
            warn_ignored_object(path, "it is not a default-recipe entry (fields key, recipe and sha256)")
            return None
        if value["key"] != expected:
            warn_ignored_object(path, describe_key_differences(value["key"], expected, made="made", holder="the file"))
            return None
        if "sha256" not in value:
            return value["recipe"], False
        if value["sha256"] != _recipe_digest(value["recipe"]):
            warn_ignored_object(path, "its SHA-256 does not match its recipe (a corrupt or edited file)")
            return None
        return value["recipe"], True

    def save_default_recipe(self, key: DefaultRecipeKey, recipe: dict) -> Path:
        """Remember ``recipe`` (a recipe's JSON object) as the default recipe of ``key``.

        Raises:
            CacheError: the file cannot be written.
        """
        expected = key.as_dict()
        data = json.dumps({"key": expected, "recipe": recipe, "sha256": _recipe_digest(recipe)}, sort_keys=True).encode()
        return self._write(self.default_recipe_path(expected), data)

    # -- the whole directory -----------------------------------------------------------
    def entries(self) -> list[ObjectEntry]:
        """Every file of ``objects/``, sorted by name, each checked against itself (magic,
        header, sizes, SHA-256, digest = file name), not against this machine."""
        result = []
        if not self.directory.is_dir():
            return result
        for path in sorted(self.directory.iterdir()):
            if path.name.endswith(OBJECT_SUFFIX):
                result.append(self._object_entry(path))
            elif path.name.endswith(DEFAULT_RECIPE_SUFFIX):
                result.append(self._default_recipe_entry(path))
        return result

    def clear(self) -> int:
        """Delete every entry (and temporary files left by a killed writer); returns how many
        entries were removed.

        Raises:
            CacheError: a file cannot be removed.
        """
        return clear_entries(self._cache, self.directory, (OBJECT_SUFFIX, DEFAULT_RECIPE_SUFFIX), "compiled kernels")

    def _write(self, path: Path, data: bytes) -> Path:
        return write_entry(self._cache, self.directory, path, data, "compiled kernel")

    def _object_entry(self, path: Path) -> ObjectEntry:
        try:
            data = path.read_bytes()
        except OSError as error:
            return ObjectEntry(path, 0, "object", "", {}, f"it cannot be read ({error.strerror or error})")
        try:
            header, _, _ = _parse_object(data)
        except CacheError as error:
            return ObjectEntry(path, len(data), "object", "", {}, str(error))
        key = header["key"]
        return ObjectEntry(path, len(data), "object", header["kernel"], key, digest_problem(key, path.name.removesuffix(OBJECT_SUFFIX), "file"))

    def _default_recipe_entry(self, path: Path) -> ObjectEntry:
        try:
            data = path.read_bytes()
        except OSError as error:
            return ObjectEntry(path, 0, "default recipe", "", {}, f"it cannot be read ({error.strerror or error})")
        try:
            value = json.loads(data)
            key = value["key"]
            problem = digest_problem(key, path.name.removesuffix(DEFAULT_RECIPE_SUFFIX), "file")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return ObjectEntry(path, len(data), "default recipe", "", {}, f"it is not a default-recipe entry ({type(error).__name__})")
        return ObjectEntry(path, len(data), "default recipe", "", key, problem)


def _recipe_digest(recipe: dict) -> str:
    """The SHA-256 of a recipe's canonical JSON (a default-recipe entry's check of itself)."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _read(path: Path) -> bytes | None:
    """The bytes of ``path``, or None: no such file, or one that cannot be read (then one
    CacheWarning)."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no cache directory: a file is in its way)
        return None
    except OSError as error:
        warn_ignored_object(path, f"it cannot be read ({error.strerror or error})")
        return None


def _parse_object(data: bytes) -> tuple[dict, bytes, bytes]:
    """The header, kernel facts and object code of an object file's bytes; CacheError says
    what is wrong (the caller names the file)."""
    if not data.startswith(MAGIC):
        raise CacheError("it is not a polytf object file (wrong magic)")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER_BYTES)
    if end < 0:
        raise CacheError("its header is cut off or too long")
    try:
        header = json.loads(data[len(MAGIC) : end])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CacheError(f"its header is not valid JSON ({error})") from None
    if not isinstance(header, dict) or set(header) != set(_HEADER_FIELDS):
        raise CacheError("its header has the wrong fields")
    for name, kind in _HEADER_FIELDS.items():
        if not isinstance(header[name], kind) or isinstance(header[name], bool):
            raise CacheError(f"its header field {name} has the wrong type")
    payload = data[end + 1 :]
    if header["facts_bytes"] < 0 or header["object_bytes"] < 0 or len(payload) != header["facts_bytes"] + header["object_bytes"]:
        raise CacheError(f"it holds {len(payload)} bytes of payload, its header says {header['facts_bytes']} + {header['object_bytes']} (a truncated file)")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise CacheError("its contents do not match their SHA-256 (a corrupt file)")
    return header, payload[: header["facts_bytes"]], payload[header["facts_bytes"] :]
