"""End to end: Keras LSTM, GRU and bidirectional LSTM layers (``unroll=False``: while loops with
TensorList ops), frozen in both forms TensorFlow writes (``lower_control_flow=True``: the TF1
frame of Enter/Merge/Switch/Exit; ``False``: a functional ``While`` with library functions),
compiled by polytf with ``fallback=False`` (every node in generated code), agree with
TensorFlow running the same GraphDef.

Random weights and biases (:mod:`polytf.model_zoo.recurrent_models`); tolerance
(conftest.py): rtol 1e-4, atol = 1e-5 * max|reference| + 1e-6. The default suite runs the
20-step models in one form each; the other forms and 200 steps are marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.errors import GraphError  # noqa: E402
from polytf.frontend import load_graph  # noqa: E402
from polytf.model_zoo import freeze_to_graphdef  # noqa: E402
from polytf.model_zoo.recurrent_models import bidirectional_lstm, gru, lstm  # noqa: E402

INPUT = "input"
OUTPUT = "Identity"
FEATURES = 32
BUILDERS = {"lstm": lstm, "gru": gru, "bilstm": bidirectional_lstm}
SLOW = pytest.mark.slow


def _frozen(tmp_path, kind: str, steps: int, lower_control_flow: bool):
    model = BUILDERS[kind](steps=steps)
    graph_def = freeze_to_graphdef(model, [(INPUT, (1, steps, FEATURES))], lower_control_flow=lower_control_flow)
    ops = {node.op for node in graph_def.node}
    assert ("Enter" in ops) == lower_control_flow, ops
    assert bool(ops & {"While", "StatelessWhile"}) != lower_control_flow, ops
    path = tmp_path / f"{kind}{steps}_{'lowered' if lower_control_flow else 'functional'}.pb"
    path.write_bytes(graph_def.SerializeToString())
    return path


@pytest.mark.parametrize(
    "kind,steps,lower_control_flow",
    [
        ("lstm", 20, True),
        ("lstm", 20, False),
        ("gru", 20, True),
        ("bilstm", 20, False),
        pytest.param("gru", 20, False, marks=SLOW),
        pytest.param("bilstm", 20, True, marks=SLOW),
        pytest.param("lstm", 200, True, marks=SLOW),
    ],
)
def test_recurrent_layers_match_tensorflow(kind, steps, lower_control_flow, tf_reference, assert_close, rng, tmp_path) -> None:
    path = _frozen(tmp_path, kind, steps, lower_control_flow)
    graph = load_graph(path)
    ops = {node.op for node in graph.nodes.values()}
    assert not any(op.startswith("TensorList") for op in ops) and not ops & {"While", "Enter", "NextIteration"}, ops
    loops = {name.split("/iteration_")[0] for name in graph.nodes if "/iteration_" in name}
    assert len(loops) == (2 if kind == "bilstm" else 1), loops
    assert any(f"/iteration_{steps - 1}/" in name for name in graph.nodes)
    x = rng.standard_normal((1, steps, FEATURES)).astype(np.float32)
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    result = model(**{INPUT: x})[OUTPUT]
    reference = tf_reference(path, {INPUT: x}, [OUTPUT])[OUTPUT]
    assert result.shape == (1, 128 if kind == "bilstm" else 64)
    assert float(np.std(reference)) > 0.05, "the test model's output should not be flat"
    assert_close(result, reference, f"{path.name} {OUTPUT}")


def test_a_sequence_of_unknown_length_is_a_clean_error_naming_the_loop(tmp_path) -> None:
    """Frozen with a time dimension of None, the loop's trip count is the input's length, known
    only at run time: the error names the loop and the input it depends on."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = lstm(steps=5)
    spec = tf.TensorSpec((1, None, FEATURES), tf.float32, name=INPUT)
    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
    graph_def = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    path = tmp_path / "lstm_unknown_length.pb"
    path.write_bytes(graph_def.SerializeToString())
    with pytest.raises(
        GraphError,
        match=r"while loop frame '.*while' in '.*lstm_unknown_length.pb': its trip count is not known at compile time.*'input' \(Placeholder\)",
    ):
        polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
