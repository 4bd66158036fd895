"""ScheduleRecipe: the plain-data description of one schedule of a Scop.

A recipe is what the tuner searches over and what a tuning record stores: plain,
hashable data that serialises to JSON. Replaying a recipe on the same Scop gives
the same schedule tree (:func:`polytf.schedules.builder.build_schedule`).

This module checks only the fields' JSON types (:data:`FIELD_TYPES`, the one table of
them); :func:`polytf.schedules.validation.validate_recipe` checks a recipe against its
kernel and target.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from polytf.errors import ScheduleError


@dataclass(frozen=True)
class ScheduleRecipe:
    """One point of a kernel's search space.

    The loop nest of a fusion group is an outer band shared by all its statements
    (the leading output dimensions ``d*`` they have in common), then, per statement
    in program order, an inner band over its remaining iterators.

    Attributes:
        tile_sizes: per shared dimension, the tile size of the outer band; 0 leaves the
            dimension untiled (its whole range is an outer loop shared by all statements);
            a tile size moves the point loop into each statement's inner band.
        tile_order: permutation of the shared dimensions: the order of the outer loops.
            Empty means natural order.
        reduction_tile_sizes: per reduction iterator ``r*`` of the anchor statement (the
            statement with the most iterators), a tile size; 0 leaves it untiled.
        point_order: a permutation of the anchor statement's iterators; the anchor's
            inner band follows it (iterators not in that band are skipped). Empty means
            natural order.
        vector_width: innermost loops get this vectorisation width; 0 lets LLVM decide,
            1 disables vectorisation.
        unroll: innermost loops get this unroll count; 0 lets LLVM decide, 1 disables unrolling.
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
        pad: redirect the anchor's guarded reads (Conv2D padding) to a zero-padded copy, so
            that its iteration domain is a box.
        algorithm: ``"direct"`` (the anchor as lowered) or ``"im2col"`` (its windowed read
            gathered into a dense matrix first: im2col + GEMM, for convolutions).
        gpu: map the kernel to a CUDA grid (:mod:`polytf.schedules.gpu_mapping`): every
            shared dimension is tiled by ``tile_sizes`` (one tile per block; 0: the whole
            extent), the innermost on x, the next on y, the others on z (folded into one
            block coordinate when there are several), and each block's tile by
            ``thread_tile_sizes`` (the points one thread computes; 0 or 1: one point; 0 for
            a folded dimension); ``reduction_tile_sizes`` tile the anchor's reductions
            around the threads (its accumulator then lives in registers); ``point_order``
            orders each thread's loops and ``unroll`` unrolls them; ``pad`` and ``im2col``
            copies run as launches of their own before the kernel's. A GPU recipe has no
            register tiles, packing or parallel flag (the CPU's) and keeps the natural tile
            order.
        thread_tile_sizes: per shared dimension, the points of it each GPU thread computes.
        shared_memory: arrays the anchor reads that are staged in shared memory per block
            and reduction tile (copied by all threads of the block between barriers).
    """

    tile_sizes: tuple[int, ...] = ()
    tile_order: tuple[int, ...] = ()
    reduction_tile_sizes: tuple[int, ...] = ()
    point_order: tuple[str, ...] = ()
    vector_width: int = 0
    unroll: int = 0
    parallel: bool = False
    register_tile_sizes: tuple[int, ...] = ()
    pack: tuple[str, ...] = ()
    pad: bool = False
    algorithm: str = "direct"
    gpu: bool = False
    thread_tile_sizes: tuple[int, ...] = ()
    shared_memory: tuple[str, ...] = ()

    def steps(self) -> tuple[tuple[str, object], ...]:
        """The recipe as a tuple of named steps, in the order they are applied."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def to_dict(self) -> dict:
        return json.loads(self.to_json())

    @staticmethod
    def from_dict(data: object) -> ScheduleRecipe:
        """Inverse of :meth:`to_dict`: a JSON object with some of the fields, each of its
        exact JSON type (lists of integers or strings, integers, booleans, a string);
        missing fields take their defaults. Values are checked against the kernel later, by
        :func:`polytf.schedules.validation.validate_recipe`.

        Raises:
            ScheduleError: not an object, unknown fields, or a field of the wrong type
                (naming the field and the type it needs).
        """
        if not isinstance(data, dict):
            raise ScheduleError(f"a recipe must be a JSON object with fields {sorted(FIELD_TYPES)}, not {type(data).__name__}")
        unknown = set(data) - set(FIELD_TYPES)
        if unknown:
            raise ScheduleError(f"unknown recipe fields {sorted(map(str, unknown))}; known fields: {sorted(FIELD_TYPES)}")
        for name, value in data.items():
            problem = field_type_error(name, value)
            if problem:
                raise ScheduleError(f"recipe field {problem}")
        return ScheduleRecipe(**{name: tuple(value) if FIELD_TYPES[name][1] else value for name, value in data.items()})

    @staticmethod
    def from_json(text: str) -> ScheduleRecipe:
        """Inverse of :meth:`to_json`.

        Raises:
            ScheduleError: not JSON, or not a recipe (:meth:`from_dict`).
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as error:
            raise ScheduleError(f"recipe is not valid JSON: {error}") from None
        return ScheduleRecipe.from_dict(data)

    def describe(self) -> str:
        """Short human-readable form for progress output."""
        parts = []
        if any(self.tile_sizes):
            parts.append("tile " + "x".join(str(t) if t else "-" for t in self.tile_sizes))
        if any(self.reduction_tile_sizes):
            parts.append("rtile " + "x".join(str(t) if t else "-" for t in self.reduction_tile_sizes))
        if self.point_order:
            parts.append("order " + ",".join(self.point_order))
        if any(self.register_tile_sizes):
            parts.append("regtile " + "x".join(str(t) if t else "-" for t in self.register_tile_sizes))
        if self.pack:
            parts.append("pack " + ",".join(self.pack))
        if self.pad:
            parts.append("pad")
        if self.algorithm != "direct":
            parts.append(self.algorithm)
        if self.gpu:
            parts.append("gpu")
        if any(self.thread_tile_sizes):
            parts.append("threadtile " + "x".join(str(t) if t else "-" for t in self.thread_tile_sizes))
        if self.shared_memory:
            parts.append("shared " + ",".join(self.shared_memory))
        if self.vector_width:
            parts.append(f"vec {self.vector_width}")
        if self.unroll:
            parts.append(f"unroll {self.unroll}")
        if self.parallel:
            parts.append("parallel")
        return ", ".join(parts) or "default"


#: field -> (element type, whether it is a list): the one table of the recipe's field types
FIELD_TYPES: dict[str, tuple[type, bool]] = {
    "tile_sizes": (int, True),
    "tile_order": (int, True),
    "reduction_tile_sizes": (int, True),
    "point_order": (str, True),
    "vector_width": (int, False),
    "unroll": (int, False),
    "parallel": (bool, False),
    "register_tile_sizes": (int, True),
    "pack": (str, True),
    "pad": (bool, False),
    "algorithm": (str, False),
    "gpu": (bool, False),
    "thread_tile_sizes": (int, True),
    "shared_memory": (str, True),
}

_TYPE_NAMES = {int: "integer", str: "string", bool: "boolean"}


def _of_type(value: object, kind: type) -> bool:
    """``isinstance`` that does not take a bool for an int (nor a float, a string or a
    numpy integer: the exact Python types of JSON)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def field_type_error(name: str, value: object) -> str | None:
    """None when ``value`` has the exact type of recipe field ``name`` (a list field may be a
    list or a tuple), else ``"<name> must be ..., not <value>"``."""
    kind, is_list = FIELD_TYPES[name]
    if is_list:
        if isinstance(value, (list, tuple)) and all(_of_type(v, kind) for v in value):
            return None
        return f"{name} must be a list of {_TYPE_NAMES[kind]}s, not {value!r}"
    if _of_type(value, kind):
        return None
    return f"{name} must be {'an' if kind is int else 'a'} {_TYPE_NAMES[kind]}, not {value!r}"


__all__ = ["ScheduleRecipe", "FIELD_TYPES", "field_type_error"]
