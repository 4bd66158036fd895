"""CacheKey: what a tuning record is valid for, and how two keys differ.

A record is used only for the exact key it was tuned under: the kernel's computation
(Scop fingerprint, which covers shapes and dtypes), the target's fingerprint (triple, CPU
name and features, LLVM version), the thread count, every code-changing knob of
:mod:`polytf.config` and the polytf/islpy/llvmlite versions. A record stores its key as
:meth:`CacheKey.as_dict` (the fields plus their ``digest``); :func:`key_differences`
says, in words, why a stored key is not the one looked up ("target.cpu is 'znver5' in
the record, 'znver3' here").
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

import llvmlite

from polytf.errors import CacheError
from polytf.islpy_on_demand import islpy_version
from polytf.version import __version__


def current_versions() -> dict:
    """The versions that enter every key: polytf, islpy and llvmlite (a fresh dict; the
    versions are looked up once per process)."""
    return dict(_versions())


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    return (("polytf", __version__), ("islpy", islpy_version()), ("llvmlite", llvmlite.__version__))


@dataclass(frozen=True)
class CacheKey:
    """What a tuning record is valid for.

    Attributes:
        scop_fingerprint: the kernel's computation, shapes and dtypes (Scop.fingerprint).
        target: the target's fingerprint (triple, CPU name and features, LLVM version).
        threads: thread count the kernel was measured with.
        knobs: code-changing settings from polytf.config.
        versions: polytf, islpy and llvmlite versions.
    """

    scop_fingerprint: str
    target: dict
    threads: int
    knobs: dict
    versions: dict = field(default_factory=current_versions)

    def digest(self) -> str:
        """32 hexadecimal digits of the SHA-256 of the key's canonical JSON (the record's file name)."""
        return key_digest(asdict(self))

    def as_dict(self) -> dict:
        """The key as a record stores it: its fields plus ``"digest"``, as JSON values (so that
        it compares equal to the key read back from a record file)."""
        return stored_key(asdict(self))


def key_digest(fields: dict) -> str:
    """32 hexadecimal digits of the SHA-256 of ``fields`` as canonical JSON (sorted keys):
    the file name of a record or a compiled kernel."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


def stored_key(fields: dict) -> dict:
    """A key's ``fields`` as a cache file stores them: JSON values, plus their ``"digest"``."""
    value = json.loads(json.dumps(fields))
    return {**value, "digest": key_digest(value)}


#: the fields of a stored key (CacheKey's fields and the digest), in the order they are compared
KEY_FIELDS = (*(f.name for f in fields(CacheKey)), "digest")
_KEY_FIELD_TYPES = {"scop_fingerprint": str, "target": dict, "threads": int, "knobs": dict, "versions": dict, "digest": str}
_KEY_FIELD_DESCRIPTIONS = {str: "a string", dict: "an object", int: "an integer"}
#: how many differences :func:`key_differences` spells out before summarising the rest
_MAX_DIFFERENCES = 4
_MAX_VALUE_CHARACTERS = 48


def stored_key_problem(stored: dict, file_digest: str) -> str | None:
    """Why a stored key is not self-consistent, or None.

    Without a key to compare with (``polytf cache list``), a record can still be checked
    against itself: it must have exactly the key fields, its digest must be the digest of
    those fields, and the file must be named after it.

    Args:
        stored: the record's ``key`` object.
        file_digest: the record file's name without ``.json``.
    """
    missing = [name for name in KEY_FIELDS if name not in stored]
    unknown = sorted(set(stored) - set(KEY_FIELDS))
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(map(repr, unknown))}"] if unknown else [])
        return f"its key has the wrong fields ({'; '.join(parts)})"
    for name, kind in _KEY_FIELD_TYPES.items():
        value = stored[name]
        if not isinstance(value, kind) or isinstance(value, bool) or (name == "threads" and value < 1):
            return f"its key field {name} must be {_KEY_FIELD_DESCRIPTIONS[kind] if name != 'threads' else 'a positive integer'}, not {_short(value)}"
    return digest_problem(stored, file_digest, "record")


def digest_problem(stored: dict, file_digest: str, kind: str) -> str | None:
    """Why a stored key's ``digest`` is not the digest of its other fields, or not the name of
    its file (``file_digest``), or None; ``kind`` names the file in the message (``"record"``,
    ``"file"``)."""
    digest = key_digest({name: value for name, value in stored.items() if name != "digest"})
    if stored.get("digest") != digest:
        return f"its key digest does not match the key's fields (an edited {kind})"
    if digest != file_digest:
        return f"its key digest {digest} does not match its file name (a copied or renamed {kind})"
    return None


def key_differences(stored: object, expected: dict, prefix: str = "", holder: str = "the record") -> list[str]:
    """Each difference between a stored key and the expected one, in words.

    Nested objects (``target``, ``knobs``, ``versions``) are compared field by field;
    comma-separated feature lists by the features that differ.

    Args:
        stored: the record's ``key`` (any JSON value).
        expected: :meth:`CacheKey.as_dict` of the key that was looked up.
        prefix: dotted path of ``expected`` inside the whole key (for recursion).
        holder: what holds the stored key, in the words (``"the record"``, ``"the file"``).

    Returns:
        e.g. ``["target.cpu is 'znver5' in the record, 'znver3' here",
        "versions.polytf is '9.9.9' in the record, '0.1.0' here"]``; empty if equal.
    """
    if not isinstance(stored, dict):
        return [f"{prefix.rstrip('.') or 'key'} is {_short(stored)} in {holder}, an object here"]
    differences = []
    for name in sorted(set(stored) | set(expected), key=_field_order):
        where = f"{prefix}{name}"
        if name not in expected:
            differences.append(f"{where} is in {holder} but not in this key")
        elif name not in stored:
            differences.append(f"{where} is missing from {holder}")
        elif stored[name] == expected[name]:
            continue
        elif isinstance(stored[name], dict) and isinstance(expected[name], dict):
            differences.extend(key_differences(stored[name], expected[name], f"{where}.", holder))
        elif name == "features" and isinstance(stored[name], str) and isinstance(expected[name], str):
            differences.append(_feature_difference(where, stored[name], expected[name], holder))
        elif name == "digest" and differences:
            continue  # a consequence of the differences already listed
        else:
            differences.append(f"{where} is {_short(stored[name])} in {holder}, {_short(expected[name])} here")
    return differences


def describe_key_differences(stored: object, expected: dict, made: str = "recorded", holder: str = "the record") -> str:
    """:func:`key_differences` as one phrase, e.g. ``"recorded for another key: target.cpu is ..."``
    (``made``: how the file came to be, ``"compiled"`` for an object; ``holder`` as there)."""
    differences = key_differences(stored, expected, holder=holder)
    shown = "; ".join(differences[:_MAX_DIFFERENCES])
    if len(differences) > _MAX_DIFFERENCES:
        shown += f"; and {len(differences) - _MAX_DIFFERENCES} more"
    return f"{made} for another key: {shown}"


def check_stored_key(stored: object, expected: dict) -> None:
    """Raise CacheError (:func:`describe_key_differences`: the reason alone, the caller names
    the record) unless a record's stored key is ``expected`` (``CacheKey.as_dict()``)."""
    if stored != expected:
        raise CacheError(describe_key_differences(stored, expected))


def _field_order(name: str) -> tuple[int, str]:
    return (KEY_FIELDS.index(name) if name in KEY_FIELDS else len(KEY_FIELDS), name)


def _feature_difference(where: str, stored: str, expected: str, holder: str) -> str:
    recorded, here = set(stored.split(",")), set(expected.split(","))
    only_recorded, only_here = sorted(recorded - here), sorted(here - recorded)
    if not only_recorded and not only_here:
        return f"{where} are listed in another order in {holder}"
    return f"{where} differ: {', '.join(only_recorded[:6]) or 'none'} in {holder}, {', '.join(only_here[:6]) or 'none'} here"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_VALUE_CHARACTERS else text[: _MAX_VALUE_CHARACTERS - 3] + "..."
