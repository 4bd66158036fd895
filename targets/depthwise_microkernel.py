"""The depthwise micro-kernel: a row of outputs x a vector of channels in registers across the taps.

A depthwise convolution (TensorFlow ``DepthwiseConv2dNative`` with channel multiplier 1,
tensorflow/core/ops/nn_ops.cc; a grouped convolution of one channel per group) does ``KH x KW``
multiply-adds per output element and reads each input element ``KH x KW`` times: it is bound
by memory, not by the FMA units, once every operand is streamed once. Its Scop, recognised
from its statements and access relations (:mod:`polytf.targets.depthwise_pattern`: init
``O = z``, update ``O += I * F`` over the taps inside the input, elementwise epilogue
statements ``T_k = e_k(...)``), is emitted as XNNPACK's and oneDNN's depthwise kernels are
written (Dukhan, "The Indirect Convolution Algorithm", 2019; oneDNN ``jit_uni_dw_conv_kernel``)::

    for row in this thread's rows of [0, N*OH):              contiguous chunk per OpenMP thread
      for tile of R output columns (left border, interior tiles, right border):
        for channel block of V vectors of L lanes (the last one masked when L does not divide C):
          for each vector c0 of the block:                   R accumulators, a filter row, one input vector live
            acc[R] = z                                       S_init, in registers
            for kh with 0 <= sh*oh + dh*kh - pt < H:         rows of the padding skipped
              f[kw] = F[kh, kw, c0 : c0 + L] for every kw    one filter vector per tap
              for each input column x the tile reads:        loaded once, unrolled
                acc[r] += I[.., x, c0 : c0 + L] * f[kw]      for each (r, kw) with sw*(ow0 + r) + dw*kw - pl = x
                                                             whose tap is inside the input (known when compiling)
            T_k = e_k(acc, T_j, ...)                         the epilogue on the registers
            O, T_k[n, oh, ow0 + r, c0 : c0 + L] = ...        one store per output vector (not temporaries)

An epilogue statement whose expression is no float arithmetic (a selection: LeakyRelu, Elu,
ClipByValue) and all after it run element by element with the generic statement code after the
tile's store. Each output vector is written once (no zeroing pass, no epilogue pass), the
input is read in place (no zero-padded copy: the border columns are tiles whose out-of-image
taps are left out when compiling, the border rows are skipped at run time), and an input
vector the taps of neighbouring columns share is loaded once per filter row of a tile.

The kernel is used when the recipe asks for the direct algorithm with a register tile over
the output's last two dimensions (``R x V*L``: ``register_tile_sizes``) and no zero-padded
copy (``pad=False``): :func:`~polytf.targets.depthwise_pattern.depthwise_plan` finds the tile in
the AST's micro-kernel mark. Anything else (a channel multiplier above 1, whose channel
index is a floor division; a fused op that is not elementwise on the output) is left to the
generic emitter.
"""

from __future__ import annotations

import llvmlite.ir as ir

from polytf.poly.affine import AffineExpr, substitute
from polytf.poly.expression import Binary, Constant, Expr, Load, Unary
from polytf.targets.depthwise_pattern import DepthwisePlan, row_major_offset, row_major_strides
from polytf.targets.math_functions import MATH_FUNCTIONS, math_function
from polytf.targets.microkernel import _VECTOR_INTRINSICS
from polytf.targets.statement_codegen import F32, I32, I64, MAXIMUM_FLAGS, REDUCTION_FLAGS, with_flags

__all__ = ["emit_depthwise_body"]


class _Emitter:
    """Emits one plan into the body function of a KernelModuleBuilder (``generator``)."""

    def __init__(self, generator, plan: DepthwisePlan) -> None:
        self.g = generator
        self.b = generator.builder
        self.plan = plan
        self.p = plan.pattern
        requested = generator.vector_width if generator.vector_width > 0 else generator.native_vector_width
        self.lanes = next((w for w in (16, 8, 4, 2) if w <= requested and plan.columns % w == 0), 1)
        self.vectors = max(1, plan.columns // self.lanes)
        self.vector = ir.VectorType(F32, self.lanes)
        self.flags = generator.flags
        self.names = dict(zip(("n", "oh", "ow", "c", "kh", "kw"), self.p.iterators))

    # -- values ------------------------------------------------------------------------
    def splat(self, value: float | ir.Value) -> ir.Value:
        if not isinstance(value, ir.Value):
            return ir.Constant(self.vector, [float(value)] * self.lanes)
        b = self.b
        single = b.insert_element(ir.Constant(self.vector, ir.Undefined), value, ir.Constant(I32, 0))
        return b.shuffle_vector(
            single, ir.Constant(self.vector, ir.Undefined), ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes)
        )

    def mask(self, active: int) -> ir.Value | None:
        if active == self.lanes:
            return None
        return ir.Constant(ir.VectorType(ir.IntType(1), self.lanes), [lane < active for lane in range(self.lanes)])

    def pointer(self, array: str, offset: ir.Value) -> ir.Value:
        element = self.b.gep(self.g.pointers[array], [offset], inbounds=True)
        return self.b.bitcast(element, self.vector.as_pointer())

    def load(self, array: str, offset: ir.Value, active: int) -> ir.Value:
        mask = self.mask(active)
        if mask is None:
            return self.b.load(self.pointer(array, offset), align=4)
        intrinsic = self.g._declare(
            f"llvm.masked.load.v{self.lanes}f32.p0", self.vector, [self.vector.as_pointer(), I32, mask.type, self.vector]
        )
        return self.b.call(intrinsic, [self.pointer(array, offset), ir.Constant(I32, 4), mask, self.splat(0.0)])

    def store(self, value: ir.Value, array: str, offset: ir.Value, active: int) -> None:
        mask = self.mask(active)
        if mask is None:
            self.b.store(value, self.pointer(array, offset), align=4)
            return
        intrinsic = self.g._declare(
            f"llvm.masked.store.v{self.lanes}f32.p0", ir.VoidType(), [self.vector, self.vector.as_pointer(), I32, mask.type]
        )
        self.b.call(intrinsic, [value, self.pointer(array, offset), ir.Constant(I32, 4), mask])

    def offset(self, form: AffineExpr, env: dict[str, ir.Value], substitutions: dict[str, AffineExpr]) -> ir.Value:
        return self.g.materialize(substitute(form, substitutions), env)

    # -- structure ---------------------------------------------------------------------
    def emit(self, distribute: bool) -> None:
        rows_total = self.p.batch * self.p.height.output_size
        self.g.emit_loop(  # distributed: a block of consecutive rows per thread (emit_loop)
            "dw.row",
            ir.Constant(I64, 0),
            ir.Constant(I64, 1),
            lambda env: self.b.icmp_signed("<", env["dw.row"], ir.Constant(I64, rows_total)),
            {},
            self.emit_row,
            distribute,
            trip_count=rows_total,
        )

    def emit_row(self, env: dict[str, ir.Value]) -> None:
        b, p = self.b, self.p
        row = env["dw.row"]
        output_rows = ir.Constant(I64, p.height.output_size)
        env = dict(env, **{"dw.n": b.udiv(row, output_rows), "dw.oh": b.urem(row, output_rows)})
        width = p.width
        interior = [o for o in range(width.output_size) if len(width.valid_taps(o)) == width.taps]
        first, last = (interior[0], interior[-1] + 1) if interior else (width.output_size, width.output_size)
        border_left = list(range(0, min(first, width.output_size)))
        border_right = list(range(max(last, first), width.output_size))
        for columns in self.chunks(border_left):
            self.emit_tile(env, ir.Constant(I64, columns[0]), [width.valid_taps(o) for o in columns])
        full_tiles, remainder = divmod(last - first, self.plan.rows)
        if full_tiles:
            taps = [tuple(range(width.taps))] * self.plan.rows

            def tile(inner: dict[str, ir.Value]) -> None:
                column = self.b.add(ir.Constant(I64, first), self.b.mul(inner["dw.tile"], ir.Constant(I64, self.plan.rows)))
                self.emit_tile(inner, column, taps)

            self.g.emit_loop(
                "dw.tile",
                ir.Constant(I64, 0),
                ir.Constant(I64, 1),
                lambda inner: self.b.icmp_signed("<", inner["dw.tile"], ir.Constant(I64, full_tiles)),
                env,
                tile,
            )
        if remainder:
            self.emit_tile(env, ir.Constant(I64, first + full_tiles * self.plan.rows), [tuple(range(width.taps))] * remainder)
        for columns in self.chunks(border_right):
            self.emit_tile(env, ir.Constant(I64, columns[0]), [width.valid_taps(o) for o in columns])

    def chunks(self, columns: list[int]) -> list[list[int]]:
        return [columns[i : i + self.plan.rows] for i in range(0, len(columns), self.plan.rows)]

    def emit_tile(self, env: dict[str, ir.Value], column: ir.Value, taps: list[tuple[int, ...]]) -> None:
        """Every channel block of the tile of ``len(taps)`` columns starting at ``column``
        (``taps[r]``: the valid taps of column ``r``)."""
        p = self.p
        block = self.vectors * self.lanes
        full_blocks, rest = divmod(p.channels, block)
        env = dict(env, **{"dw.ow": column})
        if full_blocks:

            def channel_block(inner: dict[str, ir.Value]) -> None:
                channel = self.b.mul(inner["dw.block"], ir.Constant(I64, block))
                self.emit_block(dict(inner, **{"dw.c": channel}), taps, [self.lanes] * self.vectors)

            self.g.emit_loop(
                "dw.block",
                ir.Constant(I64, 0),
                ir.Constant(I64, 1),
                lambda inner: self.b.icmp_signed("<", inner["dw.block"], ir.Constant(I64, full_blocks)),
                env,
                channel_block,
            )
        if rest:
            lanes = [self.lanes] * (rest // self.lanes) + ([rest % self.lanes] if rest % self.lanes else [])
            self.emit_block(dict(env, **{"dw.c": ir.Constant(I64, full_blocks * block)}), taps, lanes)

    def emit_block(self, env: dict[str, ir.Value], taps: list[tuple[int, ...]], lanes: list[int]) -> None:
        """One register tile: ``len(taps)`` columns x ``len(lanes)`` vectors (``lanes[v]`` of
        them active) from ``env["dw.c"]``, one vector column after the other (``len(taps)``
        accumulators, the filter row and one input vector live: no spills): init, the taps,
        the epilogue, the stores."""
        for v, active in enumerate(lanes):
            self.emit_column(dict(env, **{"dw.c": self.b.add(env["dw.c"], ir.Constant(I64, v * self.lanes))}), taps, active)

    def emit_column(self, env: dict[str, ir.Value], taps: list[tuple[int, ...]], active: int) -> None:
        g, b, p = self.g, self.b, self.p
        names = self.names
        slots = [g.alloca(self.vector, name="dw.accumulator") for _ in taps]
        for slot in slots:
            b.store(self.splat(p.initial), slot)
        height = p.height

        def tap_body(inner: dict[str, ir.Value]) -> None:
            bb = self.b
            input_row = bb.sub(
                bb.add(
                    bb.mul(inner["dw.oh"], ir.Constant(I64, height.stride)),
                    bb.mul(inner["dw.kh"], ir.Constant(I64, height.dilation)),
                ),
                ir.Constant(I64, height.pad),
            )
            inside = bb.and_(
                bb.icmp_signed(">=", input_row, ir.Constant(I64, 0)),
                bb.icmp_signed("<", input_row, ir.Constant(I64, height.input_size)),
            )
            with bb.if_then(inside):
                self.emit_taps(inner, taps, active, slots)

        g.emit_loop(
            "dw.kh",
            ir.Constant(I64, 0),
            ir.Constant(I64, 1),
            lambda inner: self.b.icmp_signed("<", inner["dw.kh"], ir.Constant(I64, height.taps)),
            env,
            tap_body,
        )
        point = {names["n"]: AffineExpr.of("dw.n"), names["oh"]: AffineExpr.of("dw.oh"), names["c"]: AffineExpr.of("dw.c")}
        output_strides = row_major_strides(g.scop.array(p.output).shape)
        offset = AffineExpr()
        for index, stride in zip(p.update.write.index, output_strides):
            offset = offset + index * stride
        for r, slot in enumerate(slots):
            point[names["ow"]] = AffineExpr.of("dw.ow") + r
            values = {p.output: b.load(slot)}  # the chain's arrays at this point, in registers
            for statement in p.epilogue:
                values[statement.write.array] = self.epilogue_value(statement.value, values, point, env, active)
            for array, value in values.items():
                # temporaries only where the element-by-element statements read them
                if p.scalar_epilogue or g.scop.array(array).role != "temporary":
                    self.store(value, array, self.offset(offset, env, point), active)
            if p.scalar_epilogue:
                self.emit_scalar_epilogue(env, r, active)

    def emit_scalar_epilogue(self, env: dict[str, ir.Value], column: int, active: int) -> None:
        """The statements of ``scalar_epilogue`` on each of the ``active`` elements of the
        vector just stored (column ``column`` of the tile), with the generic statement code."""
        g, b, names = self.g, self.b, self.names
        ow = b.add(env["dw.ow"], ir.Constant(I64, column))
        for lane in range(active):
            point = {
                names["n"]: env["dw.n"],
                names["oh"]: env["dw.oh"],
                names["ow"]: ow,
                names["c"]: b.add(env["dw.c"], ir.Constant(I64, lane)),
            }
            for statement in self.p.scalar_epilogue:
                value = g._convert(g._value(statement.value, point), F32)
                b.store(value, g._address(statement.write.array, statement.write.index, point), align=4)

    def emit_taps(self, env: dict[str, ir.Value], taps: list[tuple[int, ...]], active: int, slots) -> None:
        """The taps ``kw`` of one filter row ``kh``, unrolled: the row's filter vectors loaded
        once, then each input column the tile reads loaded once and multiplied into every
        column's accumulator whose tap it is (``r * sw + kw * dw``: a row of input streamed)."""
        b, p, names = self.b, self.p, self.names
        accumulate = with_flags(self.flags, REDUCTION_FLAGS)
        width = p.width
        channel = AffineExpr.of("dw.c")
        used = sorted({kw for valid in taps for kw in valid})
        weights = {
            kw: self.load(
                p.filter,
                self.offset(
                    p.filter_offset,
                    env,
                    {names["kh"]: AffineExpr.of("dw.kh"), names["kw"]: AffineExpr.of(kw), names["c"]: channel},
                ),
                active,
            )
            for kw in used
        }
        uses: dict[int, list[tuple[int, int]]] = {}
        for r, valid in enumerate(taps):
            for kw in valid:
                uses.setdefault(r * width.stride + kw * width.dilation, []).append((r, kw))
        values = [b.load(slot) for slot in slots]
        for column in sorted(uses):  # input column relative to the tile's first output's first tap
            r, kw = uses[column][0]
            point = {
                names["n"]: AffineExpr.of("dw.n"),
                names["oh"]: AffineExpr.of("dw.oh"),
                names["kh"]: AffineExpr.of("dw.kh"),
                names["ow"]: AffineExpr.of("dw.ow") + r,
                names["kw"]: AffineExpr.of(kw),
                names["c"]: channel,
            }
            image = self.load(p.input, self.offset(p.input_offset, env, point), active)
            for r, kw in uses[column]:
                values[r] = b.fadd(values[r], b.fmul(image, weights[kw], flags=self.flags), flags=accumulate)
        for value, slot in zip(values, slots):
            b.store(value, slot)

    def epilogue_value(
        self, expression: Expr, values: dict[str, ir.Value], point: dict[str, AffineExpr], env, active: int
    ) -> ir.Value:
        """The vector of an epilogue expression at ``point``; ``values``: the vectors of the
        chain's arrays (the output, then what earlier epilogue statements wrote) there."""
        b, flags = self.b, self.flags
        if isinstance(expression, Load):
            access = expression.access
            if access.array in values:
                return values[access.array]
            form = row_major_offset(access, row_major_strides(self.g.scop.array(access.array).shape))
            offset = self.offset(form, env, point)
            if form.coefficient(self.names["c"]) == 0:
                return self.splat(b.load(b.gep(self.g.pointers[access.array], [offset], inbounds=True), align=4))
            return self.load(access.array, offset, active)
        if isinstance(expression, Constant):
            return self.splat(float(expression.value))
        if isinstance(expression, Unary):
            operand = self.epilogue_value(expression.operand, values, point, env, active)
            if expression.op == "neg":
                return b.fneg(operand)
            if expression.op == "square":
                return b.fmul(operand, operand, flags=flags)
            if expression.op == "rsqrt":
                root = b.call(self.intrinsic(_VECTOR_INTRINSICS["sqrt"], 1), [operand], fastmath=flags)
                return b.fdiv(self.splat(1.0), root, flags=flags)
            if expression.op in MATH_FUNCTIONS:
                return b.call(math_function(self.g.module, expression.op, self.vector), [operand])
            return b.call(self.intrinsic(_VECTOR_INTRINSICS[expression.op], 1), [operand], fastmath=flags)
        if isinstance(expression, Binary):
            lhs = self.epilogue_value(expression.lhs, values, point, env, active)
            rhs = self.epilogue_value(expression.rhs, values, point, env, active)
            if expression.op in ("max", "min", "maximum", "minimum"):
                extra = with_flags(flags, MAXIMUM_FLAGS) if expression.op in ("maximum", "minimum") else flags
                return b.call(self.intrinsic(_VECTOR_INTRINSICS[expression.op], 2), [lhs, rhs], fastmath=extra)
            emit = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}[expression.op]
            return emit(lhs, rhs, flags=flags)
        raise TypeError(f"not an elementwise float expression: {expression!r}")  # match_depthwise admits none

    def intrinsic(self, name: str, arity: int) -> ir.Function:
        return self.g._declare(f"{name}.v{self.lanes}f32", self.vector, [self.vector] * arity)


def emit_depthwise_body(generator, plan: DepthwisePlan, distribute: bool) -> None:
    """Emit the kernel body of ``plan`` at ``generator.builder`` (a KernelModuleBuilder's body
    function: ``generator.pointers``, ``thread`` and ``threads`` set); with ``distribute``
    every OpenMP thread runs its own contiguous chunk of the output rows."""
    _Emitter(generator, plan).emit(distribute)
