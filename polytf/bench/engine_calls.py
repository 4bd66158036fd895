"""What the engine baselines (:mod:`polytf.bench.openvino_baseline`,
:mod:`polytf.bench.onnxruntime_baseline`) share: a TensorFlow tensor's name as the engines spell
it, and an engine's error as one line for the report."""

from __future__ import annotations

__all__ = ["tensor_name", "describe_error"]


def tensor_name(name: str) -> str:
    """``"input"`` -> ``"input:0"``: OpenVINO, tf2onnx and ONNX name a TensorFlow tensor with its port."""
    _, separator, port = name.rpartition(":")
    return name if separator and port.isdigit() else f"{name}:0"


def describe_error(error: BaseException) -> str:
    """``"RuntimeError: <the message's first non-empty line>"``: an engine's error as one line."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
