"""Einsum with two operands: a general tensor contraction written in index notation.

Source: TensorFlow op definition ``Einsum`` (tensorflow/core/ops/linalg_ops.cc) and
``tf.einsum``: attr ``equation`` such as ``"BTNH,BSNH->BNTS"``, ``N`` float32 inputs.

Supported: exactly two operands, each index a letter, in the form ``lhs,rhs->out``
(the op needs the ``->``: ``tf.einsum`` writes an implicit output out). An index in both
operands but not in the output is summed over; an index may appear in the output
only once and must appear in an operand; sizes of one index must agree. Not
supported (ShapeError naming the node): ellipsis (``...``), one or three operands,
an index repeated within one operand (a diagonal) and broadcasting of size-1
dimensions.

Lowering (tensor comprehension): output index ``p`` of ``out`` is iterator ``d{p}``,
the contracted indices are ``r0, r1, ...`` in order of first appearance (lhs, then rhs):

1. ``C[d...] = 0``
2. ``C[d...] += A[lhs indices] * B[rhs indices]`` over ``(d..., r...)``

(without contracted indices, one statement ``C[d...] = A[...] * B[...]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.definition import CONTRACTION, Arity, OpDefinition
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


@dataclass(frozen=True)
class EinsumEquation:
    """A parsed two-operand equation, e.g. ``BTNH,BSNH->BNTS``.

    Attributes:
        operands: the index letters of each operand (``("BTNH", "BSNH")``).
        output: the index letters of the output (``"BNTS"``).
    """

    operands: tuple[str, str]
    output: str

    @property
    def contracted(self) -> tuple[str, ...]:
        """Indices summed over, in order of first appearance."""
        seen: list[str] = []
        for letter in "".join(self.operands):
            if letter not in self.output and letter not in seen:
                seen.append(letter)
        return tuple(seen)

    @property
    def text(self) -> str:
        return f"{','.join(self.operands)}->{self.output}"

    def iterator(self, letter: str) -> str:
        """The statement iterator of an index: ``d{p}`` for output position ``p``, else ``r{q}``."""
        if letter in self.output:
            return f"d{self.output.index(letter)}"
        return f"r{self.contracted.index(letter)}"


def parse_equation(node) -> EinsumEquation:
    """Parse and validate ``node``'s ``equation`` attr.

    Raises:
        ShapeError: a missing or unsupported equation (the node and the reason are named).
    """
    equation = attr_string(node, "equation")
    if not equation:
        raise ShapeError(f"Einsum node '{node.name}' has an empty equation attr")
    text = equation.replace(" ", "")

    def unsupported(reason: str) -> ShapeError:
        return ShapeError(f"Einsum node '{node.name}' has equation {equation!r}: {reason}; polytf supports two-operand equations such as 'abc,cd->abd'")

    if "." in text:
        raise unsupported("ellipsis ('...') is not supported")
    if text.count("->") != 1:
        raise unsupported("the Einsum op needs exactly one '->' (tf.einsum writes the implicit output form out)")
    inputs, _, output = text.partition("->")
    operands = inputs.split(",")
    if len(operands) != 2:
        raise unsupported(f"{len(operands)} operand(s), only 2 are supported")
    for part in (*operands, output):
        if not all(letter.isalpha() and letter.isascii() for letter in part):
            raise unsupported(f"'{part}' is not a list of index letters")
    for operand in operands:
        repeated = sorted({letter for letter in operand if operand.count(letter) > 1})
        if repeated:
            raise unsupported(f"index {', '.join(repeated)} repeated within operand '{operand}' (a diagonal) is not supported")
    repeated = sorted({letter for letter in output if output.count(letter) > 1})
    if repeated:
        raise unsupported(f"index {', '.join(repeated)} repeated in the output")
    missing = [letter for letter in output if letter not in operands[0] and letter not in operands[1]]
    if missing:
        raise unsupported(f"output index {', '.join(missing)} appears in no operand")
    return EinsumEquation((operands[0], operands[1]), output)


def _index_sizes(node, equation: EinsumEquation, shapes) -> dict[str, int | None]:
    sizes: dict[str, int | None] = {}
    for operand, shape in zip(equation.operands, shapes):
        if len(operand) != len(shape):
            raise ShapeError(
                f"Einsum node '{node.name}': operand '{operand}' of equation {equation.text!r} has {len(operand)} indices "
                f"but its input has rank {len(shape)} (shape {list(shape)})"
            )
        for letter, size in zip(operand, shape):
            known = sizes.get(letter)
            if known is not None and size is not None and known != size:
                raise ShapeError(
                    f"Einsum node '{node.name}': index '{letter}' of equation {equation.text!r} has size {known} in one place "
                    f"and {size} in another (shapes {[list(s) for s in shapes]})"
                )
            if known is None:
                sizes[letter] = size
    return sizes


def infer(node, input_types, input_constants):
    equation = parse_equation(node)
    if len(input_types) != 2:
        raise ShapeError(f"Einsum node '{node.name}' has {len(input_types)} inputs; polytf supports 2")
    a, b = input_types
    if a.dtype != b.dtype:
        raise ShapeError(f"Einsum node '{node.name}' inputs have different dtypes: {a} and {b}")
    sizes = _index_sizes(node, equation, (a.shape, b.shape))
    return (TensorType(tuple(sizes[letter] for letter in equation.output), a.dtype),)


def reference(node, inputs):
    equation = parse_equation(node)
    a, b = (np.asarray(v, dtype=np.float32) for v in inputs)
    _index_sizes(node, equation, (a.shape, b.shape))
    return (np.asarray(np.einsum(equation.text, a, b, optimize=True), dtype=np.float32),)


def lower(node, inputs, outputs, context):
    """``C[d...] = 0``; ``C[d...] += A[...] * B[...]`` over the output and contracted indices."""
    equation = parse_equation(node)
    a, b = inputs
    (c,) = outputs
    sizes = _index_sizes(node, equation, (a.shape, b.shape))
    output_iterators = tuple(f"d{p}" for p in range(len(equation.output)))
    reduction_iterators = tuple(f"r{q}" for q in range(len(equation.contracted)))
    out = Access.of(c.name, *output_iterators)
    product = Binary(
        "mul",
        Load(Access.of(a.name, *(equation.iterator(letter) for letter in equation.operands[0]))),
        Load(Access.of(b.name, *(equation.iterator(letter) for letter in equation.operands[1]))),
    )
    if not reduction_iterators:
        return [Statement(context.statement_name(), output_iterators, c.shape, out, product, node=node.name, op=node.op)]
    init = Statement(context.statement_name(), output_iterators, c.shape, out, Constant(0.0), node=node.name, op=node.op)
    update = Statement(
        context.statement_name(),
        output_iterators + reduction_iterators,
        c.shape + tuple(int(sizes[letter]) for letter in equation.contracted),
        out,
        Binary("add", Load(out), product),
        node=node.name,
        op=node.op,
    )
    return [init, update]


EINSUM = OpDefinition(
    "Einsum", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/linalg_ops.cc: Einsum", arity=Arity(1, 2),
)
