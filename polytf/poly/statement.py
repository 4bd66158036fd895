"""Polyhedral statements: an iteration domain, access relations and a body.

A statement ``S[d0, d1, r0]`` executes ``write = value`` once for every integer
point of its iteration domain. Each iterator has a role (:class:`IteratorRole`): an
*output* iterator indexes the tensor the statement writes, a *reduction* iterator runs
over values combined into one element (MatMul's ``k``, a pooling window). The schedule
builder and the search spaces read the roles, never the iterators' names (which are isl
names: they enter the Scop's fingerprint, :meth:`polytf.poly.scop.Scop.canonical_text`).

A lowering leaves the roles out: they are derived from the statement's structure (the
leading iterators its write's index uses are outputs, the rest reductions,
``C[d0, d1] += A[d0, r0] * B[r0, d1]``: ``d0, d1`` outputs, ``r0`` a reduction). Code
that creates statements for other purposes (the schedules' copy statements) may give
them, and marks the statement with its :class:`CopyKind`; ``op`` holds only the
TensorFlow op type of the node a statement comes from.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from polytf.errors import PolyhedralError
from polytf.islpy_on_demand import isl
from polytf.poly.expression import Access, Expr


class IteratorRole(enum.Enum):
    """What an iterator of a statement runs over."""

    #: a dimension of the tensor the statement writes (a parallel loop of the statement)
    OUTPUT = "output"
    #: a dimension combined into one written element (a loop-carried accumulation)
    REDUCTION = "reduction"


class CopyKind(enum.Enum):
    """Copy statements the schedules add to a Scop (``Statement.copy_kind``); the
    statements of TensorFlow nodes have none."""

    #: a data-layout copy that runs before the loop nest (packing, zero-padding, im2col;
    #: :mod:`polytf.schedules.data_layout`)
    DATA_LAYOUT = "data_layout"
    #: a data-layout copy as the one statement of its own GPU launch (the launch
    #: prologue, :attr:`polytf.schedules.gpu_grid.GpuLaunch.prologue`): a main
    #: statement of that launch's Scop
    PROLOGUE = "prologue"
    #: stages an operand in a block's shared memory (:mod:`polytf.schedules.gpu_mapping`)
    SHARED_MEMORY = "shared_memory"
    #: loads an accumulator into a thread's registers or stores it back (PPCG's private
    #: memory, :mod:`polytf.schedules.gpu_mapping`)
    PRIVATE = "private"


def derived_roles(iterators: tuple[str, ...], write: Access) -> tuple[IteratorRole, ...]:
    """The roles of a lowered statement's iterators: the leading iterators that the index
    of ``write`` uses are outputs, the others reductions (``Y[d0, d1] = max(Y[d0, d1],
    X[d0, r0, d1])`` over ``(d0, d1, r0)``: output, output, reduction)."""
    used = {name for index in write.index for name in index.iterators}
    outputs = 0
    while outputs < len(iterators) and iterators[outputs] in used:
        outputs += 1
    return (IteratorRole.OUTPUT,) * outputs + (IteratorRole.REDUCTION,) * (len(iterators) - outputs)


@dataclass(frozen=True)
class Statement:
    """One statement of a Scop.

    Attributes:
        name: isl tuple name, unique in its Scop (e.g. ``"S3"``).
        iterators: iterator names, outermost first (isl names, e.g. ``("d0", "d1", "r0")``).
        extents: iterator ``n`` ranges over ``0 <= n < extent``.
        constraints: extra affine constraints in isl syntax (e.g. padding bounds
            ``"0 <= d1 + r0 - 1 < 32"``); they restrict the iteration domain.
        write: the element written.
        value: the value written (may read ``write`` itself: a reduction update).
        node: TensorFlow node the statement comes from.
        op: that node's op type (empty for a copy statement the schedules add).
        roles: the role of each iterator (:class:`IteratorRole`); left empty,
            :func:`derived_roles` of the iterators and the write (a copy statement over an
            anchor statement's iterators keeps their roles in the anchor).
        copy_kind: which copy statement of the schedules this is, None for the statement
            of a TensorFlow node.

    Raises:
        PolyhedralError: the iterators, extents and roles differ in number.
    """

    name: str
    iterators: tuple[str, ...]
    extents: tuple[int, ...]
    write: Access
    value: Expr
    constraints: tuple[str, ...] = ()
    node: str = ""
    op: str = ""
    roles: tuple[IteratorRole, ...] = ()
    copy_kind: CopyKind | None = None

    def __post_init__(self) -> None:
        if len(self.iterators) != len(self.extents):
            raise PolyhedralError(f"statement {self.name}: {len(self.iterators)} iterators but {len(self.extents)} extents")
        if not self.roles and self.iterators:
            object.__setattr__(self, "roles", derived_roles(self.iterators, self.write))
        elif len(self.roles) != len(self.iterators):
            raise PolyhedralError(f"statement {self.name} (node '{self.node}'): {len(self.iterators)} iterators but {len(self.roles)} roles")

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
        if context is not None:
            return _parse(isl.Set, self.domain_text, context, f"domain of statement {self.name} (node '{self.node}')")
        cached = self.__dict__.get("_domain")
        if cached is None:  # built once per statement (isl values are immutable)
            if self.constraints:
                cached = _parse(isl.Set, self.domain_text, None, f"domain of statement {self.name} (node '{self.node}')")
            else:  # a box: built directly, ten times faster than parsing its text
                cached = box_set(self.name, self.iterators, self.extents)
            object.__setattr__(self, "_domain", cached)
        return cached

    @property
    def reads(self) -> tuple[Access, ...]:
        return self.value.loads()

    @property
    def output_iterators(self) -> tuple[str, ...]:
        """The iterators whose role is :attr:`IteratorRole.OUTPUT`, in order (a lowered
        statement's leading iterators: the dimensions of the tensor written)."""
        return tuple(it for it, role in zip(self.iterators, self.roles) if role is IteratorRole.OUTPUT)

    @property
    def reduction_iterators(self) -> tuple[str, ...]:
        """The iterators whose role is :attr:`IteratorRole.REDUCTION`, in order."""
        return tuple(it for it, role in zip(self.iterators, self.roles) if role is IteratorRole.REDUCTION)

    @property
    def is_reduction(self) -> bool:
        """True when the body reads the element it writes (``C = C + ...``)."""
        return self.write in self.reads

    def access_map(self, access: Access, context: isl.Context | None = None) -> isl.Map:
        """Access relation ``{ S[iterators] -> array[index] }`` restricted to the domain
        (parsed once per access in the default context: isl values are immutable).

        Raises:
            PolyhedralError: isl cannot parse the relation (the message has its text).
        """
        if context is not None:
            return self._access_map(access, context)
        cache = self.__dict__.get("_access_maps")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_access_maps", cache)
        relation = cache.get(access)
        if relation is None:
            relation = cache[access] = self._access_map(access, None)
        return relation

    def _access_map(self, access: Access, context: isl.Context | None) -> isl.Map:
        relation = _parse(isl.Map, access.to_isl(self.name, self.iterators), context, f"access {access} of statement {self.name}")
        return relation.intersect_domain(self.domain(context))

    def __getstate__(self) -> dict:
        # without the cached isl domain and access maps (isl objects do not cross processes)
        return {name: value for name, value in self.__dict__.items() if not name.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def __str__(self) -> str:
        return f"{self.name}[{', '.join(self.iterators)}]: {self.write} = {self.value}"


def box_set(name: str, iterators: tuple[str, ...], extents: tuple[int, ...]) -> isl.Set:
    """``{ name[iterators] : 0 <= iterators[k] < extents[k] }`` in isl's default context,
    built with isl's API (the same set as parsing its text, without the parser; an extent
    of 0 gives the empty set)."""
    context = isl.DEFAULT_CONTEXT
    space = isl.Space.create_from_names(context, set=list(iterators)).set_tuple_name(isl.dim_type.set, name)
    result = isl.Set.universe(space)
    for position, extent in enumerate(extents):
        result = result.lower_bound_val(isl.dim_type.set, position, isl.Val.int_from_si(context, 0))
        result = result.upper_bound_val(isl.dim_type.set, position, isl.Val.int_from_si(context, int(extent) - 1))
    return result


def _parse(kind, text: str, context: isl.Context | None, what: str):
    try:
        return kind.read_from_str(context or isl.DEFAULT_CONTEXT, text)
    except isl.Error as error:
        raise PolyhedralError(f"isl rejected the {what}: {text} ({error})") from None
