"""Translates an isl loop AST of a Scop into an LLVM IR module with llvmlite.

The module exports one entry point per kernel::

    void <kernel>(i8** arrays, i64 threads)

``arrays[i]`` points to the i-th array of the scheduled Scop (row-major float32):
the kernel's own arrays first, then the scratch arrays that data-layout
transformations added (packed panels, zero-padded and im2col copies). The kernel
touches no other memory: it keeps no state between calls, so concurrent calls on
separate tables are independent (re-entrant). The loop nest
lives in ``<kernel>_body(float* noalias ..., i64 thread, i64 threads)``. When the
recipe asks for it and ``threads > 1``, the entry runs the body on ``threads``
OpenMP threads through libgomp's ``GOMP_parallel``. The only loops distributed over
the threads are ``for`` nodes of the dimensions a top-level ``parallel`` mark names
(:class:`polytf.schedules.marks.ParallelMark`, :func:`parallel_pieces`): each thread
takes the iterations ``init + (thread + j * threads) * step`` of such a loop (a cyclic
distribution, legal because legality proved that schedule dimension free of
loop-carried dependences); everything else runs on thread 0, with a barrier before and
after each distributed loop.

Innermost loops carry ``llvm.loop`` metadata for the vector width and unroll count
of the recipe (LLVM LangRef, "'llvm.loop' metadata").

A ``microkernel`` mark (:mod:`polytf.schedules.builder`) is emitted by
:mod:`polytf.targets.microkernel`: register-tile points unrolled and jammed,
accumulators kept in registers across the reduction loops, the innermost register
dimension vectorised with LLVM vector types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import islpy as isl
import llvmlite.ir as ir

from polytf.errors import CodegenError
from polytf.poly.expression import (
    INTEGER_BINARY_OPS,
    AffineExpr,
    Binary,
    Compare,
    Constant,
    Convert,
    DynamicIndex,
    Expr,
    FloorDiv,
    Gather,
    Load,
    Logical,
    Modulo,
    Select,
    Unary,
)
from polytf.poly.scop import Scop
from polytf.schedules.marks import MicrokernelMark, ParallelMark, mark_of
from polytf.targets.linear_form import LinearForm, index_form, linear_form_of_ast
from polytf.targets.math_functions import MATH_FUNCTIONS, math_function

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
I8_POINTER = ir.IntType(8).as_pointer()
F32 = ir.FloatType()
F32_POINTER = F32.as_pointer()
I8 = ir.IntType(8)
#: element type in memory of each dtype generated code handles (bool: one byte, as numpy's)
MEMORY_TYPES = {"float32": F32, "int32": I32, "int64": I64, "bool": I8}
#: type of a value in registers (bool: i1)
VALUE_TYPES = {"float32": F32, "int32": I32, "int64": I64, "bool": I1}
_FLOAT_COMPARISONS = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}

_COMPARISONS = {
    isl.ast_expr_op_type.eq: "==",
    isl.ast_expr_op_type.le: "<=",
    isl.ast_expr_op_type.lt: "<",
    isl.ast_expr_op_type.ge: ">=",
    isl.ast_expr_op_type.gt: ">",
}

#: Unary ops emitted as LLVM intrinsics; exp, tanh, sigmoid, erf and erfc are straight-line
#: IR from :mod:`polytf.targets.math_functions` instead (they vectorise), neg/square/rsqrt
#: plain arithmetic.
_INTRINSICS = {
    "sqrt": "llvm.sqrt.f32",
    "abs": "llvm.fabs.f32",
    "floor": "llvm.floor.f32",
    "ceil": "llvm.ceil.f32",
    "round": "llvm.roundeven.f32",
    "max": "llvm.maxnum.f32",
    "maximum": "llvm.maximum.f32",
    "minimum": "llvm.minimum.f32",
    "min": "llvm.minnum.f32",
}


def _contains_loop(node: isl.AstNode) -> bool:
    kind = node.get_type()
    if kind == isl.ast_node_type.for_:
        return True
    if kind == isl.ast_node_type.block:
        children = node.block_get_children()
        return any(_contains_loop(children.get_at(i)) for i in range(children.n_ast_node()))
    if kind == isl.ast_node_type.if_:
        return _contains_loop(node.if_get_then_node()) or (node.if_has_else_node() and _contains_loop(node.if_get_else_node()))
    if kind == isl.ast_node_type.mark:
        return _contains_loop(node.mark_get_node())
    return False


def _children(node: isl.AstNode) -> list[isl.AstNode]:
    """The children of a block, else the node itself."""
    if node.get_type() == isl.ast_node_type.block:
        children = node.block_get_children()
        return [children.get_at(i) for i in range(children.n_ast_node())]
    return [node]


@dataclass(frozen=True)
class ParallelPiece:
    """One step of the parallel region: ``node`` runs distributed over the threads (a ``for``
    node of a dimension a parallel mark names), or on thread 0."""

    node: isl.AstNode
    distributed: bool


def parallel_pieces(ast: isl.AstNode) -> list[ParallelPiece]:
    """The steps of a kernel body run on all threads, in order, with a barrier between a
    distributed step and its neighbours.

    The top-level nodes of ``ast`` (the children of a root block) run in turn. Below a
    top-level parallel mark (:class:`~polytf.schedules.marks.ParallelMark`), each part isl
    generated (one node, or the children of a block: e.g. a copy nest's isolated full
    panels, then its last partial panel) is distributed when it is a ``for`` node of a
    dimension the mark names (legality proved that dimension free of loop-carried
    dependences), and runs on thread 0 otherwise (isl dropped the loop because it has one
    iteration there). Every other node runs on thread 0.
    """
    pieces = []
    for node in _children(ast):
        mark = mark_of(node)
        if not isinstance(mark, ParallelMark):
            pieces.append(ParallelPiece(node, False))
            continue
        for part in _children(node.mark_get_node()):
            loop = part.get_type() == isl.ast_node_type.for_ and part.for_get_iterator().get_id().get_name() in mark.iterators
            pieces.append(ParallelPiece(part, loop))
    return pieces


class KernelModuleBuilder:
    """Builds the LLVM module of one kernel.

    Args:
        scop: the statements and arrays.
        ast: isl AST of the scheduled Scop.
        vector_width: 0 = LLVM decides, 1 = no vectorisation, n = width hint on innermost loops.
        unroll: 0 = LLVM decides, 1 = no unrolling, n = unroll count on innermost loops.
        parallel: run the body on all threads, distributing the loops below parallel marks.
        fast_math: reassociation/contraction flags on float arithmetic.
        native_vector_width: float32 lanes of the target's vector registers (the
            micro-kernel's width when ``vector_width`` is 0).
    """

    def __init__(
        self,
        scop: Scop,
        ast: isl.AstNode,
        *,
        vector_width: int = 0,
        unroll: int = 0,
        parallel: bool = False,
        fast_math: bool = True,
        native_vector_width: int = 8,
    ) -> None:
        for array in scop.arrays:
            if array.dtype not in MEMORY_TYPES:
                raise CodegenError(
                    f"kernel {scop.name}: array {array.name} ({array.tensor}) has dtype {array.dtype}; generated code handles {', '.join(MEMORY_TYPES)}"
                )
        self.scop = scop
        self.ast = ast
        self.vector_width = vector_width
        self.unroll = unroll
        #: the steps of the body when it runs on all threads (parallel_pieces)
        self.pieces = parallel_pieces(ast) if parallel else []
        self.parallel = any(piece.distributed for piece in self.pieces)
        self.flags = ("fast",) if fast_math else ()
        self.native_vector_width = native_vector_width
        #: every array is an argument, scratch arrays included: no mutable module globals
        self.arguments = tuple(scop.arrays)
        self._opaque_count = 0
        #: constant bounds of the enclosing loops whose bounds are constants
        self.loop_ranges: dict[str, tuple[int, int]] = {}
        self._point_forms: dict | None = None
        self._point_env: Mapping[str, ir.Value] = {}
        self.module = ir.Module(name=scop.name)
        self.statements = {s.name: s for s in scop.statements}
        self.strides = {a.name: _row_major_strides(a.shape) for a in scop.arrays}
        self.dtypes = {a.name: a.dtype for a in scop.arrays}
        self.builder: ir.IRBuilder | None = None
        self.pointers: dict[str, ir.Value] = {}
        self.thread: ir.Value | None = None
        self.threads: ir.Value | None = None

    @property
    def entry_name(self) -> str:
        return self.scop.name

    def build(self) -> ir.Module:
        """Emit the module; raises :class:`CodegenError` for AST constructs it cannot translate."""
        body = self._emit_body()
        self._emit_entry(body)
        return self.module

    # -- functions -------------------------------------------------------------------------
    def _emit_body(self) -> ir.Function:
        argument_types = [MEMORY_TYPES[a.dtype].as_pointer() for a in self.arguments] + [I64, I64]
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), argument_types), name=f"{self.scop.name}_body")
        function.linkage = "internal"
        for argument, array in zip(function.args, self.arguments):
            argument.name = array.name
            argument.add_attribute("noalias")
            self.pointers[array.name] = argument
        self.thread, self.threads = function.args[-2], function.args[-1]
        self.thread.name, self.threads.name = "thread", "threads"
        self.entry_block = function.append_basic_block("entry")
        self.builder = ir.IRBuilder(function.append_basic_block("start"))
        if self.parallel:
            self._emit_parallel_region()
        else:
            self._emit_node(self.ast, {})
        self.builder.ret_void()
        ir.IRBuilder(self.entry_block).branch(function.blocks[1])
        return function

    def _emit_parallel_region(self) -> None:
        """The body as every thread runs it (:func:`parallel_pieces`): distributed loops,
        thread-0 steps, and a barrier before and after each distributed loop."""
        barrier = self._declare("GOMP_barrier", ir.VoidType(), [])
        for i, piece in enumerate(self.pieces):
            if i and (piece.distributed or self.pieces[i - 1].distributed):
                self.builder.call(barrier, [])
            if piece.distributed:
                self._emit_for(piece.node, {}, distribute=True)
            else:
                with self.builder.if_then(self.builder.icmp_signed("==", self.thread, ir.Constant(I64, 0))):
                    self._emit_node(piece.node, {})

    def alloca(self, type_: ir.Type, name: str = "") -> ir.Value:
        """A stack slot in the entry block (promoted to registers by LLVM's SROA)."""
        return ir.IRBuilder(self.entry_block).alloca(type_, name=name)

    def _emit_entry(self, body: ir.Function) -> None:
        entry = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8_POINTER.as_pointer(), I64]), name=self.entry_name)
        arrays, threads = entry.args
        arrays.name, threads.name = "arrays", "threads"
        builder = ir.IRBuilder(entry.append_basic_block("entry"))

        def unpack(b: ir.IRBuilder, table: ir.Value) -> list[ir.Value]:
            return [b.bitcast(b.load(b.gep(table, [ir.Constant(I64, i)])), MEMORY_TYPES[a.dtype].as_pointer()) for i, a in enumerate(self.arguments)]

        if not self.parallel:
            builder.call(body, unpack(builder, arrays) + [ir.Constant(I64, 0), ir.Constant(I64, 1)])
            builder.ret_void()
            return
        worker = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8_POINTER]), name=f"{self.scop.name}_worker")
        worker.linkage = "internal"
        wb = ir.IRBuilder(worker.append_basic_block("entry"))
        get_thread = ir.Function(self.module, ir.FunctionType(I32, []), name="omp_get_thread_num")
        get_threads = ir.Function(self.module, ir.FunctionType(I32, []), name="omp_get_num_threads")
        table = wb.bitcast(worker.args[0], I8_POINTER.as_pointer())
        thread = wb.sext(wb.call(get_thread, []), I64)
        count = wb.sext(wb.call(get_threads, []), I64)
        wb.call(body, unpack(wb, table) + [thread, count])
        wb.ret_void()
        gomp_parallel = ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [ir.FunctionType(ir.VoidType(), [I8_POINTER]).as_pointer(), I8_POINTER, I32, I32]), name="GOMP_parallel"
        )
        single = builder.icmp_signed("<=", threads, ir.Constant(I64, 1))
        with builder.if_else(single) as (then, otherwise):
            with then:
                builder.call(body, unpack(builder, arrays) + [ir.Constant(I64, 0), ir.Constant(I64, 1)])
            with otherwise:
                builder.call(gomp_parallel, [worker, builder.bitcast(arrays, I8_POINTER), builder.trunc(threads, I32), ir.Constant(I32, 0)])
        builder.ret_void()

    # -- AST nodes -------------------------------------------------------------------------
    def _emit_node(self, node: isl.AstNode, env: dict[str, ir.Value]) -> None:
        kind = node.get_type()
        if kind == isl.ast_node_type.for_:
            self._emit_for(node, env, distribute=False)
        elif kind == isl.ast_node_type.block:
            children = node.block_get_children()
            for i in range(children.n_ast_node()):
                self._emit_node(children.get_at(i), env)
        elif kind == isl.ast_node_type.if_:
            condition = self._expression(node.if_get_cond(), env)
            if node.if_has_else_node():
                with self.builder.if_else(condition) as (then, otherwise):
                    with then:
                        self._emit_node(node.if_get_then_node(), env)
                    with otherwise:
                        self._emit_node(node.if_get_else_node(), env)
            else:
                with self.builder.if_then(condition):
                    self._emit_node(node.if_get_then_node(), env)
        elif kind == isl.ast_node_type.user:
            self._emit_statement(node.user_get_expr(), env)
        elif kind == isl.ast_node_type.mark:
            from polytf.targets.microkernel import emit_microkernel

            if not (isinstance(mark_of(node), MicrokernelMark) and emit_microkernel(self, node, env)):
                self._emit_node(node.mark_get_node(), env)  # parallel marks: see parallel_pieces
        else:
            raise CodegenError(f"kernel {self.scop.name}: unsupported AST node type {kind}")

    def _emit_for(self, node: isl.AstNode, env: dict[str, ir.Value], distribute: bool) -> None:
        iterator = node.for_get_iterator().get_id().get_name()
        start = self._expression(node.for_get_init(), env)
        step = self._expression(node.for_get_inc(), env)
        innermost = not _contains_loop(node.for_get_body())
        self.loop_ranges.pop(iterator, None)
        initial = linear_form_of_ast(node.for_get_init(), {})
        condition = node.for_get_cond()
        if initial is not None and initial.is_constant and condition.get_type() == isl.ast_expr_type.op and condition.op_get_type() in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt):
            bound = linear_form_of_ast(condition.op_get_arg(1), {})
            if bound is not None and bound.is_constant and not distribute:
                last = bound.constant - (1 if condition.op_get_type() == isl.ast_expr_op_type.lt else 0)
                self.loop_ranges[iterator] = (initial.constant, max(initial.constant, last))
        self.emit_loop(iterator, start, step, lambda inner: self._expression(node.for_get_cond(), inner), env, lambda inner: self._emit_node(node.for_get_body(), inner), distribute, innermost)

    def emit_loop(
        self,
        iterator: str,
        start: ir.Value,
        step: ir.Value,
        condition: Callable[[dict[str, ir.Value]], ir.Value],
        env: dict[str, ir.Value],
        body: Callable[[dict[str, ir.Value]], None],
        distribute: bool = False,
        innermost: bool = False,
    ) -> None:
        """Emit ``for (iterator = start; condition; iterator += step) body`` at the builder."""
        b = self.builder
        if distribute:
            start = b.add(start, b.mul(self.thread, step), flags=["nsw"])
            step = b.mul(step, self.threads, flags=["nsw"])
        preheader = b.block
        function = preheader.function
        header = function.append_basic_block(f"{iterator}.header")
        body_block = function.append_basic_block(f"{iterator}.body")
        latch = function.append_basic_block(f"{iterator}.latch")
        exit_block = function.append_basic_block(f"{iterator}.exit")
        b.branch(header)
        b.position_at_end(header)
        induction = b.phi(I64, name=iterator)
        induction.add_incoming(start, preheader)
        inner = dict(env)
        inner[iterator] = induction
        b.cbranch(condition(inner), body_block, exit_block)
        b.position_at_end(body_block)
        body(inner)
        b.branch(latch)
        b.position_at_end(latch)
        following = b.add(induction, step, name=f"{iterator}.next", flags=["nsw"])
        back_edge = b.branch(header)
        induction.add_incoming(following, b.block)
        if innermost:
            metadata = self._loop_metadata()
            if metadata is not None:
                back_edge.set_metadata("llvm.loop", metadata)
        b.position_at_end(exit_block)

    def _loop_metadata(self):
        hints = []
        m = self.module
        if self.vector_width == 1:
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"), ir.Constant(I32, 1)]))
        elif self.vector_width > 1:
            # A width hint, not "llvm.loop.vectorize.enable": LLVM may still decline a loop it
            # cannot vectorise. It prints a remark for each such loop, which
            # CpuTarget.optimise discards.
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"), ir.Constant(I32, self.vector_width)]))
        if self.unroll == 1:
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")]))
        elif self.unroll > 1:
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.count"), ir.Constant(I32, self.unroll)]))
        if not hints:
            return None
        from llvmlite.ir.values import MDValue

        loop_id = MDValue(m, [], name=str(len(m.metadata)))
        loop_id.operands = (loop_id, *hints)
        return loop_id

    # -- statements ------------------------------------------------------------------------
    def _emit_statement(self, call: isl.AstExpr, env: Mapping[str, ir.Value]) -> None:
        name = call.op_get_arg(0).id_get_id().get_name()
        statement = self.statements.get(name)
        if statement is None:
            raise CodegenError(f"kernel {self.scop.name}: AST calls unknown statement {name}")
        values = [self._expression(call.op_get_arg(i + 1), env) for i in range(call.op_get_n_arg() - 1)]
        if len(values) != len(statement.iterators):
            raise CodegenError(f"kernel {self.scop.name}: statement {name} called with {len(values)} of {len(statement.iterators)} iterators")
        point = dict(zip(statement.iterators, values))
        forms = [linear_form_of_ast(call.op_get_arg(i + 1), {}) for i in range(len(values))]
        self._point_forms = dict(zip(statement.iterators, forms)) if all(f is not None for f in forms) else None
        self._point_env = env
        value = self._value(statement.value, point)
        dtype = self.dtypes[statement.write.array]
        value = self._convert(value, VALUE_TYPES[dtype])
        if dtype == "bool":
            value = self.builder.zext(value, I8)
        self.builder.store(value, self._address(statement.write.array, statement.write.index, point), align=1 if dtype == "bool" else 4)
        self._point_forms = None

    def _address(self, array: str, index: tuple, point: Mapping[str, ir.Value], dynamic: ir.Value | None = None) -> ir.Value:
        b = self.builder
        strides = self.strides[array]
        terms: dict[str, int] = {}
        constant = 0
        offset = None
        for expression, stride in zip(index, strides):
            if isinstance(expression, (FloorDiv, Modulo, DynamicIndex)):
                if isinstance(expression, DynamicIndex):
                    if dynamic is None:
                        raise CodegenError(f"kernel {self.scop.name}: a run-time index of {array} outside a gather")
                    value = dynamic
                else:
                    value = self._quasi_affine(expression, point)
                scaled = value if stride == 1 else b.mul(value, ir.Constant(I64, stride), flags=["nsw"])
                offset = scaled if offset is None else b.add(offset, scaled, flags=["nsw"])
                continue
            constant += expression.constant * stride
            for iterator, coefficient in expression.terms:
                terms[iterator] = terms.get(iterator, 0) + coefficient * stride
        total = ir.Constant(I64, constant) if offset is None else b.add(offset, ir.Constant(I64, constant), flags=["nsw"])
        for iterator, coefficient in sorted(terms.items()):
            if coefficient:
                scaled = point[iterator] if coefficient == 1 else b.mul(point[iterator], ir.Constant(I64, coefficient), flags=["nsw"])
                total = b.add(total, scaled, flags=["nsw"])
        return b.gep(self.pointers[array], [total], inbounds=True)

    def _affine_value(self, expression: AffineExpr, point: Mapping[str, ir.Value]) -> ir.Value:
        b = self.builder
        total = ir.Constant(I64, expression.constant)
        for iterator, coefficient in expression.terms:
            total = b.add(total, b.mul(point[iterator], ir.Constant(I64, coefficient), flags=["nsw"]), flags=["nsw"])
        return total

    def _quasi_affine(self, expression: FloorDiv | Modulo, point: Mapping[str, ir.Value]) -> ir.Value:
        """floor division / non-negative remainder by a positive constant. When the
        numerator is ``divisor * X + R`` with ``R`` provably inside one block of
        ``divisor`` (from constant loop bounds), the result is ``X + q`` / ``R - divisor*q``,
        which LLVM can vectorise; otherwise a run-time floor division."""
        if self._point_forms is not None:
            form = index_form(expression, self._point_forms, self._range_of)
            if form is not None:
                return self.materialize(form, self._point_env)
        return self.floor_div_or_mod(self._affine_value(expression.numerator, point), expression.divisor, isinstance(expression, Modulo))

    def floor_div_or_mod(self, value: ir.Value, divisor: int, modulo: bool) -> ir.Value:
        b = self.builder
        d = ir.Constant(I64, divisor)
        negative = b.icmp_signed("<", value, ir.Constant(I64, 0))
        adjusted = b.select(negative, b.add(b.sub(value, d), ir.Constant(I64, 1)), value)
        quotient = b.sdiv(adjusted, d)
        return b.sub(value, b.mul(quotient, d)) if modulo else quotient

    def _range_of(self, form: LinearForm) -> tuple[int, int] | None:
        """Constant bounds of a linear form over loops with constant bounds, else None."""
        low = high = form.constant
        for name, coefficient in form.terms:
            bounds = self.loop_ranges.get(name)
            if bounds is None:
                return None
            a, b = coefficient * bounds[0], coefficient * bounds[1]
            low, high = low + min(a, b), high + max(a, b)
        return low, high

    def opaque_name(self) -> str:
        """A fresh name for a value a linear form refers to."""
        self._opaque_count += 1
        return f"%opaque{self._opaque_count}"

    def materialize(self, form: LinearForm, env: Mapping[str, ir.Value]) -> ir.Value:
        """The i64 value of a linear form whose names are bound in ``env``."""
        b = self.builder
        total = None
        for name, coefficient in form.terms:
            value = env[name]
            scaled = value if coefficient == 1 else b.mul(value, ir.Constant(I64, coefficient), flags=["nsw"])
            total = scaled if total is None else b.add(total, scaled, flags=["nsw"])
        if total is None:
            return ir.Constant(I64, form.constant)
        return b.add(total, ir.Constant(I64, form.constant), flags=["nsw"]) if form.constant else total

    def _load(self, array: str, index: tuple, point: Mapping[str, ir.Value], dynamic: ir.Value | None = None) -> ir.Value:
        """One element in its register type (bool: the byte compared with 0)."""
        dtype = self.dtypes[array]
        value = self.builder.load(self._address(array, index, point, dynamic), align=1 if dtype == "bool" else 4)
        return self.builder.icmp_unsigned("!=", value, ir.Constant(I8, 0)) if dtype == "bool" else value

    def _convert(self, value: ir.Value, target: ir.Type) -> ir.Value:
        """``value`` as ``target`` (F32, I32, I64 or I1) with TensorFlow's Cast semantics:
        float -> int truncates toward zero, number -> bool is ``!= 0``, bool -> number 0 or 1."""
        b = self.builder
        source = value.type
        if source == target:
            return value
        if target == I1:
            if source == F32:
                return b.fcmp_unordered("!=", value, ir.Constant(F32, 0.0))
            return b.icmp_signed("!=", value, ir.Constant(source, 0))
        if source == I1:
            return b.uitofp(value, F32) if target == F32 else b.zext(value, target)
        if target == F32:
            return b.sitofp(value, F32)
        if source == F32:
            return b.fptosi(value, target)
        return b.sext(value, target) if target.width > source.width else b.trunc(value, target)

    def _typed_value(self, expression: Expr, point: Mapping[str, ir.Value]) -> ir.Value:
        """Dispatch for the typed expressions (comparisons, logic, selection, conversion, gathers)."""
        b = self.builder
        if isinstance(expression, Compare):
            lhs, rhs = self._value(expression.lhs, point), self._value(expression.rhs, point)
            if lhs.type != rhs.type:
                lhs, rhs = self._convert(lhs, F32), self._convert(rhs, F32)
            if lhs.type == F32:
                symbol = _FLOAT_COMPARISONS[expression.op]
                # NaN: unequal to everything (not_equal true), every ordering false, as in C and TensorFlow
                return b.fcmp_unordered(symbol, lhs, rhs) if symbol == "!=" else b.fcmp_ordered(symbol, lhs, rhs)
            return b.icmp_signed(_FLOAT_COMPARISONS[expression.op], lhs, rhs)
        if isinstance(expression, Logical):
            lhs = self._convert(self._value(expression.lhs, point), I1)
            if expression.op == "not":
                return b.not_(lhs)
            rhs = self._convert(self._value(expression.rhs, point), I1)
            return b.and_(lhs, rhs) if expression.op == "and" else b.or_(lhs, rhs)
        if isinstance(expression, Select):
            condition = self._convert(self._value(expression.condition, point), I1)
            then, otherwise = self._value(expression.then, point), self._value(expression.otherwise, point)
            if then.type != otherwise.type:
                then, otherwise = self._convert(then, F32), self._convert(otherwise, F32)
            return b.select(condition, then, otherwise)
        if isinstance(expression, Convert):
            return self._convert(self._value(expression.operand, point), VALUE_TYPES[expression.dtype])
        if isinstance(expression, Gather):
            # clamped into the table: no index value reads outside it (the runtime refuses bad ones first)
            position = self._convert(self._value(expression.index, point), I64)
            low, high = ir.Constant(I64, 0), ir.Constant(I64, expression.extent - 1)
            position = b.select(b.icmp_signed("<", position, low), low, position)
            position = b.select(b.icmp_signed(">", position, high), high, position)
            access = expression.table.access
            return self._load(access.array, access.index, point, position)
        raise CodegenError(f"kernel {self.scop.name}: cannot generate code for expression {expression!r}")

    def _integer_binary(self, op: str, lhs: ir.Value, rhs: ir.Value) -> ir.Value:
        b = self.builder
        if op in ("add", "sub", "mul"):
            return {"add": b.add, "sub": b.sub, "mul": b.mul}[op](lhs, rhs)
        if op in ("max", "min", "maximum", "minimum"):
            larger = b.icmp_signed(">", lhs, rhs)
            return b.select(larger, lhs, rhs) if op in ("max", "maximum") else b.select(larger, rhs, lhs)
        if op in INTEGER_BINARY_OPS:
            return self._integer_division(op, lhs, rhs)
        raise CodegenError(f"kernel {self.scop.name}: integer operands of {op!r} are not generated; cast them to float32")

    def _integer_division(self, op: str, lhs: ir.Value, rhs: ir.Value) -> ir.Value:
        """TensorFlow's integer ``Div`` (toward zero), ``FloorDiv`` and ``FloorMod`` (the sign
        of the divisor). Lowerings emit them with constant divisors without zeros; the
        divisor is still made safe, so that no value traps: ``d == 0`` divides by 1 and
        ``d == -1`` negates (``MIN / -1`` wraps, as two's complement, instead of SIGFPE)."""
        b = self.builder
        zero, one, minus_one = (ir.Constant(lhs.type, v) for v in (0, 1, -1))
        is_minus_one = b.icmp_signed("==", rhs, minus_one)
        divisor = b.select(b.or_(is_minus_one, b.icmp_signed("==", rhs, zero)), one, rhs)
        quotient = b.select(is_minus_one, b.sub(zero, lhs), b.sdiv(lhs, divisor))
        remainder = b.select(is_minus_one, zero, b.srem(lhs, divisor))
        if op == "truncdiv":
            return quotient
        # floor: step the quotient down (the remainder over) when the remainder's sign differs from the divisor's
        inexact = b.icmp_signed("!=", remainder, zero)
        signs_differ = b.icmp_signed("!=", b.icmp_signed("<", remainder, zero), b.icmp_signed("<", rhs, zero))
        adjust = b.and_(inexact, signs_differ)
        if op == "floordiv":
            return b.select(adjust, b.sub(quotient, one), quotient)
        return b.select(adjust, b.add(remainder, rhs), remainder)

    def _value(self, expression: Expr, point: Mapping[str, ir.Value]) -> ir.Value:
        b = self.builder
        if isinstance(expression, Load):
            return self._load(expression.access.array, expression.access.index, point)
        if isinstance(expression, Constant):
            if expression.dtype != "float32":
                return ir.Constant(VALUE_TYPES[expression.dtype], int(expression.value))
            return ir.Constant(F32, float(expression.value))
        if isinstance(expression, (Compare, Logical, Select, Convert, Gather)):
            return self._typed_value(expression, point)
        if isinstance(expression, Unary):
            operand = self._value(expression.operand, point)
            if isinstance(operand.type, ir.IntType) and expression.op in ("neg", "square", "abs"):
                if expression.op == "neg":
                    return b.neg(operand)
                if expression.op == "square":
                    return b.mul(operand, operand)
                return b.select(b.icmp_signed("<", operand, ir.Constant(operand.type, 0)), b.neg(operand), operand)
            operand = self._convert(operand, F32)
            if expression.op == "neg":
                return b.fneg(operand, flags=self.flags)
            if expression.op == "square":
                return b.fmul(operand, operand, flags=self.flags)
            if expression.op == "rsqrt":
                root = b.call(self._intrinsic(_INTRINSICS["sqrt"], 1), [operand], fastmath=self.flags)
                return b.fdiv(ir.Constant(F32, 1.0), root, flags=self.flags)
            if expression.op in MATH_FUNCTIONS:
                return b.call(math_function(self.module, expression.op, F32), [operand])
            return b.call(self._intrinsic(_INTRINSICS[expression.op], 1), [operand], fastmath=self.flags)
        if isinstance(expression, Binary):
            lhs, rhs = self._value(expression.lhs, point), self._value(expression.rhs, point)
            if isinstance(lhs.type, ir.IntType) and lhs.type == rhs.type and lhs.type != I1:
                return self._integer_binary(expression.op, lhs, rhs)
            if expression.op in INTEGER_BINARY_OPS:
                raise CodegenError(f"kernel {self.scop.name}: {expression.op!r} takes integer operands of one dtype, got {lhs.type} and {rhs.type}")
            lhs, rhs = self._convert(lhs, F32), self._convert(rhs, F32)
            if expression.op in ("max", "min", "maximum", "minimum"):
                return b.call(self._intrinsic(_INTRINSICS[expression.op], 2), [lhs, rhs], fastmath=self.flags)
            emit = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}[expression.op]
            return emit(lhs, rhs, flags=self.flags)
        raise CodegenError(f"kernel {self.scop.name}: cannot generate code for expression {expression!r}")

    def _declare(self, name: str, result: ir.Type, arguments: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(result, arguments), name=name)

    def _intrinsic(self, name: str, arity: int) -> ir.Function:
        return self._declare(name, F32, [F32] * arity)

    # -- isl AST expressions (i64 / i1) ------------------------------------------------------
    def _expression(self, expression: isl.AstExpr, env: Mapping[str, ir.Value]) -> ir.Value:
        b = self.builder
        kind = expression.get_type()
        if kind == isl.ast_expr_type.int:
            return ir.Constant(I64, expression.int_get_val().to_python())
        if kind == isl.ast_expr_type.id:
            name = expression.id_get_id().get_name()
            if name not in env:
                raise CodegenError(f"kernel {self.scop.name}: AST uses unknown identifier {name}")
            return env[name]
        if kind != isl.ast_expr_type.op:
            raise CodegenError(f"kernel {self.scop.name}: unsupported AST expression {expression.to_C_str()}")
        op = expression.op_get_type()
        arguments = [expression.op_get_arg(i) for i in range(expression.op_get_n_arg())]
        T = isl.ast_expr_op_type
        if op in (T.and_, T.and_then, T.or_, T.or_else):
            lhs, rhs = (self._expression(a, env) for a in arguments)
            return b.and_(lhs, rhs) if op in (T.and_, T.and_then) else b.or_(lhs, rhs)
        if op in (T.cond, T.select):
            condition, then, otherwise = (self._expression(a, env) for a in arguments)
            return b.select(condition, then, otherwise)
        values = [self._expression(a, env) for a in arguments]
        if op in _COMPARISONS:
            return b.icmp_signed(_COMPARISONS[op], values[0], values[1])
        if op == T.minus:
            return b.neg(values[0])
        if op == T.add:
            return b.add(values[0], values[1], flags=["nsw"])
        if op == T.sub:
            return b.sub(values[0], values[1], flags=["nsw"])
        if op == T.mul:
            return b.mul(values[0], values[1], flags=["nsw"])
        if op in (T.max, T.min):
            result = values[0]
            for value in values[1:]:
                pick = b.icmp_signed(">" if op == T.max else "<", result, value)
                result = b.select(pick, result, value)
            return result
        if op in (T.div, T.pdiv_q):
            return b.sdiv(values[0], values[1])
        if op in (T.pdiv_r, T.zdiv_r):
            return b.srem(values[0], values[1])
        if op == T.fdiv_q:
            # floor division: (a < 0 ? a - b + 1 : a) / b for b > 0 (isl manual, isl_ast_expr_op_fdiv_q)
            a, d = values
            negative = b.icmp_signed("<", a, ir.Constant(I64, 0))
            adjusted = b.select(negative, b.add(b.sub(a, d), ir.Constant(I64, 1)), a)
            return b.sdiv(adjusted, d)
        raise CodegenError(f"kernel {self.scop.name}: unsupported AST operator in {expression.to_C_str()}")


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    running = 1
    for extent in reversed(shape):
        strides.append(running)
        running *= int(extent)
    return tuple(reversed(strides))
