"""Scop: the static control part of one fusion group, ready for scheduling.

A Scop is the list of statements of a fusion group in program order plus the
arrays they touch. It is what a kernel is compiled from and what a tuning record
is keyed by (:meth:`Scop.fingerprint`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from polytf.islpy_on_demand import isl
from polytf.poly.statement import Statement


@dataclass(frozen=True)
class ArrayInfo:
    """One array of a Scop (row-major, contiguous).

    Attributes:
        name: isl identifier used in access relations (e.g. ``"A3"``).
        shape: static dimension sizes.
        dtype: numpy dtype name.
        role: ``"input"`` (read only), ``"output"`` (written, needed after the kernel) or
            ``"temporary"`` (written and read only inside the kernel).
        tensor: the TensorFlow tensor it holds (``"node:port"``), for messages.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    tensor: str = ""


@dataclass(frozen=True)
class Scop:
    """Statements in program order and the arrays they access.

    Attributes:
        name: kernel name (a valid C identifier).
        statements: in the order the source program runs them.
        arrays: every array, in kernel-argument order.
        ops: ``(node name, op type)`` of the TensorFlow nodes fused into it.
    """

    name: str
    statements: tuple[Statement, ...]
    arrays: tuple[ArrayInfo, ...]
    ops: tuple[tuple[str, str], ...] = ()

    def __hash__(self) -> int:
        # computed once: Scops key memoised analyses (dependences, the anchor statement)
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.statements, self.arrays, self.ops))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        # no cached isl objects or hash across processes (hashes of str differ between them)
        return {f: getattr(self, f) for f in ("name", "statements", "arrays", "ops")}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def array(self, name: str) -> ArrayInfo:
        for info in self.arrays:
            if info.name == name:
                return info
        raise KeyError(name)

    def statement(self, name: str) -> Statement:
        for statement in self.statements:
            if statement.name == name:
                return statement
        raise KeyError(name)

    @cached_property
    def domain(self) -> isl.UnionSet:
        """Union of all iteration domains."""
        empty = isl.UnionSet.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
        return balanced_union([isl.UnionSet.from_set(s.domain()) for s in self.statements], empty)

    def writes(self) -> isl.UnionMap:
        """Write access relations of all statements (computed once per Scop)."""
        return self._writes

    def reads(self) -> isl.UnionMap:
        """Read access relations of all statements (computed once per Scop)."""
        return self._reads

    def original_schedule(self) -> isl.UnionMap:
        """Program order: ``S_n[x] -> [n, x, 0...]`` (statement order, then lexicographic;
        computed once per Scop)."""
        return self._original_schedule

    @cached_property
    def _writes(self) -> isl.UnionMap:
        return _union(s.access_map(s.write) for s in self.statements)

    @cached_property
    def _reads(self) -> isl.UnionMap:
        return _union(s.access_map(a) for s in self.statements for a in s.reads)

    @cached_property
    def _original_schedule(self) -> isl.UnionMap:
        depth = max(len(s.iterators) for s in self.statements)
        parts = []
        for position, s in enumerate(self.statements):
            padded = list(s.iterators) + ["0"] * (depth - len(s.iterators))
            parts.append(f"{s.name}[{', '.join(s.iterators)}] -> [{position}, {', '.join(padded)}]")
        return isl.UnionMap("{ " + "; ".join(parts) + " }").intersect_domain(self.domain)

    def canonical_text(self) -> str:
        """Text that identifies the computation regardless of tensor names."""
        lines = [f"{a.name}:{a.dtype}{list(a.shape)}:{a.role}" for a in self.arrays]
        for s in self.statements:
            lines.append(f"{s.domain_text} :: {s.write} = {s.value}")
        return "\n".join(lines)

    def fingerprint(self) -> str:
        """SHA-256 of :meth:`canonical_text` (hex, 16 characters); computed once per Scop."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        return hashlib.sha256(self.canonical_text().encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return "\n".join([f"kernel {self.name}"] + [f"  {s}" for s in self.statements])


def _union(maps) -> isl.UnionMap:
    return balanced_union([isl.UnionMap.from_map(m) for m in maps], isl.UnionMap.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0)))


def balanced_union(parts: list, empty):
    """Union of ``parts`` (isl union sets or maps) by pairs, in ``log2(len(parts))`` rounds:
    each union copies its operands, so a left fold would cost ``O(len(parts)**2)``."""
    while len(parts) > 1:
        parts = [parts[i].union(parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0] if parts else empty
