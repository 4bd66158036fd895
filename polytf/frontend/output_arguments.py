"""Where an op's output arguments lie among its output ports, without TensorFlow's op registry.

A GraphDef names a tensor ``"node:port"``, counting every output tensor of the node in
order; a FunctionDef names it ``"node:output_arg:index"``, by the op's ``OpDef`` output
argument and the index inside that argument (tensorflow/core/framework/function.proto). An
argument is one tensor, or a list of ``attr[number_attr]`` tensors, or a list of one tensor
per type in ``attr[type_list_attr]`` (tensorflow/core/framework/op_def.proto, ``ArgDef``).
Converting one naming into the other needs the op's output arguments: TensorFlow's
``function_def_to_graph_def`` (tensorflow/python/framework/function_def_to_graph.py) reads
them from the op registry, which only TensorFlow has.

polytf keeps the output arguments of the ops that have more than one, or a list-valued one,
and that appear in inference graphs (:data:`OUTPUT_ARGUMENTS`, copied from the registry of
TensorFlow 2.21 and checked against it by a test, together with every op polytf supports);
every other op is taken to have a single output argument of a single tensor, which is true
of about three ops in four of the registry. A function called by its name has the output
arguments of its signature (:func:`signature_output_arguments`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["OutputArgument", "OUTPUT_ARGUMENTS", "output_arguments", "signature_output_arguments", "port_ranges"]


@dataclass(frozen=True)
class OutputArgument:
    """One output argument of an ``OpDef`` (``ArgDef``: tensorflow/core/framework/op_def.proto).

    Attributes:
        name: the argument's name, e.g. ``"y"`` of ``FusedBatchNormV3``.
        number_attr: for a list of tensors of one type, the int attribute giving its length
            (``"num_split"`` of ``Split``); empty otherwise.
        type_list_attr: for a list of tensors of several types, the type-list attribute with
            one type per tensor (``"T"`` of ``IdentityN``); empty otherwise.
    """

    name: str
    number_attr: str = ""
    type_list_attr: str = ""

    @classmethod
    def parse(cls, text: str) -> OutputArgument:
        """``"y"`` (one tensor), ``"output*num_split"`` (a number attribute) or ``"output[T]"``
        (a type-list attribute)."""
        if text.endswith("]"):
            name, _, attr = text[:-1].partition("[")
            return cls(name, type_list_attr=attr)
        name, _, attr = text.partition("*")
        return cls(name, number_attr=attr)

    def length(self, attrs: Mapping[str, Any]) -> int:
        """How many tensors the argument holds, for a node's ``attrs`` (``AttrValue`` protos).

        Raises:
            KeyError: the node lacks the attribute that gives the length.
        """
        if self.number_attr:
            return int(attrs[self.number_attr].i)
        if self.type_list_attr:
            return len(attrs[self.type_list_attr].list.type)
        return 1


def _table(entries: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[OutputArgument, ...]]:
    return {op: tuple(OutputArgument.parse(text) for text in arguments) for op, arguments in entries.items()}


#: Output arguments of the ops with more than one, or a list-valued one, that inference graphs
#: hold (TensorFlow 2.21's op registry; ``name*attr``: a list of ``attr`` tensors,
#: ``name[attr]``: one tensor per type of ``attr``). Every other op: one argument, one tensor.
OUTPUT_ARGUMENTS: Mapping[str, tuple[OutputArgument, ...]] = _table(
    {
        # function calls and control flow (tensorflow/core/ops/functional_ops.cc, control_flow_ops.cc)
        "PartitionedCall": ("output[Tout]",),
        "StatefulPartitionedCall": ("output[Tout]",),
        "If": ("output[Tout]",),
        "StatelessIf": ("output[Tout]",),
        "Case": ("output[Tout]",),
        "StatelessCase": ("output[Tout]",),
        "While": ("output[T]",),
        "StatelessWhile": ("output[T]",),
        "Switch": ("output_false", "output_true"),
        "Merge": ("output", "value_index"),
        # arrays (array_ops.cc)
        "IdentityN": ("output[T]",),
        "Split": ("output*num_split",),
        "SplitV": ("output*num_split",),
        "Unpack": ("output*num",),
        "ShapeN": ("output*N",),
        "ConcatOffset": ("offset*N",),
        "BroadcastGradientArgs": ("r0", "r1"),
        "ListDiff": ("out", "idx"),
        "Unique": ("y", "idx"),
        "UniqueV2": ("y", "idx"),
        "UniqueWithCounts": ("y", "idx", "count"),
        "UniqueWithCountsV2": ("y", "idx", "count"),
        "DynamicPartition": ("outputs*num_partitions",),
        "QuantizeV2": ("output", "output_min", "output_max"),
        # neural networks (nn_ops.cc, rnn_ops.cc, cudnn_rnn_ops.cc, image_ops.cc, ctc_ops.cc)
        "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
        "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
        "FusedBatchNormV3": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"),
        "_FusedBatchNormEx": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3"),
        "TopK": ("values", "indices"),
        "TopKV2": ("values", "indices"),
        "ApproxTopK": ("values", "indices"),
        "MaxPoolWithArgmax": ("output", "argmax"),
        "FractionalMaxPool": ("output", "row_pooling_sequence", "col_pooling_sequence"),
        "FractionalAvgPool": ("output", "row_pooling_sequence", "col_pooling_sequence"),
        "SoftmaxCrossEntropyWithLogits": ("loss", "backprop"),
        "SparseSoftmaxCrossEntropyWithLogits": ("loss", "backprop"),
        "LSTMBlockCell": ("i", "cs", "f", "o", "ci", "co", "h"),
        "BlockLSTM": ("i", "cs", "f", "o", "ci", "co", "h"),
        "BlockLSTMV2": ("i", "cs", "f", "o", "ci", "co", "h"),
        "GRUBlockCell": ("r", "u", "c", "h"),
        "CudnnRNN": ("output", "output_h", "output_c", "reserve_space"),
        "CudnnRNNV2": ("output", "output_h", "output_c", "reserve_space", "host_reserved"),
        "CudnnRNNV3": ("output", "output_h", "output_c", "reserve_space", "host_reserved"),
        "NonMaxSuppressionV4": ("selected_indices", "valid_outputs"),
        "NonMaxSuppressionV5": ("selected_indices", "selected_scores", "valid_outputs"),
        "CombinedNonMaxSuppression": ("nmsed_boxes", "nmsed_scores", "nmsed_classes", "valid_detections"),
        "CTCGreedyDecoder": ("decoded_indices", "decoded_values", "decoded_shape", "log_probability"),
        "CTCBeamSearchDecoder": (
            "decoded_indices*top_paths",
            "decoded_values*top_paths",
            "decoded_shape*top_paths",
            "log_probability",
        ),
        # linear algebra (linalg_ops.cc)
        "Svd": ("s", "u", "v"),
        "Qr": ("q", "r"),
        "SelfAdjointEigV2": ("e", "v"),
        "Eig": ("e", "v"),
        "Lu": ("lu", "p"),
        "LogMatrixDeterminant": ("sign", "log_abs_determinant"),
        # tensor lists and arrays (list_ops.cc, data_flow_ops.cc), random, strings, XLA
        "TensorListPopBack": ("output_handle", "tensor"),
        "TensorListConcat": ("tensor", "lengths"),
        "TensorListConcatV2": ("tensor", "lengths"),
        "TensorArrayV3": ("handle", "flow"),
        "TensorArrayGradV3": ("grad_handle", "flow_out"),
        "TensorArrayConcatV3": ("value", "lengths"),
        "StatelessRandomGetKeyCounter": ("key", "counter"),
        "StatelessRandomGetKeyCounterAlg": ("key", "counter", "alg"),
        "StringSplit": ("indices", "values", "shape"),
        "StringSplitV2": ("indices", "values", "shape"),
        "XlaVariadicSort": ("outputs[T]",),
        "XlaVariadicReduceV2": ("outputs[T]",),
    }
)


def output_arguments(op: str) -> tuple[OutputArgument, ...] | None:
    """The output arguments of ``op`` from :data:`OUTPUT_ARGUMENTS`, or ``None`` for an op
    taken to have one argument of one tensor (its name is then not known)."""
    return OUTPUT_ARGUMENTS.get(op)


def signature_output_arguments(signature: Any) -> tuple[OutputArgument, ...]:
    """The output arguments of a function's signature (an ``OpDef`` proto), for a node that
    calls the function by its name."""
    return tuple(OutputArgument(arg.name, arg.number_attr, arg.type_list_attr) for arg in signature.output_arg)


def port_ranges(arguments: tuple[OutputArgument, ...], attrs: Mapping[str, Any]) -> dict[str, range]:
    """Output argument name -> the ports of its tensors, for a node with ``attrs``.

    Example: ``Split`` with ``num_split = 3`` has ``{"output": range(0, 3)}``;
    ``FusedBatchNormV3`` has ``{"y": range(0, 1), "batch_mean": range(1, 2), ...}``.

    Raises:
        KeyError: an attribute giving a list's length is missing.
    """
    ranges: dict[str, range] = {}
    start = 0
    for argument in arguments:
        length = argument.length(attrs)
        ranges[argument.name] = range(start, start + length)
        start += length
    return ranges
