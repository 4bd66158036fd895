"""Temporary elimination: fewer arrays between the statements of one kernel.

A fusion group is lowered node by node, so every fused node writes a whole tensor that the
next node reads back. A Conv2D + BiasAdd + Add + Relu group becomes::

    S0[d]:    T1[d] = 0                         (init of the accumulator)
    S1[d, r]: T1[d] = T1[d] + X[...] * W[...]   (the contraction)
    S2[d]:    T2[d] = T1[d] + bias[d3]          (BiasAdd)
    S3[d]:    T3[d] = R[d] + T2[d]              (Add: the residual)
    S4[d]:    Y[d]  = max(T3[d], 0)             (Relu)

Each temporary ``T1, T2, T3`` is as large as the output (25 MB for a ResNet50 stage-2
layer at batch 8): the kernel writes four tensors to memory where one is needed. Two
rewrites, applied until neither applies, remove them; both are the classic array
contractions of loop fusion (Allen & Kennedy, *Optimizing Compilers for Modern
Architectures*, 2001, §8.5 "scalar replacement" and §9.3 "array contraction"):

1. **Point-wise inlining.** A temporary ``T`` written by one statement ``P`` (no reduction,
   identity write ``T[d0..dn]`` over all of ``T``) and read at the identity index by one
   later statement ``C`` without reduction iterators: ``C`` evaluates ``P``'s body in
   place of the load (iterators renamed ``P.d_k -> C.d_k``), and ``P`` and ``T`` go. ``C``
   may read ``T`` more than once (swish ``x sigmoid(x)``, GELU ``x Phi(x)`` read their
   operand twice) when ``P``'s body is cheap (:func:`_cheap`: a BiasAdd, a scaling):
   evaluating a few additions twice costs less than writing and reading back a tensor
   the size of the output, and LLVM's common-subexpression elimination merges the copies
   anyway. An expensive body read twice (a ``sigmoid``) keeps its temporary.
   In isl terms the flow dependence ``{ P[d] -> C[d] }`` is the identity on the domain, so
   the value ``C`` reads at ``d`` is ``P``'s value at ``d``; inlining is legal when no
   statement between them writes an array ``P`` reads.
2. **Accumulating into the output.** A temporary written by an init statement (a constant
   over all of ``T``) and one reduction update, then read only at the identity index by a
   single point-wise statement ``E`` that writes an output ``O`` of the same shape that no
   other statement touches: the init and the update write ``O`` instead, and ``E`` becomes
   the in-place epilogue ``O[d] = f(O[d], ...)``.

The example becomes ``S0: Y = 0; S1: Y += X * W; S4: Y[d] = max(R[d] + (Y[d] + bias[d3]), 0)``
with no temporary at all. Array names are kept (a removed array leaves a gap in ``A0, A1,
...``); the Scop's fingerprint changes, as it should: it is a different kernel.
"""

from __future__ import annotations

from dataclasses import replace

from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, Modulo
from polytf.poly.expression import Access, Binary, Constant, Expr, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement

__all__ = ["eliminate_temporaries"]


def eliminate_temporaries(scop: Scop) -> Scop:
    """The Scop with its point-wise temporaries inlined and its accumulator written in place.

    Args:
        scop: a lowered fusion group (statements in program order).

    Returns:
        An equivalent Scop (same outputs for the same inputs, in float32 arithmetic as
        evaluated by :func:`polytf.poly.expression.evaluate`); ``scop`` itself when nothing
        applies.
    """
    while True:
        rewritten = _inline_one(scop) or _accumulate_one(scop)
        if rewritten is None:
            return scop
        scop = rewritten


def _writers(scop: Scop, array: str) -> list[int]:
    return [i for i, s in enumerate(scop.statements) if s.write.array == array]


def _readers(scop: Scop, array: str) -> list[int]:
    return [i for i, s in enumerate(scop.statements) if any(a.array == array for a in s.reads)]


def _identity(iterators: tuple[str, ...]) -> tuple[AffineExpr, ...]:
    return tuple(AffineExpr.of(it) for it in iterators)


def _pointwise_over(statement: Statement, info: ArrayInfo) -> bool:
    """Whether ``statement`` has one iterator per dimension of ``info`` (no reduction), no
    extra constraint, and extents equal to its shape."""
    return (
        not statement.reduction_iterators
        and not statement.constraints
        and statement.output_iterators == statement.iterators
        and tuple(statement.extents) == tuple(info.shape)
    )


def _inline_one(scop: Scop) -> Scop | None:
    for info in scop.arrays:
        if info.role != "temporary" or info.dtype != "float32":
            continue
        writers, readers = _writers(scop, info.name), _readers(scop, info.name)
        if len(writers) != 1 or len(readers) != 1 or readers[0] <= writers[0]:
            continue
        producer, consumer = scop.statements[writers[0]], scop.statements[readers[0]]
        if producer.is_reduction or not _pointwise_over(producer, info):
            continue
        if producer.write.index != _identity(producer.iterators):
            continue
        loads = [a for a in consumer.reads if a.array == info.name]
        if not loads or any(load != loads[0] for load in loads) or (len(loads) > 1 and not _cheap(producer.value)):
            continue
        if consumer.reduction_iterators or len(consumer.iterators) != len(info.shape):
            continue
        if tuple(consumer.extents) != tuple(info.shape) or loads[0].index != _identity(consumer.iterators):
            continue
        if scop.array(consumer.write.array).dtype != "float32":
            continue
        read_by_producer = {a.array for a in producer.reads}
        if consumer.write.array in read_by_producer:
            continue  # the consumer's earlier points would change what the inlined value reads
        between = scop.statements[writers[0] + 1 : readers[0]]
        if any(s.write.array in read_by_producer for s in between):
            continue
        renaming = dict(zip(producer.iterators, consumer.iterators))
        value = _rename_iterators(producer.value, renaming)
        merged = replace(consumer, value=_substitute(consumer.value, loads[0], value))
        statements = [merged if i == readers[0] else s for i, s in enumerate(scop.statements) if i != writers[0]]
        return _rebuilt(scop, statements, removed=info.name)
    return None


#: Operators a body evaluated more than once may use (:func:`_cheap`).
_CHEAP_OPERATORS = frozenset({"add", "sub", "mul", "max", "min"})
#: The most nodes (loads, constants, operators) such a body may have.
_CHEAP_NODES = 7


def _cheap(expr: Expr) -> bool:
    """Whether ``expr`` is a few additions and multiplications of loads and constants: what
    :func:`_inline_one` may evaluate once per read."""
    nodes = 0

    def visit(node: Expr) -> bool:
        nonlocal nodes
        nodes += 1
        if isinstance(node, (Load, Constant)):
            return True
        if not isinstance(node, Binary) or node.op not in _CHEAP_OPERATORS:
            return False
        return all(visit(child) for child in node.children())

    return visit(expr) and nodes <= _CHEAP_NODES


def _accumulate_one(scop: Scop) -> Scop | None:
    for info in scop.arrays:
        if info.role != "temporary":
            continue
        writers, readers = _writers(scop, info.name), _readers(scop, info.name)
        if len(writers) != 2:
            continue
        init, update = (scop.statements[i] for i in writers)
        if not isinstance(init.value, Constant) or not _pointwise_over(init, info):
            continue
        if init.write.index != _identity(init.iterators) or not update.is_reduction:
            continue
        if update.write.index != _identity(update.output_iterators):
            continue
        consumers = [i for i in readers if i != writers[1]]
        if len(consumers) != 1 or consumers[0] < writers[1]:
            continue
        epilogue = scop.statements[consumers[0]]
        output = scop.array(epilogue.write.array)
        if output.role != "output" or output.shape != info.shape or output.dtype != info.dtype:
            continue
        if not _pointwise_over(epilogue, info) or epilogue.write.index != _identity(epilogue.iterators):
            continue
        if any(a.index != _identity(epilogue.iterators) for a in epilogue.reads if a.array == info.name):
            continue
        if any(a.array == output.name for a in epilogue.reads):
            continue
        others = [s for i, s in enumerate(scop.statements) if i not in (*writers, consumers[0])]
        if any(s.write.array == output.name or any(a.array == output.name for a in s.reads) for s in others):
            continue
        touched = set(writers) | {consumers[0]}
        statements = [
            _rename_array(s, info.name, output.name) if i in touched else s for i, s in enumerate(scop.statements)
        ]
        return _rebuilt(scop, statements, removed=info.name)
    return None


def _rebuilt(scop: Scop, statements: list[Statement], removed: str) -> Scop:
    return Scop(scop.name, tuple(statements), tuple(a for a in scop.arrays if a.name != removed), scop.ops)


def _substitute(expr: Expr, access: Access, value: Expr) -> Expr:
    """``expr`` with every load of ``access`` replaced by ``value``."""
    if isinstance(expr, Load):
        return value if expr.access == access else expr
    return expr.map_children(lambda child: _substitute(child, access, value))


def _rename_iterators(expr: Expr, renaming: dict[str, str]) -> Expr:
    if isinstance(expr, Load):
        return Load(Access(expr.access.array, tuple(_rename_index(i, renaming) for i in expr.access.index)))
    return expr.map_children(lambda child: _rename_iterators(child, renaming))


def _rename_index(index, renaming: dict[str, str]):
    if isinstance(index, DynamicIndex):
        return index
    if isinstance(index, (FloorDiv, Modulo)):
        return type(index)(_rename_index(index.numerator, renaming), index.divisor)
    return AffineExpr.combine(*((coefficient, renaming.get(name, name)) for name, coefficient in index.terms), constant=index.constant)


def _rename_array_in(expr: Expr, old: str, new: str) -> Expr:
    if isinstance(expr, Load):
        return Load(Access(new, expr.access.index)) if expr.access.array == old else expr
    return expr.map_children(lambda child: _rename_array_in(child, old, new))


def _rename_array(statement: Statement, old: str, new: str) -> Statement:
    write = Access(new, statement.write.index) if statement.write.array == old else statement.write
    return replace(statement, write=write, value=_rename_array_in(statement.value, old, new))
