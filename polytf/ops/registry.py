"""The op table: for each supported TensorFlow op, its shape rule, numpy reference
and polyhedral lowering.

Op semantics follow TensorFlow's op definitions (tensorflow/core/ops/*.cc and the
``tf.raw_ops`` documentation); each op module cites its op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from polytf.errors import UnsupportedOpError
from polytf.graph import Node, TensorType
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


@dataclass(frozen=True)
class ArrayRef:
    """An array a lowering reads or writes: its Scop name and its type."""

    name: str
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.type.shape)


class LoweringContext:
    """What a lowering may ask of the Scop being built: fresh statement names,
    kernel-local temporary arrays and the values of compile-time constant inputs."""

    def __init__(self, statement_prefix: str = "S", array_prefix: str = "T", constants: Mapping[str, np.ndarray] | None = None) -> None:
        #: graph tensor name -> compile-time value (read with ``constant_inputs.constant_input``).
        self.constants: Mapping[str, np.ndarray] = dict(constants or {})
        self._statement_count = 0
        self._array_count = 0
        self._statement_prefix = statement_prefix
        self._array_prefix = array_prefix
        self.temporaries: list[ArrayRef] = []

    def statement_name(self) -> str:
        """A new unique statement name (``S0``, ``S1``, ...)."""
        name = f"{self._statement_prefix}{self._statement_count}"
        self._statement_count += 1
        return name

    def temporary(self, shape: Sequence[int], dtype: str = "float32") -> ArrayRef:
        """A new array that lives only inside the kernel (e.g. Softmax's row maxima)."""
        ref = ArrayRef(f"{self._array_prefix}{self._array_count}", TensorType(tuple(int(d) for d in shape), dtype))
        self._array_count += 1
        self.temporaries.append(ref)
        return ref


#: infer(node, input_types, input_constants) -> output types. ``input_constants[i]`` is the
#: numpy value of input ``i`` when it is known at compile time, else None.
InferFunction = Callable[[Node, Sequence[TensorType], Sequence["np.ndarray | None"]], tuple[TensorType, ...]]
#: reference(node, inputs) -> outputs, in numpy (the executable specification).
ReferenceFunction = Callable[[Node, Sequence[np.ndarray]], tuple[np.ndarray, ...]]
#: lower(node, inputs, outputs, context) -> statements in program order. ``inputs`` holds
#: only the data inputs (see ``OpDefinition.data_inputs``).
LowerFunction = Callable[[Node, Sequence[ArrayRef], Sequence[ArrayRef], LoweringContext], list[Statement]]
#: static_value(node, input_types) -> output values known from the input types alone (e.g. Shape).
StaticValueFunction = Callable[[Node, Sequence[TensorType]], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class OpDefinition:
    """Everything polytf knows about one TensorFlow op.

    Attributes:
        op: TensorFlow op type.
        category: one of :data:`CATEGORIES`.
        infer: output types from input types (and constant inputs).
        reference: numpy implementation, the executable specification.
        lower: polyhedral lowering, or None for SOURCE/VIEW/NO_OUTPUT ops.
        data_inputs: indices of inputs that the computation reads at run time; the others
            (e.g. Reshape's ``shape``) must be compile-time constants. None means all.
        source: where the semantics come from (for docs and messages).
        dtypes: dtypes the op takes in run-time tensors (shape inference refuses others;
            compile-time constants of int32/int64 are read by any op that folds them).
        foldable: shape inference evaluates ``reference`` at compile time when every input
            is a compile-time constant (small tensors only; VIEW ops always fold).
        static_value: output values computed from the input types alone (``Shape``): the
            outputs are always compile-time constants.
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

    def data_input_indices(self, input_count: int) -> tuple[int, ...]:
        return tuple(range(input_count)) if self.data_inputs is None else self.data_inputs


_REGISTRY: dict[str, OpDefinition] = {}


def register(definition: OpDefinition) -> OpDefinition:
    """Add an op to the table (each op module calls this at import)."""
    if definition.category not in CATEGORIES:
        raise ValueError(f"unknown op category {definition.category!r}")
    _REGISTRY[definition.op] = definition
    return definition


def lookup(op: str) -> OpDefinition | None:
    """The definition of ``op``, or None when polytf does not support it."""
    _load_all()
    return _REGISTRY.get(op)


def supported_ops() -> tuple[str, ...]:
    _load_all()
    return tuple(sorted(_REGISTRY))


def check_supported(nodes: Sequence[Node]) -> None:
    """Raise :class:`UnsupportedOpError` listing every node whose op is not in the table."""
    _load_all()
    missing = [(n.name, n.op) for n in nodes if n.op not in _REGISTRY]
    if missing:
        raise UnsupportedOpError(missing)


def _load_all() -> None:
    # Importing the op modules registers them.
    from polytf.ops import catalog  # noqa: F401
