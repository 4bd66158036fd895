"""Micro-kernel emission: unroll-and-jam of a register tile with explicit vectors.

Below a ``microkernel`` mark the schedule builder places a band of reduction points and,
innermost, a band of register-tile points (:mod:`polytf.schedules.builder`)::

    for r...:                      reduction loops (kept as loops; the innermost unrolled
                                   MICROKERNEL_UNROLL times unless the recipe sets ``unroll``)
      for a in [A, A + Ra):        register-tile loops, constant trip counts
        for b in [B, B + Rb):
          S(a, b, r...)            W[a, b] = f(W[a, b], loads...)

This module emits it the way a hand-written BLAS micro-kernel is written (Goto & van de
Geijn, TOMS 2008; Low et al., "Analytical Modeling Is Enough for High-Performance BLIS",
TOMS 2016): the register-tile loops are fully unrolled and jammed into the reduction
loops; the innermost register dimension is cut into LLVM vectors of ``width`` lanes; the
``Ra * Rb / width`` accumulators are loaded before the reduction loops, kept in
registers (entry-block slots that SROA promotes), and stored after them. Each read is a
vector load (stride 1 along the vector lanes), a broadcast (stride 0) or a gather
(otherwise), decided at generation time from the addresses as affine expressions of the
loop iterators (:mod:`polytf.poly.affine`).

When the subtree does not have that shape (a guard, a bound that depends on a reduction
loop, a non-affine index), :func:`emit_microkernel` returns False and the generic
emitter handles it. A register tile that is only partly inside the domain (the last tile
of an extent that is not a multiple of it) is chosen at run time: cut short only in its
vector dimension, it runs with masked vectors (``llvm.masked.load``/``store``), or one
column at a time where a read is a gather; cut short elsewhere, it takes a generic copy
of the loops.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import llvmlite.ir as ir

from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr, FloorDiv, Modulo, affine_of_ast, index_affine, quotient_affine, substitute
from polytf.poly.expression import Binary, Compare, Constant, Expr, Load, Select, Unary
from polytf.poly.statement import Statement
from polytf.schedules.marks import MicrokernelMark, mark_of
from polytf.targets.math_functions import MATH_FUNCTIONS, math_function
from polytf.targets.statement_codegen import F32, I32, I64, MAXIMUM_FLAGS, float_comparison, with_flags

#: Unary ops emitted as LLVM vector intrinsics (exp, tanh, sigmoid, erf, erfc come from
#: :mod:`polytf.targets.math_functions`).
_VECTOR_INTRINSICS = {
    "sqrt": "llvm.sqrt",
    "abs": "llvm.fabs",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "round": "llvm.roundeven",
    "max": "llvm.maxnum",
    "maximum": "llvm.maximum",
    "minimum": "llvm.minimum",
    "min": "llvm.minnum",
}


#: Unroll count of the micro-kernel's innermost reduction loop when the recipe leaves
#: unrolling to polytf (``unroll`` 0; LLVM's unroller runs only where a loop asks for it,
#: :meth:`polytf.targets.cpu.CpuTarget.optimise`). Four iterations of the jammed register
#: tile per trip, as a hand-written BLAS micro-kernel unrolls its ``k`` loop (Goto & van de
#: Geijn, TOMS 2008), take the loop's increment, compare and branch out of three of every
#: four FMA groups. Measured against no unrolling on the default recipes (AMD EPYC
#: ``znver3``, 2 threads, caches flushed): ResNet50's 3x3 convolutions 10-14% faster,
#: its 1x1 products as MatMul 5-11%, MatMul 1024^3 3%; whole models in one process,
#: alternating blocks: ResNet50 b1 0.94x, MobileNetV2 b1 0.90x the time; outputs
#: bit-identical (the order of the sums is unchanged); compile time unchanged.
MICROKERNEL_UNROLL = 4


@dataclass(frozen=True)
class _RegisterLoop:
    iterator: str
    start: AffineExpr
    size: int


def _offset_symbol(position: int) -> str:
    """The name that stands for the offset of register loop ``position`` while an address
    is read once for every register point (:class:`_AddressPlan`); isl names AST
    iterators ``c0``, ``c1``..., and opaque values are ``%opaque<n>``, so it names nothing else."""
    return f"%register_offset{position}"


@dataclass(frozen=True)
class _ShiftedForm:
    """An affine expression of the register offsets ``o``: ``rest + sum(o[k] * deltas[k])``,
    where ``rest`` names no offset."""

    rest: AffineExpr
    deltas: tuple[int, ...]

    @staticmethod
    def split(expression: AffineExpr, registers: int) -> _ShiftedForm:
        """``expression`` over the offset symbols (:func:`_offset_symbol`) of ``registers``
        register loops, split into the symbols' coefficients and the rest."""
        symbols = {_offset_symbol(position): position for position in range(registers)}
        deltas = [0] * registers
        rest = []
        for name, coefficient in expression.terms:
            position = symbols.get(name)
            if position is None:
                rest.append((name, coefficient))
            else:
                deltas[position] = coefficient
        return _ShiftedForm(AffineExpr(tuple(rest), expression.constant), tuple(deltas))

    def at(self, offsets: tuple[int, ...]) -> AffineExpr:
        """The expression with each offset symbol replaced by its value. ``rest`` keeps the
        canonical form of ``expression`` without the symbols' terms (still sorted, still
        non-zero), so this is exactly what substituting the integers would build."""
        return AffineExpr(self.rest.terms, self.rest.constant + sum(offset * delta for offset, delta in zip(offsets, self.deltas)))


@dataclass(frozen=True)
class _QuotientIndex:
    """A floor division or modulo index of an access, its numerator over the offsets."""

    numerator: _ShiftedForm
    divisor: int
    floor: bool
    stride: int


@dataclass(frozen=True)
class _AddressPlan:
    """The offset form of one access at every register point, from one symbolic reading.

    The iterator forms at register offsets ``o`` are ``start_k + o[k]`` substituted into the
    call's arguments by :func:`affine_of_ast`. Read once with a symbol ``s_k`` per offset
    instead of the integer, every step of that reading (and of :func:`substitute`, and of
    the sum of ``index * stride``) is a sum or an integer multiple of affine expressions,
    which commutes with replacing ``s_k`` by ``o[k]``; the one step that branches, a product,
    takes the branch whose factor is constant symbolically, and a constant stays constant when
    the symbols get values (when instead the other factor becomes constant, both branches
    give the same constant). So when the symbolic reading succeeds, the form at ``o`` is the
    symbolic form with ``s_k = o[k]``, and canonical forms are unique, so it is the very
    expression the point-by-point reading builds. The affine indices thus contribute
    ``affine.at(o)``: a base plus ``sum(o[k] * delta_k)``.

    A floor division or modulo index is not linear in ``o`` (its quotient ``q`` jumps), but
    its numerator is: :func:`quotient_affine` is applied to the numerator at ``o`` when the
    lanes are computed, with the loop ranges of that moment, as the point-by-point reading
    does.
    """

    affine: _ShiftedForm
    quotients: tuple[_QuotientIndex, ...]

    @staticmethod
    def of(access, strides: tuple[int, ...], symbolic_forms: dict[str, AffineExpr], registers: int) -> _AddressPlan | None:
        """The plan of ``access`` from the iterator forms over the offset symbols, or None
        when an index is neither affine nor a floor division or modulo (a dynamic index)."""
        total = AffineExpr()
        quotients = []
        for index, stride in zip(access.index, strides):
            if isinstance(index, AffineExpr):
                total = total + substitute(index, symbolic_forms) * stride
            elif isinstance(index, (FloorDiv, Modulo)):
                numerator = _ShiftedForm.split(substitute(index.numerator, symbolic_forms), registers)
                quotients.append(_QuotientIndex(numerator, index.divisor, isinstance(index, FloorDiv), stride))
            else:
                return None
        return _AddressPlan(_ShiftedForm.split(total, registers), tuple(quotients))

    def lane_forms(self, point: tuple[int, ...], width: int, range_of) -> list[AffineExpr | None]:
        """The offset forms of the ``width`` lanes of the vector at register point ``point``
        (lane ``l`` is at the offsets of ``point`` with ``l`` added to the last one), each
        None where a floor division or modulo is not affine there, as
        :meth:`_Microkernel._offset_form` answers. Adding ``l`` to the last offset adds
        ``l * deltas[-1]`` to a shifted form's constant (:meth:`_ShiftedForm.at`)."""
        affine = self.affine.at(point)
        numerators = [quotient.numerator.at(point) for quotient in self.quotients]
        result: list[AffineExpr | None] = []
        for lane in range(width):
            total = AffineExpr(affine.terms, affine.constant + lane * self.affine.deltas[-1])
            for quotient, numerator in zip(self.quotients, numerators):
                shifted = AffineExpr(numerator.terms, numerator.constant + lane * quotient.numerator.deltas[-1])
                form = quotient_affine(shifted, quotient.divisor, quotient.floor, range_of)
                if form is None:
                    total = None
                    break
                total = total + form * quotient.stride
            result.append(total)
        return result


def _register_tiles(mark: isl.AstNode) -> list[tuple[int, str]]:
    """``(size, statement iterator)`` of each register loop, from the node's MicrokernelMark."""
    decoded = mark_of(mark)
    if not isinstance(decoded, MicrokernelMark):
        return []
    return list(zip(decoded.register_sizes, decoded.iterators))


def _trip_form(loop: isl.AstNode) -> tuple[AffineExpr, AffineExpr, isl.AstExpr] | None:
    """``(start, trip count, upper bound expression)``; the trip count is an affine
    expression when the bound is affine, else the bound is returned for a run-time check."""
    iterator = loop.for_get_iterator().get_id().get_name()
    increment = affine_of_ast(loop.for_get_inc(), {})
    start = affine_of_ast(loop.for_get_init(), {})
    if increment is None or increment != AffineExpr.of(1) or start is None:
        return None
    condition = loop.for_get_cond()
    if condition.get_type() != isl.ast_expr_type.op:
        return None
    op = condition.op_get_type()
    T = isl.ast_expr_op_type
    if op not in (T.le, T.lt) or condition.op_get_arg(0).get_type() != isl.ast_expr_type.id:
        return None
    if condition.op_get_arg(0).id_get_id().get_name() != iterator:
        return None
    upper = condition.op_get_arg(1)
    bound = affine_of_ast(upper, {})
    if bound is None:
        return start, None, upper
    trip = bound - start + (1 if op == T.le else 0)
    return start, trip, upper


def _identifiers(expression: isl.AstExpr) -> set[str]:
    """Names of the identifiers (loop iterators, parameters) an isl AST expression reads."""
    kind = expression.get_type()
    if kind == isl.ast_expr_type.id:
        return {expression.id_get_id().get_name()}
    if kind != isl.ast_expr_type.op:
        return set()
    names: set[str] = set()
    for index in range(expression.op_get_n_arg()):
        names |= _identifiers(expression.op_get_arg(index))
    return names


def _arithmetic(expression: Expr) -> bool:
    """Whether a body is float arithmetic only (loads, float constants, unary and binary
    operators, and a selection between two of them on a comparison of two of them: a max
    pooling's ``select(greater(x, acc), x, acc)``), which :meth:`_Microkernel._value` emits
    on vectors."""
    if isinstance(expression, Select):
        condition = expression.condition
        return isinstance(condition, Compare) and all(_arithmetic(child) for child in (condition.lhs, condition.rhs, expression.then, expression.otherwise))
    if isinstance(expression, Constant) and expression.dtype != "float32":
        return False
    return isinstance(expression, (Load, Constant, Unary, Binary)) and all(_arithmetic(child) for child in expression.children())


@dataclass(frozen=True)
class _PointNest:
    """A loop nest over one register tile's points around one statement, as isl generates
    the zero fill and the epilogue of :func:`polytf.schedules.builder.register_tile_run`
    beside the micro-kernel: ``node`` (the outermost loop), the statement, the call's
    arguments and the register loops (this nest's iterators, the micro-kernel's starts)."""

    node: isl.AstNode
    statement: Statement
    arguments: tuple[isl.AstExpr, ...]
    registers: tuple[_RegisterLoop, ...]


def _same_header(loop: isl.AstNode, register: isl.AstNode) -> bool:
    """Whether two loops run the same values: equal start, step and bound, up to the name of
    their iterator (the bound expressions are compared as C text)."""
    condition, other = loop.for_get_cond(), register.for_get_cond()
    if condition.get_type() != isl.ast_expr_type.op or other.get_type() != isl.ast_expr_type.op:
        return False
    return (
        condition.op_get_type() == other.op_get_type()
        and loop.for_get_init().to_C_str() == register.for_get_init().to_C_str()
        and loop.for_get_inc().to_C_str() == register.for_get_inc().to_C_str()
        and condition.op_get_arg(1).to_C_str() == other.op_get_arg(1).to_C_str()
    )


def _point_nest(generator, node: isl.AstNode, register_nodes: list[isl.AstNode], registers: list[_RegisterLoop]) -> _PointNest | None:
    """``node`` as a :class:`_PointNest` over the register loops ``register_nodes``, or None."""
    loops = []
    while node.get_type() == isl.ast_node_type.for_ and len(loops) < len(register_nodes):
        loops.append(node)
        node = node.for_get_body()
    if len(loops) != len(register_nodes) or node.get_type() != isl.ast_node_type.user:
        return None
    if not all(_same_header(loop, register) for loop, register in zip(loops, register_nodes)):
        return None
    call = node.user_get_expr()
    statement = generator.statements.get(call.op_get_arg(0).id_get_id().get_name())
    arguments = tuple(call.op_get_arg(i + 1) for i in range(call.op_get_n_arg() - 1))
    if statement is None or len(arguments) != len(statement.iterators) or not _arithmetic(statement.value):
        return None
    nest_registers = tuple(_RegisterLoop(loop.for_get_iterator().get_id().get_name(), r.start, r.size) for loop, r in zip(loops, registers))
    return _PointNest(loops[0], statement, arguments, nest_registers)


def emit_register_tile_run(generator, children: list[isl.AstNode], position: int, env: dict[str, ir.Value]) -> int:
    """Emit, from ``children[position]`` of an AST block, a micro-kernel with the point nests
    beside it in the same register tile (:func:`polytf.schedules.builder.register_tile_run`):
    a zero fill of its accumulators just before it becomes their initial value in registers,
    the epilogue statements just after it are computed on the registers before the one store
    of each element they write (as a BLAS micro-kernel applies its post-ops: bias, activation,
    residual add), where before each nest swept the tile's block through memory.

    Returns how many children were emitted (0: nothing here to fuse, nothing emitted).
    Partial tiles (the last of an extent that is not a multiple of the register tile) keep the
    fusion too: a tile cut short in its rows runs a micro-kernel with fewer rows, one cut short
    in its vector dimension runs masked, the epilogues' reads masked alike (MobileNetV2's
    144 -> 24 projections at batch 8 on AVX-512: its zero fill had been a ``memset`` per row and
    its residual add a second sweep of the output). Where a cut-short tile cannot run as a
    micro-kernel (a gather in an epilogue, a guarded domain) the nests run as loops around it.
    """
    index = position
    prologue_node = None
    if children[index].get_type() != isl.ast_node_type.mark:
        prologue_node = children[index]
        index += 1
    if index >= len(children) or children[index].get_type() != isl.ast_node_type.mark or not isinstance(mark_of(children[index]), MicrokernelMark):
        return 0
    mark = children[index]
    following = children[index + 1 :]
    if prologue_node is None and not following:
        return 0
    return emit_microkernel(generator, mark, env, prologue_node, following) or 0


def emit_microkernel(generator, mark: isl.AstNode, env: dict[str, ir.Value], prologue_node: isl.AstNode | None = None, following: list[isl.AstNode] = ()) -> int:
    """Emit the micro-kernel under ``mark`` with ``generator`` (a KernelModuleBuilder); with
    ``prologue_node`` (the AST node before the mark) and ``following`` (those after it), as
    :func:`emit_register_tile_run` describes.

    Returns the number of AST nodes emitted (the mark, plus the prologue and epilogue nests
    fused with it), or 0 (having emitted nothing) when the subtree does not have the expected
    shape or, with ``prologue_node`` or ``following``, when there is nothing to fuse.
    """
    tiles = _register_tiles(mark)
    sizes = [size for size, _ in tiles]
    loops = []
    node = mark.mark_get_node()
    while node.get_type() == isl.ast_node_type.for_:
        loops.append(node)
        node = node.for_get_body()
    if not sizes or node.get_type() != isl.ast_node_type.user or len(loops) < len(sizes):
        return 0
    reduction_loops, register_nodes = loops[: len(loops) - len(sizes)], loops[len(loops) - len(sizes) :]
    reduction_names = {loop.for_get_iterator().get_id().get_name() for loop in reduction_loops}
    register_names = {loop.for_get_iterator().get_id().get_name() for loop in register_nodes}
    tile_names = reduction_names | register_names
    registers: list[_RegisterLoop] = []
    runtime_checks = []
    constant_short_vector = False  # the vector dimension's trip is a constant below its size
    for register_index, (loop, size) in enumerate(zip(register_nodes, sizes)):
        vector_dimension = register_index == len(sizes) - 1
        shape = _trip_form(loop)
        if shape is None:
            return 0
        start, trip, upper = shape
        # A start or bound that names an iterator inside the tile, such as min(6*c4 + 5,
        # 111 - c7/2) (a strided convolution whose padding taps are cut from the domain),
        # changes the tile's row count inside the reduction, which a register tile cannot follow.
        if set(start.iterators) & tile_names or _identifiers(upper) & tile_names:
            return 0
        if trip is not None:
            if trip != AffineExpr.of(size):
                if trip.is_constant and not (vector_dimension and 0 < trip.constant < size):
                    return 0  # a constant short count outside the vector dimension: the generic loops
                constant_short_vector = trip.is_constant
                runtime_checks.append((len(registers), start, trip, None, size))
        else:
            runtime_checks.append((len(registers), start, None, upper, size))
        registers.append(_RegisterLoop(loop.for_get_iterator().get_id().get_name(), start, size))

    call = node.user_get_expr()
    statement = generator.statements.get(call.op_get_arg(0).id_get_id().get_name())
    if statement is None:
        return 0
    arguments = [call.op_get_arg(i + 1) for i in range(call.op_get_n_arg() - 1)]
    if len(arguments) != len(statement.iterators):
        return 0
    write = statement.write
    if any(access.array == write.array and access != write for access in statement.value.loads()):
        return 0
    if not _arithmetic(statement.value):
        return 0  # logic, conversions, gathers and integer values go to the generic emitter

    # isl drops loops of one iteration: each register loop must be the one that runs its
    # statement iterator, or the subtree is not the expected micro-kernel.
    for (_, name), register in zip(tiles, registers):
        position = statement.iterators.index(name) if name in statement.iterators else -1
        if position < 0 or affine_of_ast(arguments[position], {}) != AffineExpr.of(register.iterator):
            return 0

    emitter = _Microkernel(generator, statement, arguments, registers, reduction_loops, env)
    if not emitter.analyse():
        return 0
    if constant_short_vector and not (emitter.width > 1 and emitter.maskable()):
        # every tile is cut short and would run column by column: the generic loops instead.
        # (Column loops of a max reduction over 9 elements (Softmax's row maximum, a register
        # tile of 16 rows over 5) were vectorised by LLVM 22 into a loop whose only exit is
        # finding a NaN: a kernel that never returned.)
        return 0
    initial, prologue, epilogues = _fused_nests(generator, emitter, register_nodes, prologue_node, following, env)
    if prologue_node is not None and prologue is None:
        return 0  # the node before the mark is not its zero fill: the caller emits it, then the mark
    if following and prologue is None and not epilogues:
        return 0
    emitted = 1 + (prologue is not None) + len(epilogues)

    def loops_before() -> None:
        if prologue is not None:
            generator._emit_node(prologue.node, env)

    def loops_after() -> None:
        for epilogue in epilogues:
            generator._emit_node(epilogue.statement_nest.node, env)

    if not runtime_checks:
        emitter.emit(initial, epilogues)
        return emitted
    b = generator.builder
    full_others = ir.Constant(ir.IntType(1), 1)
    full_last = ir.Constant(ir.IntType(1), 1)
    last_count = None
    short_rows = []  # (register index, run-time count) of the other register dimensions checked
    for index, start, trip, upper, size in runtime_checks:
        if trip is not None:
            count = generator.materialize(trip, env)
        else:
            count = b.add(b.sub(generator._expression(upper, env), generator.materialize(start, env)), ir.Constant(I64, 1))
        check = b.icmp_signed("==", count, ir.Constant(I64, size))
        if index == len(registers) - 1:
            full_last = check
            last_count = count
        else:
            full_others = b.and_(full_others, check)
            short_rows.append((index, count))

    # The zero fill and the epilogues stay fused (in registers) in a cut-short tile too when
    # every vector access of the epilogues can be masked; else they run as loops around it.
    fused_masked = all(epilogue.maskable() for epilogue in epilogues)

    def cut_short_last(tile: _Microkernel) -> None:
        """A tile whose other register dimensions are whole and whose last (vector)
        dimension is cut short: masked vectors when every access allows them, else one
        column at a time, else ``generic()``."""
        if last_count is not None and tile.width > 1 and tile.maskable():
            if fused_masked:
                _emit_masked(tile, last_count, initial, epilogues)
                return
            loops_before()
            _emit_masked(tile, last_count)
            loops_after()
            return
        column, offset = _column_emitter(generator, statement, tile.arguments, tile.registers, reduction_loops, env)
        if column is None:
            generic()
            return
        loops_before()
        _emit_columns(generator, register_nodes[-1], column, offset, env)
        loops_after()

    def whole_last(tile: _Microkernel) -> None:
        """A tile whose last (vector) dimension is whole (its rows may be cut short)."""
        tile.emit(initial, epilogues)

    def generic() -> None:
        loops_before()
        generator._emit_node(mark.mark_get_node(), env)
        loops_after()

    with b.if_else(b.and_(full_others, full_last)) as (then, otherwise):
        with then:
            emitter.emit(initial, epilogues)
        with otherwise:
            # A tile cut short only in its last (vector) dimension, the usual case of an
            # extent that is not a multiple of the vector width: masked vectors (or columns).
            # A tile cut short in one other dimension (the last rows of a convolution's
            # output width, say 14 = 12 + 2): an unrolled micro-kernel with that many rows,
            # as BLIS handles edge cases with smaller micro-kernels (see _emit_short_rows).
            with b.if_else(full_others) as (rows_whole, rows_short):
                with rows_whole:
                    cut_short_last(emitter)
                with rows_short:
                    if len(short_rows) == 1:
                        row_iterator = tiles[short_rows[0][0]][1]
                        extent = statement.extents[statement.iterators.index(row_iterator)]
                        _emit_short_rows(emitter, short_rows[0], extent, full_last, whole_last, cut_short_last, generic)
                    else:
                        generic()
    return emitted


def _fused_nests(generator, emitter: _Microkernel, register_nodes, prologue_node, following, env):
    """``(initial value, prologue nest, epilogue emitters)`` that the micro-kernel of
    ``emitter`` takes over: a prologue nest writing a float constant to exactly the
    accumulators' elements (its value becomes their start), and the longest run of the
    ``following`` nests whose statements read the elements written by the micro-kernel or an
    earlier epilogue only at the index written, each with the micro-kernel's vector width."""
    registers = list(emitter.registers)
    initial, prologue = None, None
    if prologue_node is not None:
        nest = _point_nest(generator, prologue_node, register_nodes, registers)
        if nest is not None and nest.statement.write == emitter.statement.write and isinstance(nest.statement.value, Constant) and _argument_text(nest) == _same_arguments(nest, emitter):
            initial, prologue = float(nest.statement.value.value), nest
    written = {emitter.statement.write.array: emitter.statement.write}
    epilogues = []
    for node in following:
        nest = _point_nest(generator, node, register_nodes, registers)
        if nest is None or _argument_text(nest) != _same_arguments(nest, emitter):
            break
        accesses = (nest.statement.write,) + nest.statement.value.loads()
        if any(access.array in written and access != written[access.array] for access in accesses):
            break
        if nest.statement.write.array in written and nest.statement.write != written[nest.statement.write.array]:
            break
        if nest.statement.write not in written.values() and nest.statement.write in accesses[1:]:
            break  # it accumulates into an element the tile did not compute: kept in memory
        epilogue = _Microkernel(generator, nest.statement, nest.arguments, nest.registers, [], env)
        if not epilogue.analyse() or epilogue.width != emitter.width:
            break
        epilogue.statement_nest = nest
        written[nest.statement.write.array] = nest.statement.write
        epilogues.append(epilogue)
    return initial, prologue, epilogues


def _argument_text(nest: _PointNest) -> tuple[str, ...]:
    return tuple(argument.to_C_str() for argument in nest.arguments)


def _same_arguments(nest: _PointNest, emitter: _Microkernel) -> tuple:
    """The arguments ``nest``'s call must have to run the statement iterators the micro-kernel
    runs at the same point: the micro-kernel's, its register iterators renamed to the nest's.
    Compared as C text (isl AST expressions have no structural equality in islpy)."""
    renamed = {register.iterator: own.iterator for register, own in zip(emitter.registers, nest.registers)}
    expected = []
    for name in nest.statement.iterators:
        if name not in emitter.statement.iterators:
            return ()
        text = emitter.arguments[emitter.statement.iterators.index(name)].to_C_str()
        expected.append(renamed.get(text, text))
    return tuple(expected)


def _emit_short_rows(
    emitter: _Microkernel, short_row: tuple[int, ir.Value], extent: int, full_last: ir.Value, whole_last, cut_short_last, generic
) -> None:
    """The tile cut short in register dimension ``index`` (run-time row count ``count``,
    ``1 <= count < size``) gets a micro-kernel of its own with that many rows (fully
    unrolled, accumulators in registers); its last dimension may also be cut short.

    Register tiles start at multiples of their size (a cache tile is a multiple of the
    register tile), so on a box domain of extent ``E`` the one short count is
    ``E mod size``: that count gets the variant, any other (a guarded domain) the generic
    loops, which keeps code size and compile time at one extra micro-kernel."""
    b = emitter.g.builder
    index, count = short_row
    rows = extent % emitter.registers[index].size
    registers = list(emitter.registers)
    registers[index] = _RegisterLoop(registers[index].iterator, registers[index].start, rows)
    tile = _Microkernel(emitter.g, emitter.statement, emitter.arguments, registers, emitter.reduction_loops, emitter.env, emitter.form_cache)
    if not rows or not tile.analyse():
        generic()
        return
    with b.if_else(b.icmp_signed("==", count, ir.Constant(I64, rows))) as (this, other):
        with this:
            with b.if_else(full_last) as (whole, short):
                with whole:
                    whole_last(tile)
                with short:
                    cut_short_last(tile)
        with other:
            generic()


def _emit_masked(emitter: _Microkernel, count: ir.Value, initial: float | None = None, epilogues: list[_Microkernel] = ()) -> None:
    """The register tile with only ``count`` (run time, ``0 < count < size``) valid columns
    in its vector dimension: one variant per number of vectors that hold valid columns
    (``ceil(count / width)``), each with its last vector masked (``llvm.masked.load`` and
    ``llvm.masked.store``, LLVM Language Reference), so no lane outside the tile is read or
    written and no work is spent on vectors that are wholly outside. ``initial`` and
    ``epilogues`` as :meth:`_Microkernel.emit` (the epilogues' reads masked the same way:
    each must be :meth:`_Microkernel.maskable`)."""
    b = emitter.g.builder
    width = emitter.width
    vectors = emitter.registers[-1].size // width
    lanes = b.trunc(count, I32)
    used = b.udiv(b.add(count, ir.Constant(I64, width - 1)), ir.Constant(I64, width))

    def variant(active: int) -> None:
        emitter.masking = (lanes, active)
        try:
            emitter.emit(initial, epilogues)
        finally:
            emitter.masking = None

    def chain(active: int) -> None:
        if active == vectors:
            variant(active)
            return
        with b.if_else(b.icmp_unsigned("==", used, ir.Constant(I64, active))) as (this, other):
            with this:
                variant(active)
            with other:
                chain(active + 1)

    chain(1)


def _column_emitter(generator, statement, arguments, registers, reduction_loops, env):
    """The micro-kernel of one column ``start + t`` of a cut-short tile (``t`` in
    ``[0, size)``, a loop of its own), or None when its addresses are not affine."""
    last = registers[-1]
    offset = generator.opaque_name()
    column = _RegisterLoop(last.iterator, last.start + AffineExpr.of(offset), 1)
    generator.loop_ranges[offset] = (0, last.size - 1)
    emitter = _Microkernel(generator, statement, arguments, registers[:-1] + [column], reduction_loops, env)
    return (emitter, offset) if emitter.analyse() else (None, offset)


def _emit_columns(generator, loop, emitter, offset, env) -> None:
    b = generator.builder
    start = generator._expression(loop.for_get_init(), env)

    def body(inner) -> None:
        emitter.env = inner
        emitter.emit()

    # t runs from 0 while start + t satisfies the loop's own condition
    iterator = loop.for_get_iterator().get_id().get_name()

    def condition(inner):
        shifted = dict(inner)
        shifted[iterator] = b.add(start, inner[offset])
        return generator._expression(loop.for_get_cond(), shifted)

    generator.emit_loop(offset, ir.Constant(I64, 0), ir.Constant(I64, 1), condition, env, body)


class _Microkernel:
    def __init__(self, generator, statement, arguments, registers, reduction_loops, env, form_cache: dict | None = None) -> None:
        self.g = generator
        #: (access, point) -> the lanes' address forms; shared with the variants of a cut-short
        #: tile (same starts, fewer points), whose forms are a subset of the full tile's
        self.form_cache = {} if form_cache is None else form_cache
        self.statement = statement
        self.arguments = arguments
        self.registers = registers
        self.reduction_loops = reduction_loops
        self.reduction_names = [loop.for_get_iterator().get_id().get_name() for loop in reduction_loops]
        self.env = env
        self.width = 1
        self.points: list[tuple[int, ...]] = []
        #: (valid lanes as i32, vectors emitted) while a cut-short tile is emitted masked
        self.masking: tuple[ir.Value, int] | None = None
        #: access -> its _AddressPlan (None: read point by point)
        self._address_plans: dict = {}
        #: element -> its value in registers at the point being emitted (an epilogue's reads of
        #: what the micro-kernel or an earlier epilogue computed)
        self.held: dict = {}
        #: the AST nest this emitter stands for, when it is an epilogue (:func:`_fused_nests`)
        self.statement_nest: _PointNest | None = None

    # -- analysis ------------------------------------------------------------------------
    def _iterator_forms(self, offsets: tuple[int, ...]) -> dict[str, AffineExpr] | None:
        forms = {r.iterator: r.start + offset for r, offset in zip(self.registers, offsets)}
        result = {}
        for name, argument in zip(self.statement.iterators, self.arguments):
            form = affine_of_ast(argument, forms)
            if form is None:
                return None
            result[name] = form
        return result

    def _offset_form(self, access, iterator_forms: dict[str, AffineExpr]) -> AffineExpr | None:
        strides = self.g.strides[access.array]
        total = AffineExpr()
        for index, stride in zip(access.index, strides):
            form = index_affine(index, iterator_forms, self.g._range_of)
            if form is None:
                return None
            total = total + form * stride
        return total

    def analyse(self) -> bool:
        """Check addresses are affine; pick the vector width."""
        zero = tuple(0 for _ in self.registers)
        forms = self._iterator_forms(zero)
        if forms is None:
            return False
        accesses = (self.statement.write,) + self.statement.value.loads()
        for access in accesses:
            if self._offset_form(access, forms) is None:
                return False
        write_form = self._offset_form(self.statement.write, forms)
        if set(write_form.iterators) & set(self.reduction_names):
            return False  # the accumulator would move inside the reduction loops
        last = self.registers[-1].size
        requested = self.g.vector_width if self.g.vector_width > 0 else self.g.native_vector_width
        width = 1
        for candidate in (16, 8, 4, 2):
            if candidate <= requested and last % candidate == 0:
                width = candidate
                break
        if width > 1:
            step = tuple(0 for _ in self.registers[:-1]) + (1,)
            next_forms = self._iterator_forms(step)
            if next_forms is None or self._offset_form(self.statement.write, next_forms) - write_form != AffineExpr.of(1):
                width = 1
        self.width = width
        ranges = [range(r.size) for r in self.registers[:-1]] + [range(0, last, width)]
        self.points = list(itertools.product(*ranges))
        return True

    def maskable(self) -> bool:
        """Whether every read is a contiguous vector or a broadcast along the vector lanes
        (a gather has no masked form here), so that a cut-short tile can run masked."""
        zero = tuple(0 for _ in self.registers)
        for access in self.statement.value.loads():
            lanes = self._lane_forms(access, zero)
            differences = {lanes[i + 1] - lanes[i] for i in range(self.width - 1)}
            if differences not in ({AffineExpr.of(1)}, {AffineExpr()}):
                return False
        return True

    # -- emission ------------------------------------------------------------------------
    def _active_points(self) -> list[tuple[int, ...]]:
        if self.masking is None:
            return self.points
        _, active = self.masking
        return [point for point in self.points if point[-1] < active * self.width]

    def _mask(self, point: tuple[int, ...]) -> ir.Value | None:
        """``<width x i1>``: lane ``l`` of the vector at ``point`` is inside the tile, or None
        when every lane is (not masking, or a vector before the last used one)."""
        if self.masking is None:
            return None
        lanes, active = self.masking
        first = point[-1]
        if first < (active - 1) * self.width:
            return None
        b = self.g.builder
        vector_i32 = ir.VectorType(I32, self.width)
        splat = b.insert_element(ir.Constant(vector_i32, ir.Undefined), lanes, ir.Constant(I32, 0))
        splat = b.shuffle_vector(splat, ir.Constant(vector_i32, ir.Undefined), ir.Constant(vector_i32, [0] * self.width))
        return b.icmp_signed(">", splat, ir.Constant(vector_i32, [first + lane for lane in range(self.width)]))

    def _masked_intrinsic(self, kind: str) -> ir.Function:
        vector = self.vector_type
        mask = ir.VectorType(ir.IntType(1), self.width)
        name = f"llvm.masked.{kind}.v{self.width}f32.p0"
        if kind == "load":
            return self.g._declare(name, vector, [vector.as_pointer(), I32, mask, vector])
        return self.g._declare(name, ir.VoidType(), [vector, vector.as_pointer(), I32, mask])

    def _vector_load(self, pointer: ir.Value, mask: ir.Value | None) -> ir.Value:
        b = self.g.builder
        if mask is None:
            return b.load(pointer, align=4)
        passthru = ir.Constant(self.vector_type, [0.0] * self.width)
        return b.call(self._masked_intrinsic("load"), [pointer, ir.Constant(I32, 4), mask, passthru])

    def _vector_store(self, value: ir.Value, pointer: ir.Value, mask: ir.Value | None) -> None:
        b = self.g.builder
        if mask is None:
            b.store(value, pointer, align=4)
        else:
            b.call(self._masked_intrinsic("store"), [value, pointer, ir.Constant(I32, 4), mask])

    @property
    def vector_type(self) -> ir.Type:
        return F32 if self.width == 1 else ir.VectorType(F32, self.width)

    def _pointer(self, array: str, form: AffineExpr, env) -> ir.Value:
        return self.g.builder.gep(self.g.pointers[array], [self.g.materialize(form, env)], inbounds=True)

    def _lane_forms(self, access, point: tuple[int, ...]) -> list[AffineExpr]:
        key = (access, point, self.width)
        cached = self.form_cache.get(key)
        if cached is None:
            cached = self.form_cache[key] = self._compute_lane_forms(access, point)
        return cached

    def _compute_lane_forms(self, access, point: tuple[int, ...]) -> list[AffineExpr]:
        plan = self._address_plan(access)
        if plan is not None:
            return plan.lane_forms(point, self.width, self.g._range_of)
        result = []
        for lane in range(self.width):
            offsets = point[:-1] + (point[-1] + lane,)
            result.append(self._offset_form(access, self._iterator_forms(offsets)))
        return result

    def _address_plan(self, access) -> _AddressPlan | None:
        """The access's offsets at every register point from one symbolic reading, or None
        when the arguments or an index are not affine in the offset symbols (then each
        point is read on its own, as before)."""
        if access not in self._address_plans:
            forms = self._symbolic_iterator_forms
            plan = None if forms is None else _AddressPlan.of(access, self.g.strides[access.array], forms, len(self.registers))
            self._address_plans[access] = plan
        return self._address_plans[access]

    @functools.cached_property
    def _symbolic_iterator_forms(self) -> dict[str, AffineExpr] | None:
        """:meth:`_iterator_forms` with register loop ``k`` at ``start + s_k`` (the symbol
        :func:`_offset_symbol`) instead of ``start + offset``; None when an argument is not
        affine then (a product of two register iterators, say: the point-by-point reading
        may still find it affine at each point)."""
        symbols = {r.iterator: r.start + AffineExpr.of(_offset_symbol(position)) for position, r in enumerate(self.registers)}
        forms = {}
        for name, argument in zip(self.statement.iterators, self.arguments):
            form = affine_of_ast(argument, symbols)
            if form is None:
                return None
            forms[name] = form
        return forms

    def _write_pointer(self, point) -> ir.Value:
        """The (vector) pointer to the element this statement writes at register point ``point``."""
        form = self._lane_forms(self.statement.write, point)[0]
        pointer = self._pointer(self.statement.write.array, form, self.env)
        return self.g.builder.bitcast(pointer, self.vector_type.as_pointer()) if self.width > 1 else pointer

    def emit(self, initial: float | None = None, epilogues: list[_Microkernel] = ()) -> None:
        """The micro-kernel: accumulators loaded (or set to ``initial``), the reduction loops,
        then each of ``epilogues`` (statements over the same points, :func:`_fused_nests`)
        computed on the accumulators, and one store per element written."""
        g = self.g
        b = g.builder
        slots = []
        write_pointers = []
        points = self._active_points()
        masks = {point: self._mask(point) for point in points}
        for point in points:
            pointer = self._write_pointer(point)
            slot = g.alloca(self.vector_type, name="accumulator")
            start = self._vector_load(pointer, masks[point]) if initial is None else self._splat(ir.Constant(F32, initial))
            b.store(start, slot)
            slots.append(slot)
            write_pointers.append(pointer)

        def body(env) -> None:
            cache: dict = {}
            for point, slot in zip(points, slots):
                accumulator = b.load(slot)
                value = self._value(self.statement.value, point, env, accumulator, cache, masks[point])
                b.store(value, slot)

        self._emit_reduction_loops(0, self.env, body)
        if not epilogues:
            for point, slot, pointer in zip(points, slots, write_pointers):
                self._vector_store(b.load(slot), pointer, masks[point])
            return
        # element written -> (its statement's emitter, value per point), in order of first write
        held = {self.statement.write: (self, [b.load(slot) for slot in slots])}
        for epilogue in epilogues:
            values = []
            for index, point in enumerate(points):
                epilogue.held = {access: point_values[index] for access, (_, point_values) in held.items()}
                values.append(epilogue._value(epilogue.statement.value, point, epilogue.env, None, {}, masks[point]))
            epilogue.held = {}
            held[epilogue.statement.write] = (epilogue, values)
        for owner, values in held.values():
            for point, value in zip(points, values):
                owner._vector_store(value, owner._write_pointer(point), masks[point])

    def _emit_reduction_loops(self, level: int, env, body) -> None:
        if level == len(self.reduction_loops):
            body(env)
            return
        loop = self.reduction_loops[level]
        g = self.g
        iterator = loop.for_get_iterator().get_id().get_name()
        start = g._expression(loop.for_get_init(), env)
        step = g._expression(loop.for_get_inc(), env)
        g.emit_loop(
            iterator,
            start,
            step,
            lambda inner: g._expression(loop.for_get_cond(), inner),
            env,
            lambda inner: self._emit_reduction_loops(level + 1, inner, body),
            innermost=level + 1 == len(self.reduction_loops),
            unroll=MICROKERNEL_UNROLL if g.unroll == 0 else None,
        )

    def _splat(self, scalar: ir.Value) -> ir.Value:
        if self.width == 1:
            return scalar
        b = self.g.builder
        vector = b.insert_element(ir.Constant(self.vector_type, ir.Undefined), scalar, ir.Constant(I32, 0))
        return b.shuffle_vector(vector, ir.Constant(self.vector_type, ir.Undefined), ir.Constant(ir.VectorType(I32, self.width), [0] * self.width))

    def _load(self, access, point, env, cache, mask=None) -> ir.Value:
        b = self.g.builder
        lanes = self._lane_forms(access, point)
        key = (access.array, tuple(lanes))
        if key in cache:
            return cache[key]
        if self.width == 1:
            value = b.load(self._pointer(access.array, lanes[0], env), align=4)
        else:
            differences = {lanes[i + 1] - lanes[i] for i in range(self.width - 1)}
            if differences == {AffineExpr.of(1)}:
                pointer = b.bitcast(self._pointer(access.array, lanes[0], env), self.vector_type.as_pointer())
                value = self._vector_load(pointer, mask)
            elif differences == {AffineExpr()}:
                value = self._splat(b.load(self._pointer(access.array, lanes[0], env), align=4))
            else:
                value = ir.Constant(self.vector_type, ir.Undefined)
                for lane, form in enumerate(lanes):
                    value = b.insert_element(value, b.load(self._pointer(access.array, form, env), align=4), ir.Constant(I32, lane))
        cache[key] = value
        return value

    def _intrinsic(self, name: str, arity: int) -> ir.Function:
        suffix = "f32" if self.width == 1 else f"v{self.width}f32"
        full = f"{name}.{suffix}"
        existing = self.g.module.globals.get(full)
        if existing is not None:
            return existing
        return ir.Function(self.g.module, ir.FunctionType(self.vector_type, [self.vector_type] * arity), name=full)

    def _value(self, expression: Expr, point, env, accumulator, cache, mask=None) -> ir.Value:
        """The vector of ``expression`` at register point ``point``; contiguous reads are
        masked with ``mask`` (lanes outside a cut-short tile are never read)."""
        b = self.g.builder
        flags = self.g.flags
        if isinstance(expression, Load):
            if expression.access in self.held:  # an element an earlier statement of the tile left in registers
                return self.held[expression.access]
            if expression.access == self.statement.write:
                return accumulator
            return self._load(expression.access, point, env, cache, mask)
        if isinstance(expression, Constant):
            return ir.Constant(self.vector_type, float(expression.value)) if self.width == 1 else ir.Constant(self.vector_type, [float(expression.value)] * self.width)
        if isinstance(expression, Unary):
            operand = self._value(expression.operand, point, env, accumulator, cache, mask)
            if expression.op == "neg":
                return b.fneg(operand, flags=flags)
            if expression.op == "square":
                return b.fmul(operand, operand, flags=flags)
            if expression.op == "rsqrt":
                root = b.call(self._intrinsic(_VECTOR_INTRINSICS["sqrt"], 1), [operand], fastmath=flags)
                one = ir.Constant(self.vector_type, 1.0) if self.width == 1 else ir.Constant(self.vector_type, [1.0] * self.width)
                return b.fdiv(one, root, flags=flags)
            if expression.op in MATH_FUNCTIONS:
                return b.call(math_function(self.g.module, expression.op, self.vector_type), [operand])
            return b.call(self._intrinsic(_VECTOR_INTRINSICS[expression.op], 1), [operand], fastmath=flags)
        if isinstance(expression, Binary):
            lhs = self._value(expression.lhs, point, env, accumulator, cache, mask)
            rhs = self._value(expression.rhs, point, env, accumulator, cache, mask)
            if expression.op in ("max", "min", "maximum", "minimum"):
                if expression.op in ("maximum", "minimum"):
                    flags = with_flags(flags, MAXIMUM_FLAGS)  # the sign of max(-0, +0) is not defined
                return b.call(self._intrinsic(_VECTOR_INTRINSICS[expression.op], 2), [lhs, rhs], fastmath=flags)
            emit = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv, "fmod": b.frem}[expression.op]
            return emit(lhs, rhs, flags=flags)
        if isinstance(expression, Select):
            condition = expression.condition
            lhs = self._value(condition.lhs, point, env, accumulator, cache, mask)
            rhs = self._value(condition.rhs, point, env, accumulator, cache, mask)
            chosen = float_comparison(b, condition.op, lhs, rhs)
            then = self._value(expression.then, point, env, accumulator, cache, mask)
            otherwise = self._value(expression.otherwise, point, env, accumulator, cache, mask)
            return b.select(chosen, then, otherwise)
        raise TypeError(f"cannot vectorise expression {expression!r}")


__all__ = ["emit_microkernel", "emit_register_tile_run"]
