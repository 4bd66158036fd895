"""Schedule recipes: the plain-data description of one schedule of a Scop.

A recipe is what the tuner searches over and what a tuning record stores: plain,
hashable data that serialises to JSON. Replaying a recipe on the same Scop gives the
same schedule tree (:func:`polytf.schedules.builder.build_schedule`).

There are two kinds, over one core (:class:`ScheduleRecipe`: the tiles of the shared and
reduction dimensions, the order of the anchor's loops, unrolling and the data layout that
both targets apply):

- :class:`CpuRecipe`: loop tiling, interchange, register tiles (a micro-kernel), operand
  packing, vectorisation and a parallel loop, for :class:`~polytf.targets.cpu.CpuTarget`;
- :class:`GpuRecipe`: the shared band mapped to the blocks and threads of a CUDA grid,
  operands staged in shared memory (:mod:`polytf.schedules.gpu_mapping`), for
  :class:`~polytf.targets.cuda.CudaTarget`.

JSON form: the fields and a ``"kind"`` tag, ``{"kind": "cpu", "tile_sizes": [32, 64],
...}``. A recipe written before the kinds existed (polytf 61c8331 and earlier) is one
flat object with every field of both kinds and ``"gpu": true`` or ``false``; it still
parses (:meth:`ScheduleRecipe.from_dict`), into the kind ``"gpu"`` names, when the other
kind's fields hold the values that meant "not used" (empty, zero or false; a GPU recipe's
tile order the natural one).

This module checks only the fields' JSON types (each kind's :attr:`~ScheduleRecipe.FIELD_TYPES`);
:func:`polytf.schedules.validation.validate_recipe` checks a recipe against its kernel and
target.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from typing import ClassVar

from polytf.errors import ScheduleError

__all__ = ["ScheduleRecipe", "CpuRecipe", "GpuRecipe", "RECIPE_KINDS", "field_type_error"]

#: field -> (element type, whether it is a list), of the fields every recipe has
_CORE_FIELD_TYPES: dict[str, tuple[type, bool]] = {
    "tile_sizes": (int, True),
    "reduction_tile_sizes": (int, True),
    "point_order": (str, True),
    "unroll": (int, False),
    "pad": (bool, False),
    "algorithm": (str, False),
}


@dataclass(frozen=True)
class ScheduleRecipe:
    """The core of every recipe: one point of a kernel's search space (a
    :class:`CpuRecipe` or a :class:`GpuRecipe`; the core alone is not a recipe).

    The loop nest of a fusion group is an outer band shared by all its statements (the
    leading output dimensions they have in common), then, per statement in program
    order, an inner band over its remaining iterators.

    Attributes:
        tile_sizes: per shared dimension, the tile size of the outer band; 0 leaves the
            dimension untiled (on the CPU its whole range is an outer loop shared by all
            statements; on the GPU one block covers it).
        reduction_tile_sizes: per reduction iterator of the anchor statement (the
            statement with the most iterators), a tile size; 0 leaves it untiled.
        point_order: a permutation of the anchor statement's iterators; the anchor's
            inner band (a GPU thread's loops) follows it. Empty means natural order.
        unroll: innermost loops get this unroll count; 1 disables unrolling; 0 leaves it to
            polytf: a micro-kernel's innermost reduction loop is unrolled
            :data:`~polytf.targets.microkernel.MICROKERNEL_UNROLL` times, other loops not at all.
        pad: redirect the anchor's guarded reads (Conv2D padding) to a zero-padded copy, so
            that its iteration domain is a box.
        algorithm: ``"direct"`` (the anchor as lowered) or ``"im2col"`` (its windowed read
            gathered into a dense matrix first: im2col + GEMM, for convolutions), or
            ``"winograd_f2x2_3x3"`` / ``"winograd_f4x4_3x3"`` (Winograd's minimal filtering
            for 3×3 stride-1 convolutions, :mod:`polytf.schedules.winograd`; the other
            fields stay in the convolution's terms).
    """

    #: ``"cpu"`` or ``"gpu"``: the JSON tag of the kind
    kind: ClassVar[str] = ""
    #: field -> (element type, whether it is a list): the one table of the kind's field types
    FIELD_TYPES: ClassVar[dict[str, tuple[type, bool]]] = _CORE_FIELD_TYPES

    tile_sizes: tuple[int, ...] = ()
    reduction_tile_sizes: tuple[int, ...] = ()
    point_order: tuple[str, ...] = ()
    unroll: int = 0
    pad: bool = False
    algorithm: str = "direct"

    def __post_init__(self) -> None:
        if not self.kind:
            raise TypeError("ScheduleRecipe is the core of the recipe kinds: make a CpuRecipe or a GpuRecipe")

    def to_dict(self) -> dict:
        """The JSON object of the recipe: its fields (lists for tuples) and ``"kind"``."""
        return json.loads(self.to_json())

    def to_json(self) -> str:
        """The recipe as canonical JSON text (sorted keys); made once per distinct recipe."""
        return _recipe_json(self)

    @staticmethod
    def from_dict(data: object) -> CpuRecipe | GpuRecipe:
        """Inverse of :meth:`to_dict`: a JSON object with ``"kind"`` and some of that kind's
        fields, each of its exact JSON type (lists of integers or strings, integers,
        booleans, a string); missing fields take their defaults. A flat object without
        ``"kind"`` is a recipe of polytf 61c8331 or earlier (module docstring). Values are
        checked against the kernel later, by :func:`polytf.schedules.validation.validate_recipe`.

        Raises:
            ScheduleError: not an object, an unknown kind, unknown fields, a field of the
                wrong type (naming the field and the type it needs), or an older recipe
                that uses fields of both kinds.
        """
        if not isinstance(data, dict):
            raise ScheduleError(f"a recipe must be a JSON object with a kind ({', '.join(RECIPE_KINDS)}) and its fields, not {type(data).__name__}")
        if "kind" not in data:
            return _from_flat_dict(data)
        fields = dict(data)
        kind = fields.pop("kind")
        if kind not in RECIPE_KINDS:
            raise ScheduleError(f"unknown recipe kind {kind!r}; known kinds: {', '.join(RECIPE_KINDS)}")
        return RECIPE_KINDS[kind]._of_fields(fields)

    @staticmethod
    def from_json(text: str) -> CpuRecipe | GpuRecipe:
        """Inverse of :meth:`to_json`.

        Raises:
            ScheduleError: not JSON, or not a recipe (:meth:`from_dict`).
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as error:
            raise ScheduleError(f"recipe is not valid JSON: {error}") from None
        return ScheduleRecipe.from_dict(data)

    @classmethod
    def _of_fields(cls, data: dict) -> CpuRecipe | GpuRecipe:
        """The recipe of kind ``cls`` with the fields of ``data`` (types checked)."""
        _check_fields(data, cls.FIELD_TYPES, f"{cls.kind} recipe fields", f"known fields: {sorted(cls.FIELD_TYPES)}")
        return cls(**{name: tuple(value) if cls.FIELD_TYPES[name][1] else value for name, value in data.items()})

    def describe(self) -> str:
        """Short human-readable form for progress output."""
        return ", ".join(self._described()) or "default"

    def _described(self) -> list[str]:
        raise NotImplementedError

    def _tiling_words(self) -> list[str]:
        parts = []
        if any(self.tile_sizes):
            parts.append("tile " + _sizes(self.tile_sizes))
        if any(self.reduction_tile_sizes):
            parts.append("rtile " + _sizes(self.reduction_tile_sizes))
        if self.point_order:
            parts.append("order " + ",".join(self.point_order))
        return parts

    def _layout_words(self) -> list[str]:
        parts = ["pad"] if self.pad else []
        if self.algorithm != "direct":
            parts.append(self.algorithm)
        return parts


def _sizes(sizes: tuple[int, ...]) -> str:
    return "x".join(str(t) if t else "-" for t in sizes)


@dataclass(frozen=True)
class CpuRecipe(ScheduleRecipe):
    """A CPU schedule (:class:`~polytf.targets.cpu.CpuTarget`): the core's fields and

    Attributes:
        tile_order: permutation of the shared dimensions: the order of the outer loops.
            Empty means natural order.
        vector_width: innermost loops get this vectorisation width; 0 lets LLVM decide,
            1 disables vectorisation.
        parallel: run the iterations of the outermost loop of the shared outer band that
            isl generates (a dimension of one tile or extent 1 has none) on all threads,
            and each data-layout copy nest on all threads; only legal when that loop
            carries no dependence (:mod:`polytf.schedules.marks`).
        register_tile_sizes: per shared dimension, a second level of tiling inside the
            (cache) tile of ``tile_sizes``: the anchor's register-tile points become the
            innermost loops, below its reduction loops, and the code generator emits them as
            a micro-kernel (unroll-and-jam, accumulators in registers, the last one
            vectorised explicitly with ``vector_width`` lanes). 0 = no register tile; a
            register tile needs a cache tile that is a multiple of it.
        pack: arrays read by the anchor to copy into register-tile panels before the loop
            nest (:mod:`polytf.schedules.data_layout`).
    """

    kind: ClassVar[str] = "cpu"
    FIELD_TYPES: ClassVar[dict[str, tuple[type, bool]]] = {
        **_CORE_FIELD_TYPES,
        "tile_order": (int, True),
        "vector_width": (int, False),
        "parallel": (bool, False),
        "register_tile_sizes": (int, True),
        "pack": (str, True),
    }

    tile_order: tuple[int, ...] = ()
    vector_width: int = 0
    parallel: bool = False
    register_tile_sizes: tuple[int, ...] = ()
    pack: tuple[str, ...] = ()

    def _described(self) -> list[str]:
        parts = self._tiling_words()
        if any(self.register_tile_sizes):
            parts.append("regtile " + _sizes(self.register_tile_sizes))
        if self.pack:
            parts.append("pack " + ",".join(self.pack))
        parts += self._layout_words()
        if self.vector_width:
            parts.append(f"vec {self.vector_width}")
        if self.unroll:
            parts.append(f"unroll {self.unroll}")
        if self.parallel:
            parts.append("parallel")
        return parts


@dataclass(frozen=True)
class GpuRecipe(ScheduleRecipe):
    """A kernel mapped to a CUDA grid (:mod:`polytf.schedules.gpu_mapping`): every shared
    dimension is tiled by ``tile_sizes`` (one tile per block; 0: the whole extent), the
    innermost on x, the next on y, the others on z (folded into one block coordinate when
    there are several), and each block's tile by ``thread_tile_sizes``;
    ``reduction_tile_sizes`` tile the anchor's reductions around the threads (its
    accumulator then lives in registers); ``point_order`` orders each thread's loops and
    ``unroll`` unrolls them; ``pad`` and ``im2col`` copies run as launches of their own
    before the kernel's. The outer loops keep their natural order.

    Attributes:
        thread_tile_sizes: per shared dimension, the points of it each thread computes (0
            or 1: one point; 0 for a folded dimension).
        shared_memory: arrays the anchor reads that are staged in shared memory per block
            and reduction tile (copied by all threads of the block between barriers).
    """

    kind: ClassVar[str] = "gpu"
    FIELD_TYPES: ClassVar[dict[str, tuple[type, bool]]] = {
        **_CORE_FIELD_TYPES,
        "thread_tile_sizes": (int, True),
        "shared_memory": (str, True),
    }

    thread_tile_sizes: tuple[int, ...] = ()
    shared_memory: tuple[str, ...] = ()

    @property
    def pack(self) -> tuple[str, ...]:
        """No packed operands: a GPU recipe stages operands in shared memory instead (the
        data-layout transformations read ``pack`` of either kind)."""
        return ()

    def _described(self) -> list[str]:
        parts = [*self._tiling_words(), *self._layout_words(), "gpu"]
        if any(self.thread_tile_sizes):
            parts.append("threadtile " + _sizes(self.thread_tile_sizes))
        if self.shared_memory:
            parts.append("shared " + ",".join(self.shared_memory))
        if self.unroll:
            parts.append(f"unroll {self.unroll}")
        return parts


#: the JSON kind tag -> the recipe type
RECIPE_KINDS: dict[str, type[CpuRecipe] | type[GpuRecipe]] = {CpuRecipe.kind: CpuRecipe, GpuRecipe.kind: GpuRecipe}


def _unused(name: str, value: object) -> bool:
    """Whether a field of the other kind in a flat recipe holds its "not used" value:
    empty, all zeros, false (a GPU recipe's tile order: the natural one)."""
    if name == "tile_order":
        return list(value) == list(range(len(value)))
    if isinstance(value, (list, tuple)):
        return not any(value)
    return not value


def _from_flat_dict(data: dict) -> CpuRecipe | GpuRecipe:
    """A recipe of polytf 61c8331 or earlier: the fields of both kinds and ``"gpu"``.

    Raises:
        ScheduleError: as :meth:`ScheduleRecipe.from_dict`; a field of the other kind
            that is used (a GPU recipe with a register tile).
    """
    every = {**CpuRecipe.FIELD_TYPES, **GpuRecipe.FIELD_TYPES, "gpu": (bool, False)}
    _check_fields(data, every, "recipe fields", f"a recipe has a kind ({', '.join(RECIPE_KINDS)}) and its fields")
    recipe_type = GpuRecipe if data.get("gpu", False) else CpuRecipe
    fields = {}
    for name, value in data.items():
        if name in recipe_type.FIELD_TYPES:
            fields[name] = value
        elif name != "gpu" and not _unused(name, value):
            raise ScheduleError(
                f"recipe field {name} = {value!r} is a {'GPU' if recipe_type is CpuRecipe else 'CPU'} field, "
                f"unused in a recipe with gpu: {str(recipe_type is GpuRecipe).lower()}"
            )
    return recipe_type._of_fields(fields)


def _check_fields(data: dict, field_types: dict[str, tuple[type, bool]], what: str, known: str) -> None:
    """ScheduleError for a field of ``data`` not in ``field_types`` (``"unknown <what> [...];
    <known>"``) or not of its exact type."""
    unknown = set(data) - set(field_types)
    if unknown:
        raise ScheduleError(f"unknown {what} {sorted(map(str, unknown))}; {known}")
    for name, value in data.items():
        problem = field_type_error(name, value, field_types)
        if problem:
            raise ScheduleError(f"recipe field {problem}")


_TYPE_NAMES = {int: "integer", str: "string", bool: "boolean"}


def _of_type(value: object, kind: type) -> bool:
    """``isinstance`` that does not take a bool for an int (nor a float, a string or a
    numpy integer: the exact Python types of JSON)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def field_type_error(name: str, value: object, field_types: dict[str, tuple[type, bool]]) -> str | None:
    """None when ``value`` has the exact type of recipe field ``name`` in ``field_types`` (a
    kind's :attr:`~ScheduleRecipe.FIELD_TYPES`; a list field may be a list or a tuple),
    else ``"<name> must be ..., not <value>"``."""
    kind, is_list = field_types[name]
    if is_list:
        if isinstance(value, (list, tuple)) and all(_of_type(v, kind) for v in value):
            return None
        return f"{name} must be a list of {_TYPE_NAMES[kind]}s, not {value!r}"
    if _of_type(value, kind):
        return None
    return f"{name} must be {'an' if kind is int else 'a'} {_TYPE_NAMES[kind]}, not {value!r}"


@functools.lru_cache(maxsize=4096)
def _recipe_json(recipe: ScheduleRecipe) -> str:
    """:meth:`ScheduleRecipe.to_json`, remembered per distinct recipe (a load keys every kernel
    by its recipe's JSON, twice)."""
    return json.dumps({"kind": recipe.kind, **asdict(recipe)}, sort_keys=True)
