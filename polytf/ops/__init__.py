"""The ops polytf supports: for each TensorFlow op its shape rule, numpy reference,
polyhedral lowering and traits (:class:`OpDefinition`), in one explicit table
(:mod:`polytf.ops.table`).

    from polytf.ops import lookup
    definition = lookup("Conv2D")          # None for an unsupported op
    definition.weight_layout.input         # 1: the filter

The op modules (``polytf.ops.conv``, ``polytf.ops.elementwise``, ...) hold each op's rules and
the builders of its nodes (``const_node``, ``identity_node``, ``reshape_node``).
"""

from polytf.ops.definition import (
    ANY_DTYPE,
    CATEGORIES,
    CONTRACTION,
    ELEMENTWISE,
    NO_OUTPUT,
    REDUCTION,
    SOURCE,
    VIEW,
    Arity,
    OpDefinition,
)
from polytf.ops.expansion import Expansion, GraphBuilder
from polytf.ops.lowering_context import ArrayRef, LoweringContext
from polytf.ops.sources import const_node, const_value
from polytf.ops.table import check_supported, convolution_ops, lookup, supported_ops
from polytf.ops.traits import Algebra, Forwarding, Operation, WeightLayout
from polytf.ops.views import identity_node, reshape_node

__all__ = [
    "ANY_DTYPE",
    "CATEGORIES",
    "CONTRACTION",
    "ELEMENTWISE",
    "NO_OUTPUT",
    "REDUCTION",
    "SOURCE",
    "VIEW",
    "Algebra",
    "ArrayRef",
    "Arity",
    "Expansion",
    "Forwarding",
    "GraphBuilder",
    "LoweringContext",
    "OpDefinition",
    "Operation",
    "WeightLayout",
    "check_supported",
    "const_node",
    "const_value",
    "convolution_ops",
    "identity_node",
    "reshape_node",
    "lookup",
    "supported_ops",
]
