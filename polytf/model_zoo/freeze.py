"""Freezing models to GraphDefs with static shapes, and writing the zoo's models to files.

Every zoo model is frozen through ``tf.function`` + ``convert_variables_to_constants_v2`` with a
FIXED input shape, so all shapes in the GraphDef are static. Node names in the written files:

======================== ============ ========================== ============ ==========================
model                    placeholder  input shape                output node  output shape
======================== ============ ========================== ============ ==========================
``mlp``                  ``input``    ``[batch, 784]``           ``Identity`` ``[batch, 10]``
``cifar_cnn``            ``input``    ``[batch, 32, 32, 3]``     ``Identity`` ``[batch, 10]``
``odd_matmul``           ``input``    ``[m=batch or 37, 53]``    ``Identity`` ``[m, 29]``
``conv_bias_relu``       ``input``    ``[batch, 17, 19, 5]``     ``Identity`` ``[batch, 17, 19, 7]``
``conv3x3_bias_relu_56`` ``input``    ``[batch, 56, 56, 64]``    ``Identity`` ``[batch, 56, 56, 64]``
``matmul``               ``a``, ``b`` ``[M, K]``, ``[K, N]``     ``Identity`` ``[M, N]``
``mobilenet_v2``         ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``transformer_encoder``  ``input``    ``[batch, 128, 256]``      ``Identity`` ``[batch, 128, 256]``
``mlp_mixer``            ``input``    ``[batch, 196, 256]``      ``Identity`` ``[batch, 196, 256]``
``resnet50``             ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``inception_v3``         ``input``    ``[batch, 299, 299, 3]``   ``Identity`` ``[batch, 1000]``
``densenet121``          ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``efficientnet_b0``      ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``xception``             ``input``    ``[batch, 299, 299, 3]``   ``Identity`` ``[batch, 1000]``
``nasnet_mobile``        ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``unet``                 ``input``    ``[batch, 64, 64, 3]``     ``Identity`` ``[batch, 64, 64, 4]``
``transposed_unet``      ``input``    ``[batch, 128, 128, 3]``   ``Identity`` ``[batch, 128, 128, 4]``
``swin_block``           ``input``    ``[batch, 28, 28, 96]``    ``Identity`` ``[batch, 28, 28, 96]``
``video_cnn``            ``input``    ``[batch, 8, 32, 32, 3]``  ``Identity`` ``[batch, 10]``
``regnetx_200mf``        ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``convnext_tiny``        ``input``    ``[batch, 224, 224, 3]``   ``Identity`` ``[batch, 1000]``
``gpt2_block``           ``input``    int32 ``[batch, 64]``      ``Identity`` ``[batch, 64, 128]``
``bert_encoder``         ``input``,   int32 ``[batch, 64]`` each ``Identity`` ``[batch, 64, 128]``
                         ``attention_mask``
``temporal_conv_net``    ``input``    ``[batch, 128, 16]``       ``Identity`` ``[batch, 128, 8]``
``lstm20``, ``gru20``    ``input``    ``[batch, 20, 32]``        ``Identity`` ``[batch, 64]``
``lstm200``, ``gru200``  ``input``    ``[batch, 200, 32]``       ``Identity`` ``[batch, 64]``
``bilstm20``             ``input``    ``[batch, 20, 32]``        ``Identity`` ``[batch, 128]``
======================== ============ ========================== ============ ==========================

``gpt2_block`` and ``bert_encoder`` take int32 token ids in ``[0, VOCABULARY_SIZE)``
(:mod:`polytf.model_zoo.language_models`); ``attention_mask`` holds 1 (attend) or 0 (padding).

``temporal_conv_net`` (causal padding) and ``temporal_conv_net_same`` (SAME padding) are the
dilated TCN of :mod:`polytf.model_zoo.temporal_models`, with the same placeholder and output.

``lstm20``, ``lstm200``, ``gru20``, ``gru200`` and ``bilstm20`` are the Keras recurrent layers of
:mod:`polytf.model_zoo.recurrent_models` (64 units, 32 features): frozen with their while loops
(``freeze_to_graphdef(..., lower_control_flow=False)`` keeps a functional ``While`` instead).

``matmul`` is the one model with two placeholders and no weights; its sizes are
``sizes=(M, K, N)`` (default 256 x 256 x 256), not ``batch``.

The output ``Identity`` has a control input ``^NoOp`` in the Keras models (a ``NoOp`` gathering
the variable reads); the frozen files contain ``Const`` nodes for all weights.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polytf.model_zoo.grouped_models import convnext_tiny, regnetx_200mf
from polytf.model_zoo.keras_models import (
    cifar_cnn,
    conv3x3_bias_relu_56,
    conv_bias_relu,
    import_tensorflow,
    matmul,
    mlp,
    odd_matmul,
)
from polytf.model_zoo.language_models import bert_encoder, gpt2_block
from polytf.model_zoo.modern_models import KERAS_APPLICATIONS, keras_application, mlp_mixer, mobilenet_v2, transformer_encoder
from polytf.model_zoo.recurrent_models import RECURRENT_MODELS
from polytf.model_zoo.temporal_models import temporal_conv_net
from polytf.model_zoo.unet import transposed_unet, unet
from polytf.model_zoo.video_models import video_cnn
from polytf.model_zoo.vision_transformers import swin_block

__all__ = [
    "MODEL_NAMES",
    "SIZED_MODELS",
    "DEFAULT_SIZES",
    "INPUT_NAME",
    "OUTPUT_NAME",
    "ZooModelInfo",
    "freeze_to_graphdef",
    "freeze_model",
    "write_model",
]

#: Models :func:`write_model` knows.
MODEL_NAMES = (
    "mlp",
    "cifar_cnn",
    "odd_matmul",
    "conv_bias_relu",
    "conv3x3_bias_relu_56",
    "matmul",
    "mobilenet_v2",
    "transformer_encoder",
    "mlp_mixer",
    "resnet50",
    "inception_v3",
    "densenet121",
    "efficientnet_b0",
    "xception",
    "nasnet_mobile",
    "regnetx_200mf",
    "convnext_tiny",
    "unet",
    "transposed_unet",
    "swin_block",
    "video_cnn",
    "gpt2_block",
    "bert_encoder",
    "temporal_conv_net",
    "temporal_conv_net_same",
    *RECURRENT_MODELS,
)
#: Models whose sizes are given by ``sizes`` (a tuple of ints), not ``batch``.
SIZED_MODELS = {"matmul": ("M", "K", "N")}
#: Default ``sizes`` of :data:`SIZED_MODELS`.
DEFAULT_SIZES = {"matmul": (256, 256, 256)}
#: Placeholder name of every zoo model.
INPUT_NAME = "input"
#: Output node of every zoo model (single output).
OUTPUT_NAME = "Identity"


@dataclass(frozen=True)
class ZooModelInfo:
    """What a frozen zoo model looks like from outside.

    Attributes:
        name: zoo model name.
        input_name: the (first) placeholder node's name.
        input_shape: its static shape.
        output_names: output node names (``("Identity",)`` for every zoo model).
        path: the file written, when one was.
        inputs: every placeholder as ``(name, shape)``, in order (empty: just the first one).
        dtypes: each placeholder's dtype, in the order of :attr:`placeholders` (empty: all float32).
    """

    name: str
    input_name: str
    input_shape: tuple[int, ...]
    output_names: tuple[str, ...]
    path: Path | None = None
    inputs: tuple[tuple[str, tuple[int, ...]], ...] = ()
    dtypes: tuple[str, ...] = ()

    @property
    def placeholders(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Every placeholder as ``(name, static shape)``, in order."""
        return self.inputs or ((self.input_name, self.input_shape),)

    @property
    def placeholder_dtypes(self) -> tuple[str, ...]:
        """Every placeholder's dtype (``"float32"``, ``"int32"``, ...), in order."""
        return self.dtypes or ("float32",) * len(self.placeholders)


def _normalize_specs(tf: Any, input_specs: Any, unknown_sizes: bool = False) -> list[Any]:
    if isinstance(input_specs, tf.TensorSpec):
        input_specs = [input_specs]
    elif isinstance(input_specs, tuple) and input_specs and isinstance(input_specs[0], str):
        input_specs = [input_specs]
    specs = []
    for i, spec in enumerate(input_specs):
        if isinstance(spec, tf.TensorSpec):
            if spec.name is None:
                spec = tf.TensorSpec(spec.shape, spec.dtype, name=INPUT_NAME if i == 0 else f"{INPUT_NAME}_{i}")
            specs.append(spec)
            continue
        name, shape, *rest = spec
        dtype = tf.as_dtype(rest[0]) if rest else tf.float32
        specs.append(tf.TensorSpec(tuple(None if d is None else int(d) for d in shape), dtype, name=name))
    for spec in specs:
        if not unknown_sizes and not spec.shape.is_fully_defined():
            raise ValueError(f"input '{spec.name}' has a non-static shape {spec.shape}; give every dimension (batch included)")
    return specs


def freeze_to_graphdef(model_or_function: Callable[..., Any], input_specs: Any, lower_control_flow: bool = True, unknown_sizes: bool = False) -> Any:
    """Trace ``model_or_function`` with static input shapes (``unknown_sizes``: some may be
    ``None``, a dimension known only at the call) and freeze its variables to constants.

    Args:
        model_or_function: a Keras model (called with ``training=False``), a ``tf.function``
            (its Python function is re-traced, so nested calls are not left as function calls),
            or any callable of TensorFlow tensors.
        input_specs: ``tf.TensorSpec`` objects or ``(name, shape[, dtype])`` tuples, one per
            input; the spec's name becomes the placeholder's name (default ``"input"``).
        lower_control_flow: write while loops in TensorFlow's dataflow form (``Enter``/``Merge``/
            ``Switch``/``Exit``, the default of ``convert_variables_to_constants_v2``); False keeps
            functional ``While`` nodes and their functions in the GraphDef's library.

    Returns:
        A ``tf.compat.v1.GraphDef`` without variables (nor function library, unless loops are kept
        functional); single outputs come
        out of a node named ``"Identity"`` (more outputs: ``"Identity_1"``, ...).
    """
    tf = import_tensorflow()
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    specs = _normalize_specs(tf, input_specs, unknown_sizes)
    target = getattr(model_or_function, "python_function", model_or_function)
    is_keras = hasattr(model_or_function, "layers") and hasattr(model_or_function, "get_weights")

    def call(*args: Any) -> Any:
        inputs = args[0] if len(args) == 1 else list(args)
        return target(inputs, training=False) if is_keras else target(*args)

    concrete = tf.function(call).get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=lower_control_flow)
    return frozen.graph.as_graph_def()


def _build(name: str, batch: int | None, sizes: tuple[int, ...] | None) -> tuple[Any, tuple[tuple[str, tuple[int, ...]], ...]]:
    """The model or function to freeze and its placeholders ``((name, shape), ...)``."""
    b = 1 if batch is None else batch
    if name == "mlp":
        return mlp(b), ((INPUT_NAME, (b, 784)),)
    if name == "cifar_cnn":
        return cifar_cnn(b), ((INPUT_NAME, (b, 32, 32, 3)),)
    if name == "mobilenet_v2":
        return mobilenet_v2(b), ((INPUT_NAME, (b, 224, 224, 3)),)
    if name in KERAS_APPLICATIONS:
        side = KERAS_APPLICATIONS[name][1]
        return keras_application(name, b), ((INPUT_NAME, (b, side, side, 3)),)
    if name == "transformer_encoder":
        return transformer_encoder(b), ((INPUT_NAME, (b, 128, 256)),)
    if name == "mlp_mixer":
        return mlp_mixer(b), ((INPUT_NAME, (b, 196, 256)),)
    if name == "unet":
        return unet(b), ((INPUT_NAME, (b, 64, 64, 3)),)
    if name == "transposed_unet":
        return transposed_unet(b), ((INPUT_NAME, (b, 128, 128, 3)),)
    if name == "video_cnn":
        return video_cnn(b), ((INPUT_NAME, (b, 8, 32, 32, 3)),)
    if name in ("regnetx_200mf", "convnext_tiny"):
        return (regnetx_200mf if name == "regnetx_200mf" else convnext_tiny)(b), ((INPUT_NAME, (b, 224, 224, 3)),)
    if name in ("temporal_conv_net", "temporal_conv_net_same"):
        return temporal_conv_net(b, padding="same" if name.endswith("_same") else "causal"), ((INPUT_NAME, (b, 128, 16)),)
    if name in RECURRENT_MODELS:
        builder, steps = RECURRENT_MODELS[name]
        return builder(steps=steps, batch=b), ((INPUT_NAME, (b, steps, 32)),)
    if name in ("gpt2_block", "bert_encoder", "swin_block"):
        fn = {"gpt2_block": gpt2_block, "bert_encoder": bert_encoder, "swin_block": swin_block}[name](b)
        return fn, tuple(fn.input_specs)
    if name == "odd_matmul":
        fn = odd_matmul() if batch is None else odd_matmul(m=batch)
    elif name == "conv_bias_relu":
        fn = conv_bias_relu(b)
    elif name == "conv3x3_bias_relu_56":
        fn = conv3x3_bias_relu_56(b)
    elif name == "matmul":
        fn = matmul(*(sizes or DEFAULT_SIZES["matmul"]))
        return fn, tuple(fn.input_specs)
    else:
        raise ValueError(f"unknown zoo model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
    return fn, ((INPUT_NAME, tuple(fn.input_shape)),)


def _check_sizes(name: str, batch: int | None, sizes: Sequence[int] | None) -> tuple[int, ...] | None:
    if name not in SIZED_MODELS:
        if sizes is not None:
            raise ValueError(f"zoo model {name!r} takes batch, not sizes")
        return None
    if batch not in (None, 1):
        raise ValueError(f"zoo model {name!r} takes sizes={'x'.join(SIZED_MODELS[name])}, not batch")
    if sizes is None:
        return None
    sizes = tuple(int(d) for d in sizes)
    if len(sizes) != len(SIZED_MODELS[name]) or min(sizes) < 1:
        raise ValueError(
            f"zoo model {name!r} takes {len(SIZED_MODELS[name])} positive sizes {'x'.join(SIZED_MODELS[name])}, not {sizes}"
        )
    return sizes


def freeze_model(name: str, batch: int | None = None, sizes: Sequence[int] | None = None) -> tuple[Any, ZooModelInfo]:
    """Build and freeze zoo model ``name``; returns ``(graph_def, info)``.

    ``batch`` is the leading dimension (default 1); for ``odd_matmul`` it is ``m`` (default 37).
    ``sizes`` is for ``matmul`` only: ``(M, K, N)`` (default 256 x 256 x 256).

    Raises:
        ValueError: unknown name, a batch below 1, or sizes where they do not apply.
    """
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown zoo model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
    if batch is not None and int(batch) < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    checked = _check_sizes(name, batch, sizes)
    model, placeholders = _build(name, None if batch is None else int(batch), checked)
    graph_def = freeze_to_graphdef(model, list(placeholders))
    consumed = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
    outputs = tuple(n.name for n in graph_def.node if n.name not in consumed and n.op not in ("NoOp", "Const", "Placeholder"))
    shapes = tuple((spec[0], tuple(spec[1])) for spec in placeholders)
    dtypes = tuple(spec[2] if len(spec) > 2 else "float32" for spec in placeholders)
    (first_name, first_shape), *_ = shapes
    return graph_def, ZooModelInfo(name, first_name, first_shape, outputs, None, shapes, dtypes)


def write_model(name: str, path: str | os.PathLike[str], batch: int | None = 1, sizes: Sequence[int] | None = None) -> Path:
    """Write zoo model ``name`` as a binary frozen GraphDef to ``path`` and return the path.

    Args:
        name: one of :data:`MODEL_NAMES`.
        path: the ``.pb`` file to write (parent folders are created).
        batch: leading input dimension (default 1). For ``odd_matmul`` it is ``m``, except that
            1 (the default) and ``None`` keep its default ``m=37``. Not for ``matmul``.
        sizes: ``matmul`` only: ``(M, K, N)``, placeholders ``a: [M, K]`` and ``b: [K, N]``.

    The file has placeholder ``"input"`` (``matmul``: ``"a"`` and ``"b"``) and output node
    ``"Identity"`` (see the module docstring).
    """
    return write_model_with_info(name, path, batch, sizes).path  # type: ignore[return-value]


def write_model_with_info(
    name: str, path: str | os.PathLike[str], batch: int | None = 1, sizes: Sequence[int] | None = None
) -> ZooModelInfo:
    """Like :func:`write_model`, returning the :class:`ZooModelInfo` (with ``path`` set)."""
    if name == "odd_matmul" and batch == 1:
        batch = None
    graph_def, info = freeze_model(name, batch, sizes)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(graph_def.SerializeToString(deterministic=True))
    return ZooModelInfo(info.name, info.input_name, info.input_shape, info.output_names, out, info.inputs, info.dtypes)
