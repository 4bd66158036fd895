"""Test models (Keras / raw TF) frozen to GraphDefs, and a TensorFlow reference runner.

TensorFlow is imported lazily, inside the functions; without it they raise
:class:`~polytf.errors.DependencyMissingError` (``pip install 'polytf[tensorflow]'``).

Every zoo model is written with placeholder ``"input"`` (``matmul``: ``"a"`` and ``"b"``) and
output node ``"Identity"``; see :mod:`polytf.model_zoo.freeze` for shapes. Command line:
``python -m polytf.model_zoo NAME [--batch B | --sizes MxKxN] -o PATH``.
"""

from polytf.model_zoo.freeze import (
    DEFAULT_SIZES,
    INPUT_NAME,
    MODEL_NAMES,
    OUTPUT_NAME,
    SIZED_MODELS,
    ZooModelInfo,
    freeze_model,
    freeze_to_graphdef,
    write_model,
    write_model_with_info,
)
from polytf.model_zoo.keras_models import cifar_cnn, conv3x3_bias_relu_56, conv_bias_relu, matmul, mlp, odd_matmul
from polytf.model_zoo.modern_models import mobilenet_v2, transformer_encoder
from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow, time_graphdef_with_tensorflow

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
    "write_model_with_info",
    "mlp",
    "cifar_cnn",
    "odd_matmul",
    "conv_bias_relu",
    "mobilenet_v2",
    "transformer_encoder",
    "conv3x3_bias_relu_56",
    "matmul",
    "run_graphdef_with_tensorflow",
    "time_graphdef_with_tensorflow",
]
