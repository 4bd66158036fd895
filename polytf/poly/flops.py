"""Floating-point operations of contractions: the one FLOP counter of polytf.

A *contraction* is a reduction statement whose update adds a product to the element it
writes, ``C[d] = C[d] + A[...] * B[...]`` — what MatMul, BatchMatMulV2, Einsum, Conv2D,
GroupedConv2D and DepthwiseConv2dNative lower to (:mod:`polytf.ops`). Each point of its
iteration domain is one multiply and one add, so it counts ``2 × |domain|`` FLOPs; a grouped
convolution's domain sums over its ``C/G`` channels per group only
(``2·N·Ho·Wo·Cout·KH·KW·Cin/G``). Element-wise epilogues, pooling,
softmax and plain sums are not counted (the usual convention of GEMM and convolution
benchmarks).

Padding is not work: a convolution's domain holds only the filter taps that read inside the
input (its padding constraints, :meth:`polytf.ops.conv.Window.constraints`), so a padded
Conv2D counts slightly less than the ``2·N·Ho·Wo·Cout·KH·KW·Cin`` of the textbook formula —
the multiplies the generated code executes, which is what a fraction of the machine's peak
must be taken of.

Counting is exact and fast: the iterators of a domain are split into groups that its
constraints couple (e.g. ``d1`` with ``r0`` for a padded convolution row), isl counts the
points of each small group (``isl_set_count_val``), and the box extents of the other
iterators multiply in. isl's own count of the whole domain enumerates every point (seconds
for one ResNet layer).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from polytf.errors import PolyhedralError
from polytf.islpy_on_demand import isl
from polytf.poly.expression import Binary, Load
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement

__all__ = ["is_contraction", "domain_points", "statement_flops", "contraction_flops"]


def is_contraction(statement: Statement) -> bool:
    """True when ``statement`` is ``W = W + x * y`` (or ``W = x * y + W``): a reduction of a
    product into the element ``W`` it writes."""
    value = statement.value
    if not isinstance(value, Binary) or value.op != "add":
        return False
    for accumulator, term in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        if isinstance(accumulator, Load) and accumulator.access == statement.write:
            return isinstance(term, Binary) and term.op == "mul"
    return False


def domain_points(statement: Statement) -> int:
    """Number of integer points of the statement's iteration domain (its box of extents cut by
    its affine constraints).

    Raises:
        PolyhedralError: isl cannot parse a constraint.
    """
    return _points(statement.iterators, statement.extents, statement.constraints)


def statement_flops(statement: Statement) -> int:
    """``2 × domain_points`` for a contraction (one multiply and one add per point), else 0.

    Raises:
        PolyhedralError: isl cannot parse a constraint of a contraction.
    """
    return 2 * domain_points(statement) if is_contraction(statement) else 0


def contraction_flops(scop: Scop) -> int:
    """FLOPs of one run of the kernel: the sum of :func:`statement_flops` over its statements
    (0 when it has no contraction).

    Raises:
        PolyhedralError: isl cannot parse a constraint of a contraction.
    """
    return sum(statement_flops(statement) for statement in scop.statements)


@lru_cache(maxsize=4096)
def _points(iterators: tuple[str, ...], extents: tuple[int, ...], constraints: tuple[str, ...]) -> int:
    """Points of ``{ [iterators] : 0 <= it < extent and constraints }``, group by group.

    Cached by value: a network repeats the same layer shapes many times.
    """
    if any(int(extent) <= 0 for extent in extents):
        return 0
    # union-find over iterator positions: a constraint joins every iterator it names
    parent = list(range(len(iterators)))

    def root(position: int) -> int:
        while parent[position] != position:
            parent[position] = parent[parent[position]]
            position = parent[position]
        return position

    named: list[tuple[str, list[int]]] = []
    for constraint in constraints:
        positions = [p for p, name in enumerate(iterators) if re.search(rf"\b{re.escape(name)}\b", constraint)]
        named.append((constraint, positions))
        for position in positions[1:]:
            parent[root(position)] = root(positions[0])
    groups: dict[int, list[int]] = {}
    for position in range(len(iterators)):
        groups.setdefault(root(position), []).append(position)
    total = 1
    for key, positions in groups.items():
        own = [constraint for constraint, where in named if where and root(where[0]) == key]
        if not own:
            total *= math.prod(int(extents[p]) for p in positions)
            continue
        total *= _count(tuple(iterators[p] for p in positions), tuple(int(extents[p]) for p in positions), tuple(own))
    for constraint, where in named:  # a constraint on no iterator holds everywhere or nowhere
        if not where:
            total *= _count((), (), (constraint,))
    return total


def _count(iterators: tuple[str, ...], extents: tuple[int, ...], constraints: tuple[str, ...]) -> int:
    bounds = [f"0 <= {name} < {extent}" for name, extent in zip(iterators, extents)] + list(constraints)
    text = f"{{ [{', '.join(iterators)}] : {' and '.join(bounds)} }}"
    try:
        return int(isl.Set(text).count_val().to_python())
    except isl.Error as error:
        raise PolyhedralError(f"isl cannot count the points of {text} ({error})") from None
