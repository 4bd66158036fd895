"""TuningRecord and the schema of a record file.

A record file (``records/<key digest>.json``) is one JSON object::

    {
      "key": {"scop_fingerprint": "...", "target": {...}, "threads": 2, "knobs": {...},
              "versions": {...}, "digest": "<32 hex digits>"},
      "kernel": "k0_mm", "ops": ["MatMul", "Relu"],
      "recipe": {"kind": "cpu", "tile_sizes": [32, 64], "vector_width": 16, ...},
      "default_latency_s": 0.002, "best_latency_s": 0.001,
      "trials": 20, "failed_trials": 1, "complete": true,
      "model": "/abs/path/model.pb", "input_shapes": {"x": [1, 784]}, "outputs": []
    }

Records are untrusted input (a user may edit one, copy one from another machine, or a
disk may truncate one): :func:`parse_record` checks every field's exact JSON type
(``"false"`` is not a boolean, ``"3"`` is not an integer, a float is not an integer),
that numbers are finite and non-negative, that ``failed_trials <= trials``, and parses
the recipe with :meth:`ScheduleRecipe.from_dict` (into a :class:`CpuRecipe` or a
:class:`GpuRecipe` by its ``"kind"``; the flat recipe of a record written before recipes had
kinds, with ``"gpu": true`` or ``false``, into the kind it names, and the record is
rewritten with the tagged form when it is saved again). Unknown fields are rejected: a record
is written only by :meth:`~polytf.storage.cache.KernelCache.save`, which writes exactly
these fields, and a record of another polytf version is foreign anyway (its key names
the version). ``model``, ``input_shapes`` and ``outputs`` (what ``polytf cache verify``
needs to rebuild the kernel) may be absent, as in records of earlier versions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property

from polytf.errors import CacheError, ScheduleError
from polytf.schedules.recipe import CpuRecipe, GpuRecipe, ScheduleRecipe

#: A record file larger than this is not read (records are a few KB).
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class TuningRecord:
    """The outcome of tuning one kernel (the recipe, never a binary).

    Attributes:
        key: the CacheKey it was tuned under, as :meth:`CacheKey.as_dict` (set by ``save``).
        kernel: kernel name where it was tuned (informational).
        ops: op types fused into it.
        recipe: the best recipe, as a dict (ScheduleRecipe.to_dict: its fields and kind).
        default_latency_s: median latency of the default recipe, seconds.
        best_latency_s: median latency of the best recipe, seconds.
        trials: trials run; failed_trials: of which failed (illegal, compile error, wrong result).
        complete: False when tuning was interrupted before all trials ran.
        model: absolute path of the model file it was tuned from ("" if unknown).
        input_shapes: placeholder name -> shape the model was prepared with.
        outputs: output names the model was prepared with (empty: the graph's sinks).
    """

    key: dict
    kernel: str
    ops: tuple[str, ...]
    recipe: dict
    default_latency_s: float
    best_latency_s: float
    trials: int
    failed_trials: int
    complete: bool = True
    model: str = ""
    input_shapes: dict = field(default_factory=dict)
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # tuples whatever sequences the caller passed, so that a record equals its JSON round trip
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "input_shapes", {str(name): tuple(shape) for name, shape in dict(self.input_shapes).items()})

    @cached_property
    def schedule_recipe(self) -> CpuRecipe | GpuRecipe:
        """The recipe as a CpuRecipe or a GpuRecipe (parsed once per record).

        Raises:
            ScheduleError: the recipe is malformed (never for a record from :func:`parse_record`).
        """
        return ScheduleRecipe.from_dict(self.recipe)

    @property
    def speedup(self) -> float:
        return self.default_latency_s / self.best_latency_s if self.best_latency_s > 0 else float("nan")

    @property
    def digest(self) -> str:
        """The stored key's digest ("" if it has none)."""
        value = self.key.get("digest", "")
        return value if isinstance(value, str) else ""


def record_to_json(record: TuningRecord) -> str:
    """The record file's text.

    Raises:
        CacheError: the record would not parse back (a field of the wrong type or a
            non-finite latency): polytf never writes a record it would refuse to read.
    """
    data = asdict(record)
    try:
        text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise CacheError(f"cannot write the tuning record of kernel {record.kernel}: {error}") from None
    parse_record(json.loads(text))
    return text


def parse_record_text(text: bytes | str) -> TuningRecord:
    """Parse a record file's contents.

    Raises:
        CacheError: not JSON (corrupt or truncated), or a schema violation (the message is
            the reason alone; the caller names the file).
    """
    if len(text) > MAX_RECORD_BYTES:
        raise CacheError(f"it is larger than a record can be ({MAX_RECORD_BYTES} bytes)")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CacheError(f"it is not valid JSON (corrupt or truncated: {error})") from None
    return parse_record(data)


def parse_record(data: object) -> TuningRecord:
    """Check a decoded record file against the schema and build the TuningRecord.

    Raises:
        CacheError: the first violation: not an object, a missing or unknown field, a
            field of the wrong type or out of range, or a malformed recipe.
    """
    if not isinstance(data, dict):
        raise CacheError(f"it is a JSON {_json_type(data)}, not an object")
    missing = [name for name, (_, required) in _SCHEMA.items() if required and name not in data]
    if missing:
        raise CacheError(f"required field(s) {', '.join(missing)} missing")
    unknown = sorted(str(name) for name in set(data) - set(_SCHEMA))
    if unknown:
        raise CacheError(f"unknown field(s) {', '.join(map(repr, unknown))}; a record has {', '.join(_SCHEMA)}")
    for name, value in data.items():
        check, _ = _SCHEMA[name]
        problem = check(value)
        if problem:
            raise CacheError(f"field '{name}' {problem}, not {_describe(value)}")
    if data["failed_trials"] > data["trials"]:
        raise CacheError(f"failed_trials ({data['failed_trials']}) exceeds trials ({data['trials']})")
    try:
        recipe = ScheduleRecipe.from_dict(data["recipe"])
    except ScheduleError as error:
        raise CacheError(f"its recipe is malformed: {error}") from None
    return TuningRecord(**{**data, "recipe": recipe.to_dict()})


def _json_type(value: object) -> str:
    for kind, name in ((bool, "boolean"), (str, "string"), (int, "number"), (float, "number"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _describe(value: object) -> str:
    if value is None:
        return "null"
    text = json.dumps(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"the JSON {_json_type(value)} {text}"


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(value: object) -> str | None:
    return None if isinstance(value, dict) else "must be a JSON object"


def _string(value: object) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _strings(value: object) -> str | None:
    return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "must be an array of strings"


def _count(value: object) -> str | None:
    return None if _is_integer(value) and value >= 0 else "must be a non-negative integer"


def _seconds(value: object) -> str | None:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return None if is_number and math.isfinite(value) and value >= 0 else "must be a finite non-negative number of seconds"


def _boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be a JSON boolean (true or false)"


def _shapes(value: object) -> str | None:
    valid = isinstance(value, dict) and all(isinstance(shape, list) and all(_is_integer(d) and d >= 0 for d in shape) for shape in value.values())
    return None if valid else "must be an object of placeholder name -> array of non-negative integers"


#: field -> (check returning what is wrong or None, required)
_SCHEMA: dict[str, tuple[Callable[[object], str | None], bool]] = {
    "key": (_object, True),
    "kernel": (_string, True),
    "ops": (_strings, True),
    "recipe": (_object, True),
    "default_latency_s": (_seconds, True),
    "best_latency_s": (_seconds, True),
    "trials": (_count, True),
    "failed_trials": (_count, True),
    "complete": (_boolean, False),
    "model": (_string, False),
    "input_shapes": (_shapes, False),
    "outputs": (_strings, False),
}
