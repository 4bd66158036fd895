"""The depthwise pattern: a Scop recognised, from its statements and access relations, as a
depthwise convolution with an elementwise epilogue, and the register tile its recipe asks for.

The statements :func:`polytf.ops.conv.convolution_statements` lowers a depthwise convolution
to (TensorFlow ``DepthwiseConv2dNative`` with channel multiplier 1, tensorflow/core/ops/nn_ops.cc;
a grouped convolution of one channel per group), with the elementwise epilogue the fusion pass
adds::

    S_init[n, oh, ow, c]:           O[n, oh, ow, c] = z
    S_update[n, oh, ow, c, kh, kw]: O[n, oh, ow, c] += I[n, sh*oh + dh*kh - pt, sw*ow + dw*kw - pl, c] * F[kh, kw, c, 0]
                                    (domain: the taps inside the input; padding reads nothing)
    S_epilogue_k[n, oh, ow, c]:     T_k[n, oh, ow, c] = e_k(O or T_j<k at [n, oh, ow, c], B[..c..], ...)   (bias, Relu6, ...)

:func:`match_depthwise` checks exactly this (never an op name); :func:`depthwise_plan` adds the
register tile of the AST's micro-kernel mark. :mod:`polytf.targets.depthwise_microkernel`
emits the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr, DynamicIndex
from polytf.poly.expression import Binary, Constant, Expr, Load, Unary
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement, box_set
from polytf.schedules.marks import MicrokernelMark, mark_of
from polytf.targets.math_functions import MATH_FUNCTIONS
from polytf.targets.microkernel import _VECTOR_INTRINSICS

__all__ = [
    "Window",
    "DepthwisePattern",
    "DepthwisePlan",
    "match_depthwise",
    "depthwise_plan",
    "row_major_offset",
    "row_major_strides",
    "VECTOR",
    "SCALAR",
]


@dataclass(frozen=True)
class Window:
    """One spatial dimension of the window: input index ``stride * o + dilation * k - pad``."""

    input_size: int
    output_size: int
    taps: int
    stride: int
    dilation: int
    pad: int

    def valid_taps(self, output: int) -> tuple[int, ...]:
        """The taps ``k`` whose input index at output ``output`` is inside ``[0, input_size)``."""
        return tuple(k for k in range(self.taps) if 0 <= self.stride * output + self.dilation * k - self.pad < self.input_size)


@dataclass(frozen=True)
class DepthwisePattern:
    """A Scop recognised as a depthwise convolution with an elementwise epilogue.

    Attributes:
        output, input, filter: array names (``O``, ``I``, ``F`` of the module docstring).
        batch, channels: ``N`` and ``C``.
        height, width: the windows of ``oh`` and ``ow``.
        iterators: the update's ``(n, oh, ow, c, kh, kw)`` iterator names.
        input_offset, filter_offset: the accesses' row-major element offsets, affine in
            ``iterators``.
        initial: the value the init statement writes (``z``).
        update: the update statement (its multiply-add's flags follow it).
        epilogue: the elementwise statements after the update computed on the registers, in
            program order.
        scalar_epilogue: the elementwise statements after those, run element by element after
            the tile's store (the first that the vector code cannot emit, and all after it).
    """

    output: str
    input: str
    filter: str
    batch: int
    channels: int
    height: Window
    width: Window
    iterators: tuple[str, ...]
    input_offset: AffineExpr
    filter_offset: AffineExpr
    initial: float
    update: Statement
    epilogue: tuple[Statement, ...]
    scalar_epilogue: tuple[Statement, ...] = ()


@dataclass(frozen=True)
class DepthwisePlan:
    """A pattern and the recipe's register tile: ``rows`` output columns x ``columns`` channels."""

    pattern: DepthwisePattern
    rows: int
    columns: int


def row_major_offset(access, strides: tuple[int, ...]) -> AffineExpr | None:
    """Row-major element offset of ``access`` (None when an index is not affine)."""
    total = AffineExpr()
    for index, stride in zip(access.index, strides):
        if not isinstance(index, AffineExpr):
            return None
        total = total + index * stride
    return total


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a row-major array of ``shape`` (``(2, 3, 4)`` -> ``(12, 4, 1)``)."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _window(index: AffineExpr, output: str, tap: str, input_size: int, output_size: int, taps: int) -> Window | None:
    """The window of an input index ``stride * output + dilation * tap - pad``, or None."""
    if set(index.iterators) != {output, tap} or index.coefficient(output) < 1 or index.coefficient(tap) < 1 or index.constant > 0:
        return None
    return Window(input_size, output_size, taps, index.coefficient(output), index.coefficient(tap), -index.constant)


def _channel_only(access, channel: str, scop: Scop) -> bool:
    """Whether the indices of ``access`` after its first three (``n``, row, column) address
    element ``channel`` of their row-major block: ``c`` of ``[N, H, W, C]``, or ``(c, 0)`` of
    the ``[N, H, W, G, 1]`` view a grouped convolution of one channel per group reads."""
    rest = access.index[3:]
    if not all(isinstance(index, AffineExpr) for index in rest):
        return False
    shape = scop.array(access.array).shape
    offset = AffineExpr()
    for index, stride in zip(rest, row_major_strides(shape[3:])):
        offset = offset + index * stride
    return offset == AffineExpr.of(channel)


#: :func:`_epilogue_kind` of a statement the register tile computes on its vectors
VECTOR = "vector"
#: :func:`_epilogue_kind` of an elementwise statement run element by element by the generic
#: statement code after the tile's store (a comparison or selection: LeakyRelu, Elu, ClipByValue)
SCALAR = "scalar"


def _epilogue_kind(
    statement: Statement, chain: set[str], identity: tuple[AffineExpr, ...], extents: tuple[int, ...], scop: Scop
) -> str | None:
    """:data:`VECTOR` when ``statement`` is elementwise on the output box (it writes an array of
    the output's shape at the point, and reads the arrays of ``chain``, those the init, update
    and earlier epilogue statements wrote, only at the point) with float arithmetic of affine
    loads whose offsets the vector lanes step through by 1 (contiguous) or 0 (broadcast);
    :data:`SCALAR` when it is elementwise with other expressions (no run-time index); None
    otherwise."""
    write = statement.write
    if (
        statement.iterators != tuple(index.iterators[0] for index in identity)
        or statement.extents != extents
        or statement.constraints
        or write.index != identity
        or scop.array(write.array).shape != extents
    ):
        return None
    loads = statement.value.loads()
    if any(
        access.array in chain and access.index != identity or access.array == write.array and access.array not in chain
        for access in loads
    ):
        return None
    if any(isinstance(index, DynamicIndex) for access in loads for index in access.index):
        return None
    last = statement.iterators[-1]

    def fits(expression: Expr) -> bool:
        if isinstance(expression, Load):
            access = expression.access
            if access.array in chain:
                return True
            info = scop.array(access.array)
            offset = row_major_offset(access, row_major_strides(info.shape))
            return info.dtype == "float32" and offset is not None and offset.coefficient(last) in (0, 1)
        if isinstance(expression, Constant):
            return expression.dtype == "float32"
        if isinstance(expression, Unary):
            return (
                expression.op in _VECTOR_INTRINSICS
                or expression.op in MATH_FUNCTIONS
                or expression.op in ("neg", "square", "rsqrt")
            ) and fits(expression.operand)
        if isinstance(expression, Binary):
            return (
                expression.op in ("add", "sub", "mul", "div", "max", "min", "maximum", "minimum")
                and fits(expression.lhs)
                and fits(expression.rhs)
            )
        return False

    return VECTOR if fits(statement.value) else SCALAR


def match_depthwise(scop: Scop) -> DepthwisePattern | None:
    """The depthwise pattern of ``scop`` (module docstring), or None when it has another shape.

    Checked from the statements and their access relations: an init statement writing a
    constant over the output ``[N, OH, OW, C]``; an update ``O += I * F`` whose reductions are
    the two window iterators only, reading input channel ``c`` at the output's channel ``c``
    and a filter indexed by the taps and ``c`` only; an update domain that is exactly the
    taps inside the input (isl equality of sets); then elementwise statements on ``O``.
    """
    if len(scop.statements) < 2 or any(a.dtype != "float32" for a in scop.arrays):
        return None
    init, update, *epilogue = scop.statements
    if len(update.iterators) != 6 or update.reduction_iterators != update.iterators[4:]:
        return None
    n, oh, ow, c, kh, kw = update.iterators
    output = update.write.array
    identity = tuple(AffineExpr.of(name) for name in update.iterators[:4])
    extents = update.extents[:4]
    if update.write.index != identity or scop.array(output).shape != extents:
        return None
    if (
        init.write != update.write
        or init.extents != extents
        or init.constraints
        or not isinstance(init.value, Constant)
        or init.value.dtype != "float32"
    ):
        return None
    value = update.value
    if not (isinstance(value, Binary) and value.op == "add"):
        return None
    product = value.rhs if value.lhs == Load(update.write) else value.lhs if value.rhs == Load(update.write) else None
    if not (
        isinstance(product, Binary) and product.op == "mul" and isinstance(product.lhs, Load) and isinstance(product.rhs, Load)
    ):
        return None
    loads = [product.lhs.access, product.rhs.access]
    image = next((a for a in loads if len(a.index) >= 4 and a.index[0] == identity[0] and _channel_only(a, c, scop)), None)
    if image is None or image.array == output:
        return None
    weights = loads[1] if image is loads[0] else loads[0]
    if weights.array in (output, image.array):
        return None
    input_shape = scop.array(image.array).shape
    if input_shape[0] != extents[0] or math.prod(input_shape[3:]) != extents[3]:
        return None
    height = _window(image.index[1], oh, kh, input_shape[1], extents[1], update.extents[4])
    width = _window(image.index[2], ow, kw, input_shape[2], extents[2], update.extents[5])
    filter_offset = row_major_offset(weights, row_major_strides(scop.array(weights.array).shape))
    if height is None or width is None or filter_offset is None:
        return None
    if not set(filter_offset.iterators) <= {kh, kw, c} or filter_offset.coefficient(c) != 1:
        return None
    # the update's domain: exactly the taps inside the input (padding reads nothing)
    inside = box_set(update.name, update.iterators, update.extents)
    reads = (
        update.access_map(image)
        .intersect_range(box_set(image.array, tuple(f"i{k}" for k in range(len(input_shape))), input_shape))
        .domain()
    )
    try:
        if not update.domain().is_equal(inside.intersect(reads)):
            return None
    except isl.Error:
        return None
    chain, kinds = {output}, []
    for statement in epilogue:
        kinds.append(_epilogue_kind(statement, chain, identity, extents, scop))
        if kinds[-1] is None:
            return None
        chain.add(statement.write.array)
    vectorised = kinds.index(SCALAR) if SCALAR in kinds else len(kinds)
    return DepthwisePattern(
        output=output,
        input=image.array,
        filter=weights.array,
        batch=extents[0],
        channels=extents[3],
        height=height,
        width=width,
        iterators=update.iterators,
        input_offset=row_major_offset(image, row_major_strides(input_shape)),
        filter_offset=filter_offset,
        initial=float(init.value.value),
        update=update,
        epilogue=tuple(epilogue[:vectorised]),
        scalar_epilogue=tuple(epilogue[vectorised:]),
    )


def _microkernel_mark(node: isl.AstNode) -> MicrokernelMark | None:
    """The first micro-kernel mark of an AST (depth first), else None."""
    kind = node.get_type()
    if kind == isl.ast_node_type.mark:
        mark = mark_of(node)
        return mark if isinstance(mark, MicrokernelMark) else _microkernel_mark(node.mark_get_node())
    if kind == isl.ast_node_type.for_:
        return _microkernel_mark(node.for_get_body())
    if kind == isl.ast_node_type.block:
        children = node.block_get_children()
        for index in range(children.n_ast_node()):
            found = _microkernel_mark(children.get_at(index))
            if found is not None:
                return found
        return None
    if kind == isl.ast_node_type.if_:
        found = _microkernel_mark(node.if_get_then_node())
        if found is None and node.if_has_else_node():
            found = _microkernel_mark(node.if_get_else_node())
        return found
    return None


def depthwise_plan(scop: Scop, ast: isl.AstNode) -> DepthwisePlan | None:
    """The plan for a scheduled Scop: its depthwise pattern and the register tile of the AST's
    micro-kernel mark over the output's last two dimensions (``ow``, ``c``), or None (the
    generic emitter then runs the AST). A recipe with a zero-padded copy adds copy statements,
    so that its Scop is no longer the pattern."""
    pattern = match_depthwise(scop)
    if pattern is None:
        return None
    mark = _microkernel_mark(ast)
    if mark is None:
        return None
    _, _, ow, c = pattern.iterators[:4]
    sizes = dict(zip(mark.iterators, mark.register_sizes))
    if mark.iterators[-1] != c or set(sizes) - {ow, c}:
        return None
    return DepthwisePlan(pattern, rows=sizes.get(ow, 1), columns=sizes[c])
