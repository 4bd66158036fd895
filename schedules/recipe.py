"""ScheduleRecipe: the plain-data description of one schedule of a Scop.

A recipe is what the tuner searches over and what a tuning record stores: plain,
hashable data that serialises to JSON. Replaying a recipe on the same Scop gives
the same schedule tree (:func:`polytf.schedules.builder.build_schedule`).
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
        parallel: run the outermost loop's iterations on all threads (only legal when it
            carries no dependence).
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

    def steps(self) -> tuple[tuple[str, object], ...]:
        """The recipe as a tuple of named steps, in the order they are applied."""
        return tuple((f.name, getattr(self, f.name)) for f in fields(self))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def to_dict(self) -> dict:
        return json.loads(self.to_json())

    @staticmethod
    def from_dict(data: dict) -> ScheduleRecipe:
        """Inverse of :meth:`to_dict`.

        Raises:
            ScheduleError: unknown or ill-typed fields.
        """
        known = {f.name for f in fields(ScheduleRecipe)}
        unknown = set(data) - known
        if unknown:
            raise ScheduleError(f"unknown recipe fields {sorted(unknown)}; known fields: {sorted(known)}")
        try:
            return ScheduleRecipe(
                tile_sizes=tuple(int(v) for v in data.get("tile_sizes", ())),
                tile_order=tuple(int(v) for v in data.get("tile_order", ())),
                reduction_tile_sizes=tuple(int(v) for v in data.get("reduction_tile_sizes", ())),
                point_order=tuple(str(v) for v in data.get("point_order", ())),
                vector_width=int(data.get("vector_width", 0)),
                unroll=int(data.get("unroll", 0)),
                parallel=bool(data.get("parallel", False)),
                register_tile_sizes=tuple(int(v) for v in data.get("register_tile_sizes", ())),
                pack=tuple(str(v) for v in data.get("pack", ())),
                pad=bool(data.get("pad", False)),
                algorithm=str(data.get("algorithm", "direct")),
            )
        except (TypeError, ValueError) as error:
            raise ScheduleError(f"malformed recipe {data!r}: {error}") from None

    @staticmethod
    def from_json(text: str) -> ScheduleRecipe:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ScheduleError(f"recipe is not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise ScheduleError("a recipe must be a JSON object")
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
        if self.vector_width:
            parts.append(f"vec {self.vector_width}")
        if self.unroll:
            parts.append(f"unroll {self.unroll}")
        if self.parallel:
            parts.append("parallel")
        return ", ".join(parts) or "default"
