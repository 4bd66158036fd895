"""Tests that need an NVIDIA GPU with CuPy: each module is marked ``gpu`` and every test
here is skipped, not failed, where :func:`polytf.compiler.backends.cuda_unavailable_reason` gives
a reason (no CuPy, no device; ``POLYTF_CUDA_EMULATION`` is ignored here). Nothing here imports CuPy at
collection time."""

from __future__ import annotations

from pathlib import Path

import pytest

#: x: [37, 45] @ w: [45, 70] + b, Relu; w and b constants (uploaded once by the CUDA model)
MATMUL_BIAS_RELU_PBTXT = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 37 } dim { size: 45 } } } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 45 } dim { size: 70 } } float_val: 0.25 } } } }
node { name: "b" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 70 } } float_val: -0.5 } } } }
node { name: "mm" op: "MatMul" input: "x" input: "w" }
node { name: "bias" op: "BiasAdd" input: "mm" input: "b" }
node { name: "relu" op: "Relu" input: "bias" }
"""


@pytest.fixture(autouse=True)
def _needs_cuda(monkeypatch):
    from polytf.compiler.backends import cuda_unavailable_reason
    from polytf.config import CUDA_EMULATION_ENVIRONMENT_VARIABLE

    monkeypatch.delenv(CUDA_EMULATION_ENVIRONMENT_VARIABLE, raising=False)  # the real device, never its emulation
    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"needs CuPy and an NVIDIA GPU: {reason}")


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def matmul_model(tmp_path) -> Path:
    """A MatMul + BiasAdd + Relu text GraphDef; x: [37, 45] -> relu: [37, 70]."""
    path = tmp_path / "matmul_bias_relu.pbtxt"
    path.write_text(MATMUL_BIAS_RELU_PBTXT)
    return path


@pytest.fixture
def matmul_reference():
    """``matmul_reference(x)``: numpy's result of :func:`matmul_model` on ``x``."""
    import numpy as np

    return lambda x: np.maximum(x @ np.full((45, 70), 0.25, np.float32) - 0.5, 0)
