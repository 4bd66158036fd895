"""Test models (Keras / raw TF) frozen to GraphDefs, and a TensorFlow reference runner.

TensorFlow is imported lazily, inside the functions; without it they raise
:class:`~polytf.errors.DependencyMissingError` (``pip install 'polytf[tensorflow]'``).

Every zoo model is written with placeholder ``"input"`` and output node ``"Identity"``; see
:mod:`polytf.model_zoo.freeze` for shapes. Command line: ``python -m polytf.model_zoo NAME -o PATH``.
"""

from polytf.model_zoo.freeze import (
    INPUT_NAME,
    MODEL_NAMES,
    OUTPUT_NAME,
    ZooModelInfo,
    freeze_model,
    freeze_to_graphdef,
    write_model,
    write_model_with_info,
)
from polytf.model_zoo.keras_models import cifar_cnn, conv_bias_relu, mlp, odd_matmul
from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow, time_graphdef_with_tensorflow

__all__ = [
    "MODEL_NAMES",
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
    "run_graphdef_with_tensorflow",
    "time_graphdef_with_tensorflow",
]
