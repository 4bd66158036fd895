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
(:class:`polytf.schedules.marks.ParallelMark`, :func:`parallel_pieces`; legality proved
that schedule dimension free of loop-carried dependences): thread ``t`` of ``T`` takes a
block of consecutive iterations, ``ceil(n / T)`` of the loop's ``n`` (OpenMP's
``schedule(static)``), so that consecutive kernels split an image's rows alike and a
thread mostly reads what it wrote (MobileNetV2 b1 and EfficientNetB0 b1 0.89x and 0.90x the
time of the cyclic distribution ``t, t + T, ...``, DenseNet121 0.90-1.00x, ResNet50
0.97-0.99x, InceptionV3 0.99-1.03x: one process, alternating blocks, znver3, 2 threads);
a loop whose trip count is not a constant keeps the cyclic one. Everything else runs on
thread 0, with a barrier before and after each distributed loop. The body is ``noinline``:
the entry, its OpenMP worker and the slices entries all call it, and LLVM inlined a small
body into each of them, optimising and generating its code four times (DenseNet121's 58
concatenation kernels: 58 ms of LLVM each with the body inlined, 28 ms without).

Innermost loops carry ``llvm.loop`` metadata for the vector width and unroll count
of the recipe (LLVM LangRef, "'llvm.loop' metadata"). An innermost loop that holds a
NaN-skipping maximum or minimum reduction (``M = max(M, x)``, ``llvm.maxnum``/``minnum``:
Softmax's row maximum) carries ``llvm.loop.vectorize.enable = false``: the loop
vectorizer leaves it scalar (one pass of Softmax's three). Vectorised, LLVM 22
folds the tail of a loop of fewer than 16 iterations into masked vectors, and its
vectorised ``maxnum`` reduction (which leaves the vector loop early on a NaN) then gets a
vector trip count of ``n - n % width``: zero when the loop has fewer iterations than the
vector width, so the vector loop only ever leaves on a NaN and never returns (llvm-project
issue 209159, fixed in LLVM 23); with no width hint the same loops abort LLVM's
``computeBestVF`` ("VPlan cost model and legacy cost model disagreed"). Asking for the
vectorisation explicitly (a scalar remainder instead of a folded tail) avoided both on a
plain Softmax but still aborted LLVM on a masked Softmax over rows of 6.

A ``microkernel`` mark (:mod:`polytf.schedules.builder`) is emitted by
:mod:`polytf.targets.microkernel`: register-tile points unrolled and jammed,
accumulators kept in registers across the reduction loops, the innermost register
dimension vectorised with LLVM vector types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.ir as ir
from llvmlite.ir.values import MDValue

from polytf.errors import CodegenError
from polytf.islpy_on_demand import isl
from polytf.poly.affine import affine_of_ast
from polytf.poly.expression import Binary, Expr, Load
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement
from polytf.schedules.marks import MicrokernelMark, ParallelMark, mark_of
from polytf.targets.depthwise_microkernel import emit_depthwise_body
from polytf.targets.depthwise_pattern import depthwise_plan
from polytf.targets.microkernel import emit_microkernel, emit_register_tile_run
from polytf.targets.statement_codegen import I32, I64, MEMORY_TYPES, StatementEmitter

I8_POINTER = ir.IntType(8).as_pointer()


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


def _called_statements(node: isl.AstNode) -> list[str]:
    """Names of the statements that the user nodes of an AST subtree call."""
    kind = node.get_type()
    if kind == isl.ast_node_type.user:
        return [node.user_get_expr().op_get_arg(0).id_get_id().get_name()]
    if kind == isl.ast_node_type.for_:
        return _called_statements(node.for_get_body())
    if kind == isl.ast_node_type.block:
        children = node.block_get_children()
        return [name for i in range(children.n_ast_node()) for name in _called_statements(children.get_at(i))]
    if kind == isl.ast_node_type.if_:
        names = _called_statements(node.if_get_then_node())
        return names + (_called_statements(node.if_get_else_node()) if node.if_has_else_node() else [])
    if kind == isl.ast_node_type.mark:
        return _called_statements(node.mark_get_node())
    return []


def _is_maxnum_reduction(statement: Statement) -> bool:
    """True when ``statement`` folds the element it writes with ``max`` or ``min`` (the
    NaN-skipping ``llvm.maxnum``/``minnum``), e.g. ``M[d] = max(M[d], X[d, r0])``: the
    reduction LLVM 22 vectorises with a NaN exit (module docstring)."""
    written = Load(statement.write)
    pending: list[Expr] = [statement.value]
    while pending:
        expression = pending.pop()
        if isinstance(expression, Binary) and expression.op in ("max", "min") and written in (expression.lhs, expression.rhs):
            return True
        pending.extend(expression.children())
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


#: MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits (Intel SDM vol. 1,
#: 10.2.3 "MXCSR Control and Status Register").
MXCSR_FLUSH_DENORMALS = 0x8040


class KernelModuleBuilder(StatementEmitter):
    """Builds the LLVM module of one kernel.

    Args:
        scop: the statements and arrays.
        ast: isl AST of the scheduled Scop.
        vector_width: 0 = LLVM decides, 1 = no vectorisation, n = width hint on innermost loops.
        unroll: 1 = no unrolling, n = unroll count on innermost loops, 0 = polytf decides
            (only a micro-kernel's innermost reduction loop, ``MICROKERNEL_UNROLL`` times).
        parallel: run the body on all threads, distributing the loops below parallel marks.
        openmp: whether the code may call libgomp (libgomp is loaded or linked): the slices
            entry (:meth:`_emit_slices_entry`) spreads its runs over the threads; implied by
            ``parallel``.
        fast_math: every fast-math flag on float arithmetic, NaN and inf then undefined;
            else TensorFlow's float semantics (:func:`polytf.targets.statement_codegen.float_flags`).
        native_vector_width: float32 lanes of the target's vector registers (the
            micro-kernel's width when ``vector_width`` is 0).
        flush_denormals: the body runs with x86's flush-to-zero and denormals-are-zero
            (MXCSR bits FTZ and DAZ, ``0x8040``) set, as TensorFlow's CPU kernels do
            (``tensorflow/core/platform/denormal.h``: ``ScopedFlushDenormal``), and gives the
            caller's MXCSR back before it returns; each OpenMP thread runs the body, so each
            sets and restores its own. x86-64 only.
    """

    def __init__(
        self,
        scop: Scop,
        ast: isl.AstNode,
        *,
        vector_width: int = 0,
        unroll: int = 0,
        parallel: bool = False,
        fast_math: bool = False,
        native_vector_width: int = 8,
        openmp: bool = False,
        flush_denormals: bool = False,
    ) -> None:
        super().__init__(scop, fast_math=fast_math)
        self.flush_denormals = flush_denormals
        #: whether the code may call libgomp (a slices entry spreads its runs over threads)
        self.openmp = openmp or parallel
        self.ast = ast
        self.vector_width = vector_width
        self.unroll = unroll
        #: the steps of the body when it runs on all threads (parallel_pieces)
        self.pieces = parallel_pieces(ast) if parallel else []
        self.parallel = any(piece.distributed for piece in self.pieces)
        #: a depthwise convolution's own micro-kernel instead of the AST (depthwise_microkernel), or None
        self.depthwise = depthwise_plan(scop, ast)
        if self.depthwise is not None:
            self.parallel = parallel
        self.native_vector_width = native_vector_width
        #: every array is an argument, scratch arrays included: no mutable module globals
        self.arguments = tuple(scop.arrays)
        self.thread: ir.Value | None = None
        self.threads: ir.Value | None = None

    @property
    def entry_name(self) -> str:
        return self.scop.name

    def build(self) -> ir.Module:
        """Emit the module; raises :class:`CodegenError` for AST constructs it cannot translate."""
        body = self._emit_body()
        self._emit_entry(body)
        self._emit_slices_entry(body)
        return self.module

    # -- functions -------------------------------------------------------------------------
    def _emit_body(self) -> ir.Function:
        argument_types = [MEMORY_TYPES[a.dtype].as_pointer() for a in self.arguments] + [I64, I64]
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), argument_types), name=f"{self.scop.name}_body")
        function.linkage = "internal"
        # One copy of the body, however many entries call it (module docstring)
        function.attributes.add("noinline")
        for argument, array in zip(function.args, self.arguments):
            argument.name = array.name
            argument.add_attribute("noalias")
            self.pointers[array.name] = argument
        self.thread, self.threads = function.args[-2], function.args[-1]
        self.thread.name, self.threads.name = "thread", "threads"
        self.entry_block = function.append_basic_block("entry")
        self.builder = ir.IRBuilder(function.append_basic_block("start"))
        caller_state = self._flush_denormals() if self.flush_denormals else None
        if self.depthwise is not None:
            emit_depthwise_body(self, self.depthwise, distribute=self.parallel)
        elif self.parallel:
            self._emit_parallel_region()
        else:
            self._emit_node(self.ast, {})
        if caller_state is not None:
            self.builder.call(self._declare("llvm.x86.sse.ldmxcsr", ir.VoidType(), [I8_POINTER]), [caller_state])
        self.builder.ret_void()
        ir.IRBuilder(self.entry_block).branch(function.blocks[1])
        return function

    def _flush_denormals(self) -> ir.Value:
        """Set MXCSR's FTZ and DAZ bits (``flush_denormals``); returns the slot that holds the
        caller's MXCSR, to load back before the body returns."""
        b = self.builder
        caller, flushing = self.alloca(I32, "caller_mxcsr"), self.alloca(I32, "mxcsr")
        caller_bytes, flushing_bytes = b.bitcast(caller, I8_POINTER), b.bitcast(flushing, I8_POINTER)
        b.call(self._declare("llvm.x86.sse.stmxcsr", ir.VoidType(), [I8_POINTER]), [caller_bytes])
        b.store(b.or_(b.load(caller), ir.Constant(I32, MXCSR_FLUSH_DENORMALS)), flushing)
        b.call(self._declare("llvm.x86.sse.ldmxcsr", ir.VoidType(), [I8_POINTER]), [flushing_bytes])
        return caller_bytes

    def _emit_parallel_region(self) -> None:
        """The body as every thread runs it (:func:`parallel_pieces`): distributed loops,
        thread-0 steps, and a barrier before and after each distributed loop, when the body
        runs on more than one thread (a slices entry runs it on one thread of a team: then no
        other thread takes part, :meth:`_emit_slices_entry`)."""
        barrier = self._declare("GOMP_barrier", ir.VoidType(), [])
        for i, piece in enumerate(self.pieces):
            if i and (piece.distributed or self.pieces[i - 1].distributed):
                with self.builder.if_then(self.builder.icmp_signed(">", self.threads, ir.Constant(I64, 1))):
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

    def _emit_slices_entry(self, body: ir.Function) -> None:
        """``void <kernel>_slices(i8** arrays, i64 threads, i64 count, i64* strides, i64*
        thread_strides)``: the kernel run ``count`` times, run ``s`` on thread ``t`` on every
        address of ``arrays`` moved on by ``s * strides[i] + t * thread_strides[i]`` bytes (a
        kernel at a batch size run on slices of a larger batch:
        :mod:`polytf.runtime.cpu.sliced_kernel`); ``count`` is a run-time parameter, so one
        object serves every batch size that is a multiple of the kernel's.

        - one thread: the runs one after the other;
        - at least as many runs as threads, or a kernel without a parallel loop: thread ``t``
          of ``T`` takes the block of runs ``[t * ceil(count / T), (t + 1) * ceil(count /
          T))``, each run on that thread alone, with its own copy of every array the runs
          share and write (``thread_strides``: a scratch array). This is how the kernel at the
          whole batch splits its outer loop (OpenMP's ``schedule(static)``), so a thread reads
          the samples it wrote in the kernel before, sliced or not;
        - fewer runs than threads: every thread takes part in each run, with a barrier between
          two runs (they share the scratch arrays).
        """
        pointer = I64.as_pointer()
        slices = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8_POINTER.as_pointer(), I64, I64, pointer, pointer]), name=f"{self.entry_name}_slices")
        arrays, threads, count, strides, thread_strides = slices.args
        for argument, name in zip(slices.args, ("arrays", "threads", "count", "strides", "thread_strides")):
            argument.name = name
        builder = ir.IRBuilder(slices.append_basic_block("entry"))
        zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
        if not self.openmp:
            _counted_loop(builder, zero, count, lambda b, index: self._slice_run(b, body, arrays, strides, thread_strides, index, zero, zero, one))
            builder.ret_void()
            return
        frame_type = ir.LiteralStructType([I8_POINTER.as_pointer(), I64, pointer, pointer])
        gomp_parallel = self._declare("GOMP_parallel", ir.VoidType(), [ir.FunctionType(ir.VoidType(), [I8_POINTER]).as_pointer(), I8_POINTER, I32, I32])
        frame = builder.alloca(frame_type)
        for k, value in enumerate((arrays, count, strides, thread_strides)):
            builder.store(value, builder.gep(frame, [ir.Constant(I32, 0), ir.Constant(I32, k)]))

        def start(b: ir.IRBuilder, worker: ir.Function) -> None:
            b.call(gomp_parallel, [worker, b.bitcast(frame, I8_POINTER), b.trunc(threads, I32), ir.Constant(I32, 0)])

        blocked = self._emit_slices_worker(body, frame_type, blocked=True)
        with builder.if_else(builder.icmp_signed("<=", threads, one)) as (single, several):
            with single:
                _counted_loop(builder, zero, count, lambda b, index: self._slice_run(b, body, arrays, strides, thread_strides, index, zero, zero, one))
            with several:
                if not self.parallel:
                    start(builder, blocked)
                else:
                    together = self._emit_slices_worker(body, frame_type, blocked=False)
                    with builder.if_else(builder.icmp_signed(">=", count, threads)) as (many, few):
                        with many:
                            start(builder, blocked)
                        with few:
                            start(builder, together)
        builder.ret_void()

    def _slice_run(self, b: ir.IRBuilder, body: ir.Function, table, strides, thread_strides, index, copy, thread, thread_count) -> None:
        """Call ``body`` on run ``index``'s addresses, with the ``copy``-th copy of the shared
        written arrays, as thread ``thread`` of ``thread_count``."""
        moved = []
        for i, array in enumerate(self.arguments):
            position = [ir.Constant(I64, i)]
            shift = b.add(b.mul(index, b.load(b.gep(strides, position))), b.mul(copy, b.load(b.gep(thread_strides, position))))
            moved.append(b.bitcast(b.gep(b.load(b.gep(table, position)), [shift]), MEMORY_TYPES[array.dtype].as_pointer()))
        b.call(body, [*moved, thread, thread_count])

    def _emit_slices_worker(self, body: ir.Function, frame_type: ir.Type, blocked: bool) -> ir.Function:
        """An OpenMP outlined function of the slices entry (:meth:`_emit_slices_entry`), whose
        argument is the frame ``{arrays, count, strides, thread_strides}``: ``blocked``, each
        thread runs its block of the runs alone on its copy of the shared written arrays; else
        every thread takes part in every run."""
        worker = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8_POINTER]), name=f"{self.scop.name}_slices_{'blocks' if blocked else 'together'}")
        worker.linkage = "internal"
        b = ir.IRBuilder(worker.append_basic_block("entry"))
        frame = b.bitcast(worker.args[0], frame_type.as_pointer())
        table, runs, strides, thread_strides = (b.load(b.gep(frame, [ir.Constant(I32, 0), ir.Constant(I32, k)])) for k in range(4))
        thread = b.sext(b.call(self._declare("omp_get_thread_num", I32, []), []), I64)
        thread_count = b.sext(b.call(self._declare("omp_get_num_threads", I32, []), []), I64)
        zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
        if blocked:
            block = b.sdiv(b.add(runs, b.sub(thread_count, one)), thread_count)
            first = b.mul(thread, block)
            last = b.add(first, block)
            last = b.select(b.icmp_signed("<", last, runs), last, runs)
            _counted_loop(b, first, last, lambda inner, index: self._slice_run(inner, body, table, strides, thread_strides, index, thread, zero, one))
        else:
            barrier = self._declare("GOMP_barrier", ir.VoidType(), [])

            def together(inner: ir.IRBuilder, index: ir.Value) -> None:
                with inner.if_then(inner.icmp_signed(">", index, zero)):
                    inner.call(barrier, [])  # the previous run's scratch writes are done
                self._slice_run(inner, body, table, strides, thread_strides, index, zero, thread, thread_count)

            _counted_loop(b, zero, runs, together)
        b.ret_void()
        return worker

    # -- AST nodes -------------------------------------------------------------------------
    def _emit_node(self, node: isl.AstNode, env: dict[str, ir.Value]) -> None:
        kind = node.get_type()
        if kind == isl.ast_node_type.for_:
            self._emit_for(node, env, distribute=False)
        elif kind == isl.ast_node_type.block:
            children = _children(node)
            position = 0
            while position < len(children):
                # a register tile's zero fill, micro-kernel and epilogue, fused in registers
                fused = emit_register_tile_run(self, children, position, env)
                if not fused:
                    self._emit_node(children[position], env)
                position += max(1, fused)
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
        initial = affine_of_ast(node.for_get_init(), {})
        condition = node.for_get_cond()
        trip_count = None  # of a distributed loop with constant bounds and step
        if initial is not None and initial.is_constant and condition.get_type() == isl.ast_expr_type.op and condition.op_get_type() in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt):
            bound = affine_of_ast(condition.op_get_arg(1), {})
            if bound is not None and bound.is_constant:
                last = bound.constant - (1 if condition.op_get_type() == isl.ast_expr_op_type.lt else 0)
                if not distribute:
                    self.loop_ranges[iterator] = (initial.constant, max(initial.constant, last))
                else:
                    increment = affine_of_ast(node.for_get_inc(), {})
                    if increment is not None and increment.is_constant and increment.constant > 0 and last >= initial.constant:
                        trip_count = (last - initial.constant) // increment.constant + 1
        holds_maxnum_reduction = innermost and any(
            name in self.statements and _is_maxnum_reduction(self.statements[name])
            for name in _called_statements(node.for_get_body())
        )
        self.emit_loop(
            iterator,
            start,
            step,
            lambda inner: self._expression(node.for_get_cond(), inner),
            env,
            lambda inner: self._emit_node(node.for_get_body(), inner),
            distribute,
            innermost,
            holds_maxnum_reduction=holds_maxnum_reduction,
            trip_count=trip_count,
        )

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
        holds_maxnum_reduction: bool = False,
        unroll: int | None = None,
        trip_count: int | None = None,
    ) -> None:
        """Emit ``for (iterator = start; condition; iterator += step) body`` at the builder.

        ``holds_maxnum_reduction`` (an innermost loop holding a ``maxnum``/``minnum`` reduction)
        gives the loop ``llvm.loop.vectorize.enable = false`` (module docstring). ``unroll``
        replaces the recipe's unroll count for this loop (None: the recipe's).

        ``distribute``: each thread runs a share of the iterations. With the loop's
        ``trip_count`` known, thread ``t`` of ``T`` runs the consecutive iterations
        ``[t·c, min((t+1)·c, trip_count))``, ``c = ceil(trip_count / T)`` (a block
        distribution, as OpenMP's ``schedule(static)``); else the cyclic ``t, t + T, ...``.
        """
        b = self.builder
        if distribute and trip_count is not None:
            chunk = b.sdiv(b.add(self.threads, ir.Constant(I64, trip_count - 1)), self.threads)
            first = b.mul(self.thread, chunk, flags=["nsw"])
            end = b.add(first, chunk, flags=["nsw"])
            end = b.select(b.icmp_signed("<", end, ir.Constant(I64, trip_count)), end, ir.Constant(I64, trip_count))
            stop = b.add(start, b.mul(end, step, flags=["nsw"]), flags=["nsw"])
            start = b.add(start, b.mul(first, step, flags=["nsw"]), flags=["nsw"])
            original = condition

            def condition(inner: dict[str, ir.Value]) -> ir.Value:
                return self.builder.and_(original(inner), self.builder.icmp_signed("<", inner[iterator], stop))
        elif distribute:
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
            metadata = self._loop_metadata(holds_maxnum_reduction, self.unroll if unroll is None else unroll)
            if metadata is not None:
                back_edge.set_metadata("llvm.loop", metadata)
        b.position_at_end(exit_block)

    def _loop_metadata(self, holds_maxnum_reduction: bool, unroll: int):
        hints = []
        m = self.module
        if holds_maxnum_reduction:
            # A maxnum/minnum reduction: the loop vectorizer must not touch it at all (module docstring)
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 0)]))
        elif self.vector_width == 1:
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"), ir.Constant(I32, 1)]))
        elif self.vector_width > 1:
            # A width hint, not "llvm.loop.vectorize.enable": LLVM may still decline a loop it
            # cannot vectorise. It prints a remark for each such loop, which
            # CpuTarget.optimise discards.
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"), ir.Constant(I32, self.vector_width)]))
        if unroll == 1:
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")]))
        elif unroll > 1:
            hints.append(m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.count"), ir.Constant(I32, unroll)]))
        if not hints:
            return None
        loop_id = MDValue(m, [], name=str(len(m.metadata)))
        loop_id.operands = (loop_id, *hints)
        return loop_id


__all__ = ["ParallelPiece", "parallel_pieces", "KernelModuleBuilder"]


def _counted_loop(builder: ir.IRBuilder, first: ir.Value, end: ir.Value, emit: Callable[[ir.IRBuilder, ir.Value], None]) -> None:
    """``for (i64 i = first; i < end; i++) emit(builder, i)``, leaving ``builder`` after the loop."""
    function = builder.function
    head, loop, done = (function.append_basic_block(name) for name in ("slices.head", "slices.run", "slices.done"))
    start = builder.block
    builder.branch(head)
    builder.position_at_end(head)
    index = builder.phi(I64, name="slice")
    index.add_incoming(first, start)
    builder.cbranch(builder.icmp_signed("<", index, end), loop, done)
    builder.position_at_end(loop)
    emit(builder, index)
    index.add_incoming(builder.add(index, ir.Constant(I64, 1)), builder.block)
    builder.branch(head)
    builder.position_at_end(done)
