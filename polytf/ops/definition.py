"""What polytf knows about one TensorFlow op: :class:`OpDefinition`, its rules and its traits.

Op semantics follow TensorFlow's op definitions (tensorflow/core/ops/*.cc and the
``tf.raw_ops`` documentation); each op module cites its op and defines its
``OpDefinition`` values as module constants; :mod:`polytf.ops.table` lists them all.

The graph passes, the lowering and the runtime ask an op's *traits* (arity, stateful,
commutative, identity-like, view, slab copy, weight layout, algebra, affine form, expansion),
never its name, as TVM's ``FuseOps`` reads each op's ``TOpPattern`` and MLIR's
canonicalization reads op traits (``Commutative``, ``Involution``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops.expansion import Expansion
from polytf.ops.lowering_context import ArrayRef, LoweringContext
from polytf.ops.traits import Algebra, Forwarding, SpaceBatchMove, Stacking, WeightLayout
from polytf.poly.statement import Statement

#: Categories of ops, used by shape inference, fusion and the runtime.
SOURCE = "source"  # Placeholder, Const: no code; a model input or a constant buffer
VIEW = "view"  # Identity, Reshape, Squeeze: no code; output aliases data input 0
NO_OUTPUT = "no_output"  # NoOp: nothing at all
ELEMENTWISE = "elementwise"  # one output element from the same-index elements of inputs (with broadcasting)
CONTRACTION = "contraction"  # MatMul, Conv2D: a reduction that anchors a fusion group
REDUCTION = "reduction"  # MaxPool, Softmax: other reductions
CATEGORIES = (SOURCE, VIEW, NO_OUTPUT, ELEMENTWISE, CONTRACTION, REDUCTION)
#: ``OpDefinition.dtypes`` of ops that only move data (Transpose, ConcatV2, Pad, ...): every
#: dtype generated code handles.
ANY_DTYPE = ("float32", "int32", "int64", "bool")

#: infer(node, input_types, input_constants) -> output types. ``input_constants[i]`` is the
#: numpy value of input ``i`` when it is known at compile time, else None.
InferFunction = Callable[[Node, Sequence[TensorType], Sequence["np.ndarray | None"]], tuple[TensorType, ...]]
#: reference(node, inputs) -> outputs, in numpy (the executable specification).
ReferenceFunction = Callable[[Node, Sequence[np.ndarray]], tuple[np.ndarray, ...]]
#: lower(node, inputs, outputs, context) -> statements in program order. ``inputs`` holds
#: only the data inputs (see ``OpDefinition.data_inputs``).
LowerFunction = Callable[[Node, Sequence[ArrayRef], Sequence[ArrayRef], LoweringContext], list[Statement]]
#: static_value(node, input_types) -> output values known from the node and its input types
#: alone (``Const``'s value, ``Shape``).
StaticValueFunction = Callable[[Node, Sequence[TensorType]], tuple[np.ndarray, ...]]
#: affine(node, input_constants) -> ``(scale, shift)``, float64 vectors of one entry per
#: channel, when the node computes ``y = x * scale + shift`` on its data input 0 (channels on
#: the last axis); None when its attributes or unknown inputs do not allow it.
AffineFunction = Callable[[Node, Sequence["np.ndarray | None"]], "tuple[np.ndarray, np.ndarray] | None"]


class Arity(NamedTuple):
    """How many inputs (control inputs aside) a node of an op takes, from TensorFlow's op
    definition (the ``Input(...)`` lines of tensorflow/core/ops/{math,nn,array}_ops.cc; a
    list input ``N * T`` counts as "at least one").

    Attributes:
        fewest: the least number of inputs.
        most: the largest number, or None for any number (list inputs).
    """

    fewest: int
    most: int | None

    def accepts(self, count: int) -> bool:
        """Whether ``count`` inputs are allowed."""
        return count >= self.fewest and (self.most is None or count <= self.most)

    def __str__(self) -> str:
        if self.fewest == self.most:
            return f"{self.fewest}"
        return f"{self.fewest} or more" if self.most is None else f"{self.fewest} to {self.most}"


@dataclass(frozen=True)
class OpDefinition:
    """Everything polytf knows about one TensorFlow op.

    Attributes:
        op: TensorFlow op type.
        category: one of :data:`CATEGORIES`.
        infer: output types from input types (and constant inputs).
        reference: numpy implementation, the executable specification.
        lower: polyhedral lowering, or None for SOURCE/VIEW/NO_OUTPUT ops and ops that run on
            the host through their reference.
        data_inputs: indices of inputs that the computation reads at run time; the others
            (e.g. Reshape's ``shape``) must be compile-time constants. None means all.
        source: where the semantics come from (for docs and messages).
        dtypes: dtypes the op takes in run-time tensors (shape inference refuses others;
            compile-time constants of int32/int64 are read by any op that folds them).
        foldable: shape inference evaluates ``reference`` at compile time when every input
            is a compile-time constant (small tensors only; VIEW ops always fold).
        static_value: output values computed from the node and its input types alone
            (``Const``, ``Shape``): the outputs are always compile-time constants.

    Traits (what the graph passes, the lowering and the runtime ask instead of the op's name):
        arity: how many inputs a node takes (:class:`Arity`); shape inference refuses other
            counts before the op's rules read the inputs (:meth:`check_arity`).
        stateful: the value is not a function of the inputs (random ops, variables; TF's
            ``SetIsStateful``): never folded, merged or reordered. No op of the table is.
        commutative: ``f(a, b) == f(b, a)`` for the two inputs (MLIR's ``Commutative``):
            common-subexpression elimination compares the inputs in any order.
        forwards: identity-like ops: at inference time the outputs are data inputs unchanged
            (:class:`~polytf.ops.traits.Forwarding`): identity removal reads the input instead.
        slab_copy: the lowering copies each data operand into a box slab of the output
            (ConcatV2, Pad): the operands are in-place-placeable, the runtime may let their
            producers write straight into the output's buffer (XLA's
            ``CanShareOperandBufferWithUser``).
        weight_layout: a contraction with a weight operand (a filter or a matrix): where it is
            and what its axes are (:class:`~polytf.ops.traits.WeightLayout`).
        algebra: the algebraic laws of an arithmetic op (:class:`~polytf.ops.traits.Algebra`),
            for rewrites with constants.
        channel_bias: the op adds a 1-D bias along the channel axis (``BiasAdd``).
        affine: the per-channel affine form ``y = x * scale + shift`` of the node (inference
            batch normalization), see :data:`AffineFunction`.
        expand: the op is rewritten into other ops before lowering
            (:class:`~polytf.ops.expansion.Expansion`).
        matrix_product: the op is rewritten as a ``MatMul`` between row-major views when a
            node of it is one (a 1x1, stride-1, ungrouped ``Conv2D``: ``[N*H*W, C] x [C, O]``);
            applied after batch-norm folding
            (:func:`polytf.passes.expansion.rewrite_matrix_products`).
        reduces_axes: the op combines its data input's elements along axes (``Sum``, ``Mean``,
            ``Max``, ``Min``, ``Prod``, ``All``, ``Any``; ``Softmax`` along its last): the fusion
            partition lets a float32 one join the kernel of its element-wise producer (XLA's
            input fusion).
        space_batch: the op moves blocks of spatial positions into the batch or back
            (:class:`~polytf.ops.traits.SpaceBatchMove`: ``SpaceToBatchND``, ``BatchToSpaceND``).
        stacking: the op takes one index of a tensor along an axis (``StridedSlice``) or stacks
            tensors along a new axis (``Pack``): the seams of a loop TensorFlow unrolled
            (:class:`~polytf.ops.traits.Stacking`).

    Raises:
        ValueError: an unknown category, or traits that contradict each other.
    """

    op: str
    category: str
    infer: InferFunction
    reference: ReferenceFunction
    lower: LowerFunction | None = None
    data_inputs: tuple[int, ...] | None = None
    source: str = ""
    dtypes: tuple[str, ...] = field(default=("float32",))
    foldable: bool = False
    static_value: StaticValueFunction | None = None
    arity: Arity = field(kw_only=True)
    stateful: bool = field(default=False, kw_only=True)
    commutative: bool = field(default=False, kw_only=True)
    forwards: Forwarding | None = field(default=None, kw_only=True)
    slab_copy: bool = field(default=False, kw_only=True)
    weight_layout: WeightLayout | None = field(default=None, kw_only=True)
    algebra: Algebra | None = field(default=None, kw_only=True)
    channel_bias: bool = field(default=False, kw_only=True)
    affine: AffineFunction | None = field(default=None, kw_only=True)
    expand: Expansion | None = field(default=None, kw_only=True)
    matrix_product: Expansion | None = field(default=None, kw_only=True)
    space_batch: SpaceBatchMove | None = field(default=None, kw_only=True)
    reduces_axes: bool = field(default=False, kw_only=True)
    stacking: Stacking | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"op {self.op}: unknown category {self.category!r}")
        if self.commutative and self.arity != Arity(2, 2):
            raise ValueError(f"op {self.op}: a commutative op takes two inputs, not {self.arity}")
        if self.forwards is not None and self.category != VIEW:
            raise ValueError(f"op {self.op}: an identity-like op is a view, not {self.category}")

    def data_input_indices(self, input_count: int) -> tuple[int, ...]:
        return tuple(range(input_count)) if self.data_inputs is None else self.data_inputs

    def check_arity(self, node: Node) -> None:
        """Refuse a node with fewer or more inputs than the op takes, so that a missing or extra
        input is a clear error naming the node, never an ``IndexError`` inside a rule.

        Raises:
            ShapeError: naming the node, its op, the count and the allowed counts.
        """
        count = len(node.inputs)
        if not self.arity.accepts(count):
            raise ShapeError(f"node '{node.name}' ({node.op}) has {count} data input{'s' if count != 1 else ''}; {node.op} takes {self.arity}")

