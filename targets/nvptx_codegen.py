"""Translates the isl AST of a GPU-mapped kernel into an LLVM IR module for ``nvptx64-nvidia-cuda``.

The module has one kernel per launch (``ptx_kernel`` calling convention, so LLVM emits
a PTX ``.entry``): the recipe's data-layout copies first (:attr:`GpuLaunch.prologue`,
``<kernel>_copy<i>``), then ``<kernel>``, each::

    void <kernel>(T addrspace(1)* noalias a0, ..., T addrspace(1)* noalias an)

one argument per global array of the scheduled Scop (its arrays but the shared ones,
in order). Shared arrays (:attr:`GpuLaunch.shared_arrays`) are slices of the block's
dynamic shared memory, ``@polytf_shared = external addrspace(3) global [0 x float]``.
The loop nest is the one the CPU runs (:mod:`polytf.targets.llvm_codegen`, whose
statement and expression code this module reuses), with three differences, after PPCG's
CUDA printer (``cuda.c``):

- A ``for`` node of a dimension a blocks or threads mark maps
  (:class:`~polytf.schedules.marks.GpuMark`) is not a loop: its iterator is
  ``blockIdx.h`` / ``threadIdx.h`` (``llvm.nvvm.read.ptx.sreg.ctaid.*`` / ``tid.*``),
  guarded by the loop's lower bound and condition.
- Where isl generated no loop for a mapped dimension (one value in that part of the
  AST), each statement instance is guarded by its own coordinate
  (:class:`~polytf.schedules.gpu_grid.HardwareCoordinate`), so that it runs on one
  thread, not on all of them.
- A barrier mark emits ``llvm.nvvm.barrier0`` after its subtree; it is never inside a
  threads mark (every thread of the block reaches it).
- Inside a thread, a loop with a constant trip count of at most
  :data:`UNROLLED_TRIP_COUNT` (a thread tile's points) is unrolled here, whatever loops
  it holds, so that a promoted accumulator tile is indexed by constants (registers).

Float arithmetic carries the flags of the CPU's (:func:`polytf.targets.statement_codegen.float_flags`):
``contract`` (``fma.rn.f32``; plain fmul/fadd never fuse on NVPTX), and every fast-math flag
only with ``fast_math``; ``llvm.maximum`` becomes ``max.NaN.f32`` on sm_80 and later.
"""

from __future__ import annotations

from collections.abc import Mapping

import llvmlite.ir as ir

from polytf.errors import CodegenError
from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr, affine_of_ast
from polytf.poly.scop import Scop
from polytf.schedules.gpu_grid import GpuLaunch, HardwareCoordinate
from polytf.schedules.gpu_memory import SHARED_ALIGNMENT, shared_array_bytes
from polytf.schedules.marks import BarrierMark, GpuMark, mark_of
from polytf.targets.llvm_codegen import KernelModuleBuilder, _children
from polytf.targets.statement_codegen import F32, I32, I64, MEMORY_TYPES

#: address spaces of NVPTX (LLVM NVPTX usage guide, "Address Spaces")
GLOBAL, SHARED = 1, 3
SHARED_SYMBOL = "polytf_shared"
#: alignment of every global buffer a kernel takes, bytes (``align`` on its parameters)
ARGUMENT_ALIGNMENT = 16
#: loops inside a thread with at most this many iterations (a constant) are unrolled by
#: the code generator (thread tiles are at most 8 points per dimension)
UNROLLED_TRIP_COUNT = 8


def kernel_names(kernel: str, launch: GpuLaunch) -> tuple[str, ...]:
    """The PTX entry of each launch, in order: ``<kernel>_copy<i>`` for the prologue's
    copies, ``<kernel>`` for the kernel itself."""
    return (*(f"{kernel}_copy{i}" for i in range(len(launch.prologue))), kernel)


def global_arrays(scop: Scop, launch: GpuLaunch) -> tuple:
    """The kernel's arguments: the arrays of ``scop`` in neither shared memory nor registers, in order."""
    private = {name for name, _ in launch.private_arrays}
    return tuple(a for a in scop.arrays if a.name not in launch.shared_arrays and a.name not in private)


class NvptxModuleBuilder(KernelModuleBuilder):
    """Builds the NVPTX module of one GPU-mapped kernel.

    Args:
        scop: the scheduled Scop (staging copies and shared arrays included).
        ast: the isl AST of its GPU schedule tree.
        launch: the grid, block and shared arrays of the schedule.
        unroll: unroll count of innermost loops (0: LLVM decides).
        fast_math: all fast-math flags on float arithmetic (else ``contract`` only).
    """

    def __init__(self, scop: Scop, ast: isl.AstNode, launch: GpuLaunch, *, unroll: int = 0, fast_math: bool = False) -> None:
        super().__init__(scop, ast, vector_width=0, unroll=unroll, parallel=False, fast_math=fast_math)
        self.launch = launch
        self.arguments = global_arrays(scop, launch)
        #: AST iterator -> ("block" | "thread", hardware dimension) inside the marks being emitted
        self._mapped_iterators: dict[str, tuple[str, str]] = {}
        #: the hardware dimensions bound by an enclosing mapped loop, per kind
        self._bound: dict[str, set[str]] = {"block": set(), "thread": set()}
        #: the kinds of marks the builder is inside
        self._inside: list[str] = []
        self._hardware: dict[tuple[str, str], ir.Value] = {}
        self._private_tiles: dict[str, tuple[int, ...]] = {}

    def build(self) -> ir.Module:
        """Emit the module: one kernel per launch (:func:`kernel_launches`).

        Raises:
            CodegenError: an AST construct it cannot translate, or a barrier inside a threads mark.
        """
        for node, launch, name in self.phases():
            self.launch = launch
            self._emit_kernel(node, name)
        return self.module

    def phases(self) -> list[tuple[isl.AstNode, GpuLaunch, str]]:
        """``(AST node, launch, kernel name)`` of each launch, in order: the prologue's
        data-layout copies (the AST's first top-level nodes), then the kernel itself."""
        main = self.launch
        if not main.prologue:
            return [(self.ast, main, self.scop.name)]
        children = _children(self.ast)
        if len(children) != len(main.prologue) + 1:
            raise CodegenError(f"kernel {self.scop.name}: {len(main.prologue)} copy launches and the kernel, but the AST has {len(children)} top-level nodes")
        names = kernel_names(self.scop.name, main)
        return [(node, launch, name) for node, launch, name in zip(children, (*main.prologue, main), names)]

    def _emit_kernel(self, node: isl.AstNode, name: str) -> None:
        self.pointers = {}
        self._hardware = {}
        self.loop_ranges = {}
        function = self._kernel_function(name)
        self.entry_block = function.append_basic_block("entry")
        entry = ir.IRBuilder(self.entry_block)
        self._read_hardware(entry, function)
        self._bind_shared(entry, function)
        self._bind_private(entry)
        self.builder = ir.IRBuilder(function.append_basic_block("start"))
        self._emit_node(node, {})
        self.builder.ret_void()
        entry.branch(function.blocks[1])

    def _kernel_function(self, name: str) -> ir.Function:
        """The ``ptx_kernel`` function, one ``addrspace(1)`` pointer per global array."""
        types = [ir.PointerType(MEMORY_TYPES[a.dtype], addrspace=GLOBAL) for a in self.arguments]
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), types), name=name)
        function.calling_convention = "ptx_kernel"
        for argument, array in zip(function.args, self.arguments):
            argument.name = array.name
            argument.add_attribute("noalias")
            # every buffer is 16-byte aligned (CudaKernel checks it): 128-bit accesses
            argument.attributes.align = ARGUMENT_ALIGNMENT
            self.pointers[array.name] = argument
        return function

    def _read_hardware(self, entry: ir.IRBuilder, function: ir.Function) -> None:
        """``blockIdx`` and ``threadIdx`` as i64 values, read once in the entry block."""
        for kind, register in (("block", "ctaid"), ("thread", "tid")):
            for dimension in "xyz":
                reader = self._declare(f"llvm.nvvm.read.ptx.sreg.{register}.{dimension}", I32, [])
                self._hardware[kind, dimension] = entry.zext(entry.call(reader, []), I64, name=f"{register}.{dimension}")

    def _bind_shared(self, entry: ir.IRBuilder, function: ir.Function) -> None:
        """Each shared array: a slice of the dynamic shared memory, aligned to SHARED_ALIGNMENT bytes."""
        if not self.launch.shared_arrays:
            return
        storage = ir.GlobalVariable(self.module, ir.ArrayType(F32, 0), SHARED_SYMBOL, addrspace=SHARED)
        storage.linkage = "external"
        storage.align = SHARED_ALIGNMENT
        offset = 0  # in float32 elements
        for name in self.launch.shared_arrays:
            array = self.scop.array(name)
            if array.dtype != "float32":
                raise CodegenError(f"kernel {self.scop.name}: shared array {name} has dtype {array.dtype}; shared memory holds float32")
            self.pointers[name] = entry.gep(storage, [ir.Constant(I32, 0), ir.Constant(I64, offset)], inbounds=True, name=name)
            offset += shared_array_bytes(array) // 4

    def _bind_private(self, entry: ir.IRBuilder) -> None:
        """Each private array: a thread's tile of it, on the stack (promoted to registers by
        SROA once the point loops are unrolled and its indices are constants)."""
        self._private_tiles = dict(self.launch.private_arrays)
        for name, tile in self.launch.private_arrays:
            count = 1
            for extent in tile:
                count *= extent
            storage = entry.alloca(ir.ArrayType(MEMORY_TYPES[self.scop.array(name).dtype], count), name=name)
            self.pointers[name] = entry.gep(storage, [ir.Constant(I32, 0), ir.Constant(I64, 0)], inbounds=True)

    def _address(self, array: str, index: tuple, point: Mapping[str, ir.Value], dynamic: ir.Value | None = None) -> ir.Value:
        tile = self._private_tiles.get(array)
        if tile is None:
            return super()._address(array, index, point, dynamic)
        # a thread's points of d_k are T_k consecutive values from a multiple of T_k: d_k mod T_k
        b = self.builder
        offset = ir.Constant(I64, 0)
        for expression, extent in zip(index, tile):
            (iterator,) = expression.iterators
            local = b.urem(point[iterator], ir.Constant(I64, extent)) if extent > 1 else ir.Constant(I64, 0)
            offset = b.add(b.mul(offset, ir.Constant(I64, extent)), local)
        return b.gep(self.pointers[array], [offset], inbounds=True)

    def _emit_barrier(self) -> None:
        self.builder.call(self._declare("llvm.nvvm.barrier0", ir.VoidType(), []), [])

    # -- AST nodes -------------------------------------------------------------------------
    def _emit_node(self, node: isl.AstNode, env: dict[str, ir.Value]) -> None:
        if node.get_type() != isl.ast_node_type.mark:
            super()._emit_node(node, env)
            return
        mark = mark_of(node)
        if isinstance(mark, BarrierMark):
            if "thread" in self._inside:
                raise CodegenError(f"kernel {self.scop.name}: a barrier inside a threads mark (not every thread would reach it)")
            self._emit_node(node.mark_get_node(), env)
            self._emit_barrier()
            return
        if not isinstance(mark, GpuMark):
            super()._emit_node(node, env)
            return
        kind = "block" if mark.kind == "blocks" else "thread"
        saved = dict(self._mapped_iterators)
        for iterator, hardware in zip(mark.iterators, mark.hardware):
            self._mapped_iterators[iterator] = (kind, hardware)
        self._inside.append(kind)
        self._emit_node(node.mark_get_node(), env)
        self._inside.pop()
        self._mapped_iterators = saved

    def _emit_for(self, node: isl.AstNode, env: dict[str, ir.Value], distribute: bool) -> None:
        iterator = node.for_get_iterator().get_id().get_name()
        mapped = self._mapped_iterators.get(iterator)
        if mapped is None:
            trips = bounded_trip_count(node) if "thread" in self._inside else None
            if trips is not None and trips[0] <= UNROLLED_TRIP_COUNT:
                self._emit_unrolled(node, iterator, trips, env)
            else:
                super()._emit_for(node, env, distribute)
            return
        kind, hardware = mapped
        step = node.for_get_inc()
        if step.get_type() != isl.ast_expr_type.int or step.int_get_val().to_python() != 1:
            raise CodegenError(f"kernel {self.scop.name}: mapped loop {iterator} has step {step.to_C_str()}, not 1")
        b = self.builder
        value = self._hardware[kind, hardware]
        inner = dict(env)
        inner[iterator] = value
        start = self._expression(node.for_get_init(), env)
        inside = b.and_(b.icmp_signed("<=", start, value), self._expression(node.for_get_cond(), inner))
        self.loop_ranges.pop(iterator, None)
        bound = self._bound[kind]
        added = hardware not in bound
        bound.add(hardware)
        with b.if_then(inside):
            self._emit_node(node.for_get_body(), inner)
        if added:
            bound.discard(hardware)

    def _emit_unrolled(self, node: isl.AstNode, iterator: str, trips: tuple[int, AffineExpr, bool], env: dict[str, ir.Value]) -> None:
        """A loop of at most ``count`` iterations from ``start`` inside a thread (a thread
        tile's points, a short filter row; :func:`bounded_trip_count`), emitted ``count``
        times with the iterator ``start + offset``, each copy guarded by the loop's own
        bounds unless they are exactly that range: its accesses of a private tile get
        constant indices (registers, not stack), however deep the loops below it (LLVM's
        unroller only takes innermost loops whole)."""
        count, start_form, exact = trips
        b = self.builder
        start = self.materialize(start_form, env)
        lower = None if exact else self._expression(node.for_get_init(), env)
        self.loop_ranges.pop(iterator, None)
        for offset in range(count):
            inner = dict(env)
            inner[iterator] = b.add(start, ir.Constant(I64, offset), name=f"{iterator}.{offset}")
            if exact:
                self._emit_node(node.for_get_body(), inner)
                continue
            inside = b.and_(b.icmp_signed("<=", lower, inner[iterator]), self._expression(node.for_get_cond(), inner))
            with b.if_then(inside):
                self._emit_node(node.for_get_body(), inner)

    def _emit_statement(self, call: isl.AstExpr, env: Mapping[str, ir.Value]) -> None:
        name = call.op_get_arg(0).id_get_id().get_name()
        mapping = self.launch.mapping_of(name)
        statement = self.statements.get(name)
        guards: list[HardwareCoordinate] = []
        if mapping is not None and statement is not None:
            # along a hardware dimension of extent 1 every coordinate is 0: nothing to guard
            grid = dict(zip("xyz", self.launch.grid))
            block = dict(zip("xyz", self.launch.block))
            if "block" in self._inside:
                guards += [c for c in mapping.blocks if c.hardware not in self._bound["block"] and grid[c.hardware] > 1]
            if "thread" in self._inside:
                guards += [c for c in mapping.threads if c.hardware not in self._bound["thread"] and block[c.hardware] > 1]
        if not guards:
            super()._emit_statement(call, env)
            return
        b = self.builder
        point = {it: self._expression(call.op_get_arg(i + 1), env) for i, it in enumerate(statement.iterators)}
        condition = None
        for coordinate in guards:
            kind = "block" if coordinate in mapping.blocks else "thread"
            equal = b.icmp_signed("==", self._hardware[kind, coordinate.hardware], self._coordinate(coordinate, point))
            condition = equal if condition is None else b.and_(condition, equal)
        with b.if_then(condition):
            super()._emit_statement(call, env)

    def _coordinate(self, coordinate: HardwareCoordinate, point: Mapping[str, ir.Value]) -> ir.Value:
        """The i64 block or thread coordinate of the instance at ``point`` (floor division and
        non-negative remainder by the coordinate's constants)."""
        if coordinate.folded:
            total = ir.Constant(I64, 0)
            for name, divisor, stride in coordinate.folded:
                part = self.floor_div_or_mod(point[name], divisor, False) if divisor != 1 else point[name]
                total = self.builder.add(total, self.builder.mul(part, ir.Constant(I64, stride)))
            return total
        if not coordinate.iterator:
            return ir.Constant(I64, 0)
        value = point[coordinate.iterator]
        if coordinate.modulus:
            value = self.floor_div_or_mod(value, coordinate.modulus, True)
        if coordinate.divisor != 1:
            value = self.floor_div_or_mod(value, coordinate.divisor, False)
        if coordinate.cycle:
            value = self.floor_div_or_mod(value, coordinate.cycle, True)
        return value


def _affine_parts(expression: isl.AstExpr, combiner) -> list[AffineExpr] | None:
    """``expression`` as an affine expression (one), or the arguments of a ``combiner``
    (``max``/``min``) node; None when one is not affine."""
    if expression.get_type() == isl.ast_expr_type.op and expression.op_get_type() == combiner:
        parts = [affine_of_ast(expression.op_get_arg(i), {}) for i in range(expression.op_get_n_arg())]
    else:
        parts = [affine_of_ast(expression, {})]
    return None if any(p is None for p in parts) else parts


def bounded_trip_count(node: isl.AstNode) -> tuple[int, AffineExpr, bool] | None:
    """``(count, start, exact)`` for a unit-step ``for`` node whose iterations lie in
    ``[start, start + count)`` for an affine ``start`` (one of the arguments of its lower
    bound, a ``max``) and a constant ``count`` (some argument of its upper bound, a ``min``,
    minus ``start`` is constant): ``for (c = max(4 * t, 1 - k); c <= min(4 * t + 3, 56 - k);
    c += 1)`` gives 4 from ``4 * t``, not exact. Exact when the bounds are that pair alone.
    None for other loops."""
    step = node.for_get_inc()
    if step.get_type() != isl.ast_expr_type.int or step.int_get_val().to_python() != 1:
        return None
    condition = node.for_get_cond()
    if condition.get_type() != isl.ast_expr_type.op or condition.op_get_type() not in (isl.ast_expr_op_type.le, isl.ast_expr_op_type.lt):
        return None
    iterator = node.for_get_iterator().get_id().get_name()
    if affine_of_ast(condition.op_get_arg(0), {}) != AffineExpr.of(iterator):
        return None
    starts = _affine_parts(node.for_get_init(), isl.ast_expr_op_type.max)
    bounds = _affine_parts(condition.op_get_arg(1), isl.ast_expr_op_type.min)
    if starts is None or bounds is None:
        return None
    inclusive = 1 if condition.op_get_type() == isl.ast_expr_op_type.le else 0
    best = None
    for start in starts:
        for bound in bounds:
            difference = bound - start
            if difference.is_constant and (best is None or difference.constant + inclusive < best[0]):
                best = (difference.constant + inclusive, start)
    if best is None or best[0] <= 0:
        return None
    return best[0], best[1], len(starts) == 1 and len(bounds) == 1


__all__ = ["GLOBAL", "SHARED", "SHARED_SYMBOL", "ARGUMENT_ALIGNMENT", "NvptxModuleBuilder", "global_arrays", "kernel_names", "bounded_trip_count"]
