"""Emits statement instances into LLVM IR: the statement body, its addresses, and the isl
AST expressions of loop bounds and statement arguments.

One instance of a statement ``S[i, j]: W[f(i, j)] = e(A[g(i, j)], ...)`` called by the
loop AST as ``S(c0, c1 + 2)`` becomes straight-line code at the builder's position::

    i, j = c0, c1 + 2                        (isl AST expressions, i64)
    e = ... load A[g(i, j)] ...              (the body's expression tree, typed values)
    store e -> W + f(i, j)                   (row-major offset, inbounds GEP)

Values follow the dtypes of :mod:`polytf.poly.expression`: float32 as ``float``, int32 and
int64 as ``i32``/``i64``, bool as ``i1`` in registers and one byte in memory. Index
expressions are evaluated as i64 with ``nsw`` arithmetic; a quasi-affine index whose
numerator stays inside one block of its divisor (known from constant loop bounds, while the
statement's arguments are affine in the loop iterators) becomes affine
(:func:`polytf.poly.affine.index_affine`), which LLVM can vectorise, otherwise a run-time
floor division. Unary operators are LLVM intrinsics or the straight-line functions of
:mod:`polytf.targets.math_functions`; integer division never traps (TensorFlow's ``Div``,
``FloorDiv``, ``FloorMod``).

Float semantics are TensorFlow's (NaN and ±inf propagate as in its CPU kernels), so float
arithmetic carries only the fast-math flags that cannot change a NaN, an infinity or a
signed zero (:func:`float_flags`, LLVM LangRef "Fast-Math Flags"):

* ``contract`` everywhere (fused multiply-add: one rounding instead of two);
* ``reassoc`` in addition on the accumulating operation of a reduction
  (``C = C + ...``, ``C = C * ...``), so that LLVM may vectorise it: polytf reorders a
  reduction by tiling and vectorising anyway, and TensorFlow's Eigen reductions use a tree
  order of their own;
* ``nsz`` in addition on ``maximum``/``minimum`` (``llvm.maximum``/``llvm.minimum``): which
  zero ``max(-0, +0)`` returns is not defined by TensorFlow either (its scalar and vector
  paths differ), and with it ``maximum(x, 0)`` is one ``maxps`` on x86.

Not ``nnan``/``ninf`` (LLVM may then assume no operand is NaN or infinite: ``Relu(NaN)``
became 0), ``nsz`` elsewhere (``-(a - b)`` may become ``b - a``, whose zero has the other
sign, and ``1 / x`` the other infinity), ``arcp`` (``x / y`` as ``x * (1 / y)`` overflows to
inf for a tiny ``y``) or ``afn`` (approximate ``sqrt``/``exp``...). ``fast_math`` (opt-in,
:class:`polytf.config.CodegenConfig`) puts every flag (``fast``) on every operation, as
before, like XLA's ``xla_cpu_enable_fast_math``: faster, and NaN and infinities are then
undefined (``IsNan`` and ``CheckNumerics`` among others no longer hold).

Denormals are zero, as in TensorFlow's CPU kernels (``tensorflow/core/platform/denormal.h``,
``ScopedFlushDenormal``): a kernel body runs with x86's flush-to-zero and
denormals-are-zero modes set (:class:`polytf.targets.llvm_codegen.KernelModuleBuilder`'s
``flush_denormals``), so ``1 / 1e-38`` and ``log`` of a denormal are ±inf in both;
``CodegenConfig(ieee_denormals=True)`` keeps IEEE gradual underflow instead.

:class:`StatementEmitter` is the base of the module builders
(:class:`polytf.targets.llvm_codegen.KernelModuleBuilder`, and through it the NVPTX one),
which own the functions and loops; the micro-kernel emitter
(:mod:`polytf.targets.microkernel`) uses its address and AST-expression helpers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import llvmlite.ir as ir

from polytf.errors import CodegenError
from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, Modulo, affine_of_ast, index_affine
from polytf.poly.expression import (
    INTEGER_BINARY_OPS,
    Binary,
    Compare,
    Constant,
    Convert,
    Expr,
    FloatTest,
    Gather,
    Load,
    Logical,
    Select,
    Unary,
)
from polytf.poly.scop import Scop
from polytf.targets.math_functions import MATH_FUNCTIONS, math_function

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
I8 = ir.IntType(8)
#: element type in memory of each dtype generated code handles (bool: one byte, as numpy's)
MEMORY_TYPES = {"float32": F32, "int32": I32, "int64": I64, "bool": I8}
#: type of a value in registers (bool: i1)
VALUE_TYPES = {"float32": F32, "int32": I32, "int64": I64, "bool": I1}
#: comparison op -> the LLVM predicate symbol (``fcmp`` ordered, ``!=`` unordered; ``icmp`` signed)
_FLOAT_COMPARISONS = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}


def float_comparison(builder: ir.IRBuilder, op: str, lhs: ir.Value, rhs: ir.Value) -> ir.Value:
    """``op`` (a :data:`~polytf.poly.expression.COMPARE_OPS` name) of two float scalars or
    vectors: NaN is unequal to everything (``not_equal`` true, an unordered compare) and every
    ordering with NaN is false (ordered compares), as in C and TensorFlow."""
    symbol = _FLOAT_COMPARISONS[op]
    return builder.fcmp_unordered(symbol, lhs, rhs) if symbol == "!=" else builder.fcmp_ordered(symbol, lhs, rhs)

@functools.cache
def _comparisons() -> dict:
    """isl's comparison operators of an AST expression -> LLVM's integer predicate (made on
    first use: islpy is imported on demand, :mod:`polytf.islpy_on_demand`)."""
    return {
        isl.ast_expr_op_type.eq: "==",
        isl.ast_expr_op_type.le: "<=",
        isl.ast_expr_op_type.lt: "<",
        isl.ast_expr_op_type.ge: ">=",
        isl.ast_expr_op_type.gt: ">",
    }

#: Fast-math flags of float arithmetic (module docstring): ``contract`` only by default.
DEFAULT_FLAGS = ("contract",)
#: With :attr:`polytf.config.CodegenConfig.fast_math`: every flag, NaN and inf undefined.
FAST_FLAGS = ("fast",)
#: Added on the accumulating operation of a reduction, ``C = C + ...`` or ``C = C * ...``.
REDUCTION_FLAGS = ("reassoc",)
#: Added on ``maximum``/``minimum``: the sign of ``max(-0, +0)`` is not defined.
MAXIMUM_FLAGS = ("nsz",)


def float_flags(fast_math: bool) -> tuple[str, ...]:
    """The fast-math flags of float arithmetic: ``("fast",)`` with ``fast_math``, else
    ``("contract",)`` (module docstring)."""
    return FAST_FLAGS if fast_math else DEFAULT_FLAGS


def with_flags(flags: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` and ``extra`` (nothing added to ``fast``, which has them all)."""
    return flags if "fast" in flags else flags + tuple(f for f in extra if f not in flags)


def accumulation(statement) -> Binary | None:
    """The accumulating operation of a reduction statement, ``C = C + e`` or ``C = C * e``
    (float ``add``/``mul`` with the written element as an operand), else None."""
    value = statement.value
    if isinstance(value, Binary) and value.op in ("add", "mul") and statement.reduction_iterators and statement.is_reduction:
        if Load(statement.write) in (value.lhs, value.rhs):
            return value
    return None


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


class StatementEmitter:
    """Emits statement instances and isl AST expressions at ``builder``'s position.

    A subclass creates the function and sets ``builder`` (the position), ``pointers``
    (array name -> the function's argument for it) and ``loop_ranges`` (the constant bounds
    of the enclosing loops, by AST iterator) before it emits a statement.

    Args:
        scop: the statements and arrays.
        fast_math: every fast-math flag on float arithmetic (:func:`float_flags`).

    Raises:
        CodegenError: an array has a dtype generated code does not handle.
    """

    def __init__(self, scop: Scop, *, fast_math: bool = False) -> None:
        for array in scop.arrays:
            if array.dtype not in MEMORY_TYPES:
                raise CodegenError(
                    f"kernel {scop.name}: array {array.name} ({array.tensor}) has dtype {array.dtype}; generated code handles {', '.join(MEMORY_TYPES)}"
                )
        self.scop = scop
        self.flags = float_flags(fast_math)
        #: while a reduction statement is emitted: its accumulating operation (``reassoc``)
        self._accumulation: Binary | None = None
        self.module = ir.Module(name=scop.name)
        self.statements = {s.name: s for s in scop.statements}
        self.strides = {a.name: _row_major_strides(a.shape) for a in scop.arrays}
        self.dtypes = {a.name: a.dtype for a in scop.arrays}
        self.builder: ir.IRBuilder | None = None
        self.pointers: dict[str, ir.Value] = {}
        #: constant bounds of the enclosing loops whose bounds are constants
        self.loop_ranges: dict[str, tuple[int, int]] = {}
        self._opaque_count = 0
        #: while a statement is emitted: its iterators as affine expressions of the AST
        #: iterators (None when an argument is not affine), and the AST iterators' values
        self._point_substitutions: dict[str, AffineExpr] | None = None
        self._point_env: Mapping[str, ir.Value] = {}

    def _emit_statement(self, call: isl.AstExpr, env: Mapping[str, ir.Value]) -> None:
        name = call.op_get_arg(0).id_get_id().get_name()
        statement = self.statements.get(name)
        if statement is None:
            raise CodegenError(f"kernel {self.scop.name}: AST calls unknown statement {name}")
        values = [self._expression(call.op_get_arg(i + 1), env) for i in range(call.op_get_n_arg() - 1)]
        if len(values) != len(statement.iterators):
            raise CodegenError(f"kernel {self.scop.name}: statement {name} called with {len(values)} of {len(statement.iterators)} iterators")
        point = dict(zip(statement.iterators, values))
        forms = [affine_of_ast(call.op_get_arg(i + 1), {}) for i in range(len(values))]
        self._point_substitutions = dict(zip(statement.iterators, forms)) if all(f is not None for f in forms) else None
        self._point_env = env
        self._accumulation = accumulation(statement)
        value = self._value(statement.value, point)
        self._accumulation = None
        dtype = self.dtypes[statement.write.array]
        value = self._convert(value, VALUE_TYPES[dtype])
        if dtype == "bool":
            value = self.builder.zext(value, I8)
        self.builder.store(value, self._address(statement.write.array, statement.write.index, point), align=1 if dtype == "bool" else 4)
        self._point_substitutions = None

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
        if self._point_substitutions is not None:
            form = index_affine(expression, self._point_substitutions, self._range_of)
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

    def _range_of(self, form: AffineExpr) -> tuple[int, int] | None:
        """Constant bounds of an affine expression over loops with constant bounds, else None."""
        return form.bounds(self.loop_ranges)

    def opaque_name(self) -> str:
        """A fresh name for a value an affine expression refers to."""
        self._opaque_count += 1
        return f"%opaque{self._opaque_count}"

    def materialize(self, form: AffineExpr, env: Mapping[str, ir.Value]) -> ir.Value:
        """The i64 value of an affine expression whose names are bound in ``env``."""
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
        float -> int truncates toward zero (NaN, ±inf and values out of the integer's range
        give its lowest value, as TensorFlow's CPU kernel, x86's "integer indefinite": never
        ``fptosi``'s poison), number -> bool is ``!= 0`` (NaN is true), bool -> number 0 or 1."""
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
            limit = float(2 ** (target.width - 1))
            inside = b.and_(b.fcmp_ordered(">=", value, ir.Constant(F32, -limit)), b.fcmp_ordered("<", value, ir.Constant(F32, limit)))
            return b.select(inside, b.fptosi(value, target), ir.Constant(target, -(2 ** (target.width - 1))))
        return b.sext(value, target) if target.width > source.width else b.trunc(value, target)

    def _typed_value(self, expression: Expr, point: Mapping[str, ir.Value]) -> ir.Value:
        """Dispatch for the typed expressions (comparisons, logic, selection, conversion, gathers)."""
        b = self.builder
        if isinstance(expression, Compare):
            lhs, rhs = self._value(expression.lhs, point), self._value(expression.rhs, point)
            if lhs.type != rhs.type:
                lhs, rhs = self._convert(lhs, F32), self._convert(rhs, F32)
            if lhs.type == F32:
                return float_comparison(b, expression.op, lhs, rhs)
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
        if isinstance(expression, FloatTest):
            return self.float_test(expression.test, self._convert(self._value(expression.operand, point), F32))
        if isinstance(expression, Gather):
            # clamped into the table: no index value reads outside it (the runtime refuses bad ones first)
            position = self._convert(self._value(expression.index, point), I64)
            low, high = ir.Constant(I64, 0), ir.Constant(I64, expression.extent - 1)
            position = b.select(b.icmp_signed("<", position, low), low, position)
            position = b.select(b.icmp_signed(">", position, high), high, position)
            access = expression.table.access
            return self._load(access.array, access.index, point, position)
        raise CodegenError(f"kernel {self.scop.name}: cannot generate code for expression {expression!r}")

    def float_test(self, test: str, value: ir.Value) -> ir.Value:
        """``isnan``/``isinf``/``isfinite`` of a float (or float vector) as i1: ``value``
        unordered with itself; ``|value| == inf``; ``|value|`` ordered and ``!= inf``."""
        b = self.builder
        if test == "nan":
            return b.fcmp_unordered("uno", value, value)
        infinity = ir.Constant(value.type, float("inf")) if value.type == F32 else ir.Constant(value.type, [float("inf")] * value.type.count)
        magnitude = b.call(self._declare(f"llvm.fabs.{_type_suffix(value.type)}", value.type, [value.type]), [value])
        return b.fcmp_ordered("==" if test == "inf" else "!=", magnitude, infinity)

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
        if isinstance(expression, (Compare, Logical, Select, Convert, FloatTest, Gather)):
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
                return b.fneg(operand)  # a sign flip: no flag makes it faster
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
                flags = with_flags(self.flags, MAXIMUM_FLAGS) if expression.op in ("maximum", "minimum") else self.flags
                return b.call(self._intrinsic(_INTRINSICS[expression.op], 2), [lhs, rhs], fastmath=flags)
            emit = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv, "fmod": b.frem}[expression.op]
            flags = with_flags(self.flags, REDUCTION_FLAGS) if expression is self._accumulation else self.flags
            return emit(lhs, rhs, flags=flags)
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
        if op in _comparisons():
            return b.icmp_signed(_comparisons()[op], values[0], values[1])
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



def _type_suffix(value_type: ir.Type) -> str:
    """LLVM's intrinsic suffix of a float or float-vector type: ``f32``, ``v8f32``."""
    return f"v{value_type.count}f32" if isinstance(value_type, ir.VectorType) else "f32"


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    running = 1
    for extent in reversed(shape):
        strides.append(running)
        running *= int(extent)
    return tuple(reversed(strides))


__all__ = [
    "I1", "I8", "I32", "I64", "F32", "MEMORY_TYPES", "VALUE_TYPES", "float_comparison", "DEFAULT_FLAGS", "FAST_FLAGS", "MAXIMUM_FLAGS", "REDUCTION_FLAGS",
    "StatementEmitter", "accumulation", "float_flags", "with_flags",
]
