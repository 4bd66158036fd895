"""Polyhedral statements: an iteration domain, access relations and a body.

A statement ``S[d0, d1, r0]`` executes ``write = value`` once for every integer
point of its iteration domain. Iterator naming convention (relied on by the schedule
builder): ``d*`` iterators index the statement's output tensor, in order; ``r*``
iterators are reduction dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polytf.errors import PolyhedralError
from polytf.poly.expression import Access, Expr


@dataclass(frozen=True)
class Statement:
    """One statement of a Scop.

    Attributes:
        name: isl tuple name, unique in its Scop (e.g. ``"S3"``).
        iterators: iterator names, outermost first (``d*`` then ``r*``).
        extents: iterator ``n`` ranges over ``0 <= n < extent``.
        constraints: extra affine constraints in isl syntax (e.g. padding bounds
            ``"0 <= d1 + r0 - 1 < 32"``); they restrict the iteration domain.
        write: the element written.
        value: the value written (may read ``write`` itself: a reduction update).
        node: TensorFlow node the statement comes from.
        op: that node's op type.
    """

    name: str
    iterators: tuple[str, ...]
    extents: tuple[int, ...]
    write: Access
    value: Expr
    constraints: tuple[str, ...] = ()
    node: str = ""
    op: str = ""

    def __post_init__(self) -> None:
        if len(self.iterators) != len(self.extents):
            raise PolyhedralError(f"statement {self.name}: {len(self.iterators)} iterators but {len(self.extents)} extents")

    @property
    def domain_text(self) -> str:
        """The iteration domain in isl syntax."""
        bounds = [f"0 <= {it} < {extent}" for it, extent in zip(self.iterators, self.extents)]
        bounds += list(self.constraints)
        condition = " and ".join(bounds)
        return f"{{ {self.name}[{', '.join(self.iterators)}]{' : ' + condition if condition else ''} }}"

    def domain(self, context: isl.Context | None = None) -> isl.Set:
        """Iteration domain as an isl set.

        Raises:
            PolyhedralError: isl cannot parse the domain (the message has its text).
        """
        return _parse(isl.Set, self.domain_text, context, f"domain of statement {self.name} (node '{self.node}')")

    @property
    def reads(self) -> tuple[Access, ...]:
        return self.value.loads()

    @property
    def output_iterators(self) -> tuple[str, ...]:
        """Leading ``d*`` iterators (the dimensions of the tensor written)."""
        result = []
        for it in self.iterators:
            if not it.startswith("d"):
                break
            result.append(it)
        return tuple(result)

    @property
    def reduction_iterators(self) -> tuple[str, ...]:
        return self.iterators[len(self.output_iterators):]

    @property
    def is_reduction(self) -> bool:
        """True when the body reads the element it writes (``C = C + ...``)."""
        return self.write in self.reads

    def access_map(self, access: Access, context: isl.Context | None = None) -> isl.Map:
        """Access relation ``{ S[iterators] -> array[index] }`` restricted to the domain."""
        relation = _parse(isl.Map, access.to_isl(self.name, self.iterators), context, f"access {access} of statement {self.name}")
        return relation.intersect_domain(self.domain(context))

    def __str__(self) -> str:
        return f"{self.name}[{', '.join(self.iterators)}]: {self.write} = {self.value}"


def _parse(kind, text: str, context: isl.Context | None, what: str):
    try:
        return kind.read_from_str(context or isl.DEFAULT_CONTEXT, text)
    except isl.Error as error:
        raise PolyhedralError(f"isl rejected the {what}: {text} ({error})") from None
