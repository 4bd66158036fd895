"""The deployment engines as bench baselines: OpenVINO and ONNX Runtime on small GraphDefs
against numpy (f32 weights kept), their failures reported as data, the baseline process's
handling of engines that are missing, fail or are wrong, the "polytf / best engine" ratio,
the report's engine columns and one ratio convention, and the ``engines`` suite."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polytf.bench.engine_calls import tensor_name
from polytf.bench.engines import ENGINE_SYSTEMS, ENGINES, NOT_INSTALLED, ratio_to_best_engine, tolerance_error
from polytf.errors import DependencyMissingError, PolytfError

#: a: [6, 5] @ b: [5, 4] -> Relu (no weights).
MATMUL_RELU_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 5 } dim { size: 4 } } } } }
node { name: "mm" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""

#: x: [2, 3] @ w: [3, 2] with every weight 1 + 2^-12: float16 would round it to 1.0 (a relative
#: error of 2.4e-4), float32 keeps it.
WEIGHT = 1.0 + 2.0**-12
CONST_MATMUL_PBTXT = (
    """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 3 } dim { size: 2 } } float_val: %r } } } }
node { name: "y" op: "MatMul" input: "x" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
"""
    % WEIGHT
)

#: Erfc, which tf2onnx writes as an ONNX node that opset 17 does not have (Keras' exact GELU).
ERFC_PBTXT = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 4 } } } } }
node { name: "y" op: "Erfc" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
"""


def _write(tmp_path, text, name="graph.pbtxt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _matmul_feeds():
    rng = np.random.default_rng(0)
    return {"a": rng.standard_normal((6, 5)).astype(np.float32), "b": rng.standard_normal((5, 4)).astype(np.float32)}


def test_tensor_names_carry_their_port():
    assert tensor_name("input") == "input:0" and tensor_name("split:1") == "split:1" and tensor_name("a:b") == "a:b:0"


def test_tolerance_error_is_the_end_to_end_tolerance():
    expected = {"y": np.array([1000.0, 1.0, 0.0], np.float32)}
    assert tolerance_error({"y": expected["y"] * (1 + 5e-5)}, expected, "TensorFlow") is None
    wrong = tolerance_error({"y": expected["y"] * 1.001}, expected, "TensorFlow")
    assert wrong.startswith("wrong result") and "TensorFlow" in wrong and "'y'" in wrong
    assert tolerance_error({"y": np.zeros(2, np.float32)}, expected, "numpy").startswith("wrong result")
    assert tolerance_error({}, expected, "numpy").startswith("wrong result")


system_times = st.dictionaries(
    st.sampled_from(("numpy", "polytf", "polytf_untuned", *ENGINE_SYSTEMS)),
    st.one_of(st.floats(1e-6, 10.0), st.just(None)),
)


@settings(max_examples=60, deadline=None)
@given(system_times)
def test_best_engine_is_the_fastest_engine_timed(times):
    systems = {name: ({"median_s": t} if t is not None else {"error": "failed"}) for name, t in times.items()}
    ratios = ratio_to_best_engine(systems)
    engines = {name: t for name, t in times.items() if name in ENGINE_SYSTEMS and t is not None}
    if not engines:
        assert ratios == {}
        return
    assert ratios["engine"] in engines and ratios["engine_s"] == min(engines.values())
    for key, system in (("tuned", "polytf"), ("untuned", "polytf_untuned")):
        if times.get(system) is not None:
            assert ratios[key] == pytest.approx(times[system] / min(engines.values()))
        else:
            assert key not in ratios


def test_openvino_runs_a_graphdef_in_float32(tmp_path):
    pytest.importorskip("openvino")
    from polytf.bench.openvino_baseline import openvino_function

    feeds = _matmul_feeds()
    call = openvino_function(_write(tmp_path, MATMUL_RELU_PBTXT), feeds, ["out"], threads=1)
    (result,) = call()
    np.testing.assert_allclose(result, np.maximum(feeds["a"] @ feeds["b"], 0), rtol=1e-5, atol=1e-6)

    x = np.full((2, 3), 1000.0, np.float32)
    (product,) = openvino_function(_write(tmp_path, CONST_MATMUL_PBTXT, "const.pbtxt"), {"x": x}, ["y"], threads=2)()
    exact = 3 * 1000.0 * WEIGHT
    assert product.dtype == np.float32 and np.max(np.abs(product / exact - 1)) < 1e-6  # float16 weights: 2.4e-4


def test_openvino_failure_is_a_polytf_error(tmp_path):
    pytest.importorskip("openvino")
    from polytf.bench.openvino_baseline import openvino_function

    with pytest.raises(PolytfError, match="OpenVINO cannot run"):
        openvino_function(_write(tmp_path, MATMUL_RELU_PBTXT), _matmul_feeds(), ["no_such_node"], threads=1)


def test_a_missing_engine_says_how_to_install_it(tmp_path, monkeypatch):
    import sys

    from polytf.bench.engines import engine_function

    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino -> ImportError
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    for engine in ENGINES:
        with pytest.raises(DependencyMissingError, match=r"pip install 'polytf\[bench\]'"):
            engine_function(engine, _write(tmp_path, MATMUL_RELU_PBTXT), _matmul_feeds(), ["out"], 1)


@pytest.mark.tensorflow
def test_onnxruntime_runs_a_graphdef_and_reports_what_it_cannot_convert(tmp_path):
    for module in ("tensorflow", "onnxruntime", "tf2onnx"):
        pytest.importorskip(module)
    from polytf.bench.onnxruntime_baseline import onnxruntime_function

    feeds = _matmul_feeds()
    (result,) = onnxruntime_function(_write(tmp_path, MATMUL_RELU_PBTXT), feeds, ["out"], threads=1)()
    np.testing.assert_allclose(result, np.maximum(feeds["a"] @ feeds["b"], 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(PolytfError, match="ONNX Runtime cannot load|tf2onnx cannot convert") as caught:
        onnxruntime_function(_write(tmp_path, ERFC_PBTXT, "erfc.pbtxt"), {"x": np.zeros(4, np.float32)}, ["y"], threads=1)
    assert "\n" not in str(caught.value) and "Erfc" in str(caught.value)


def test_the_baseline_process_reports_missing_failing_and_wrong_engines(tmp_path, monkeypatch):
    """An engine not installed, one that fails and one with wrong outputs are errors of their
    systems (not timed); a right one is timed. Without TensorFlow, numpy is the reference."""
    from polytf.bench import baselines

    def engine_function(engine, path, feeds, outputs, threads):
        if engine == "openvino":
            raise DependencyMissingError("OpenVINO is not installed: pip install 'polytf[bench]'")
        return lambda: [np.maximum(feeds["a"] @ feeds["b"], 0) + 1.0]  # wrong by 1

    feeds = _matmul_feeds()
    files = {}
    for name, value in feeds.items():
        files[name] = str(tmp_path / f"{name}.npy")
        np.save(files[name], value)
    monkeypatch.setattr(baselines, "engine_function", engine_function)
    session = baselines.BaselineSession(1, tensorflow=False)
    session.engines = True  # engines without TensorFlow: checked against numpy
    loaded = session.load(str(_write(tmp_path, MATMUL_RELU_PBTXT)), files, ["out"], warmup=0)
    assert loaded["errors"]["openvino"].startswith(NOT_INSTALLED)
    assert loaded["errors"]["onnxruntime"].startswith("wrong result") and "numpy" in loaded["errors"]["onnxruntime"]
    assert loaded["systems"] == ["numpy"] and loaded["max_abs_error_vs_numpy"]["onnxruntime"] == pytest.approx(1.0)

    monkeypatch.setattr(
        baselines,
        "engine_function",
        lambda engine, path, feeds, outputs, threads: lambda: [np.maximum(feeds["a"] @ feeds["b"], 0)],
    )
    loaded = session.load(str(_write(tmp_path, MATMUL_RELU_PBTXT)), files, ["out"], warmup=1)
    assert loaded["systems"] == ["numpy", *ENGINES] and loaded["errors"] == {}
    assert set(session.round(repeats=2, warmup=0)["median_s"]) == {"numpy", *ENGINES}


def _row(**systems):
    row = {"entry": "m", "threads": 2, "systems": systems, "gflops": {}, "percent_of_peak": {}, "speedup": {}}
    return row


def test_the_report_shows_engines_their_errors_and_one_ratio_convention():
    from polytf.bench.cpu_report import RATIO_CONVENTION, columns, cpu_markdown

    measured = _row(
        polytf={"median_s": 0.006},
        polytf_untuned={"median_s": 0.009},
        numpy={"median_s": 0.001},  # the fastest, but not an engine
        tensorflow={"median_s": 0.010},
        xla={"median_s": 0.008},
        openvino={"error": f"{NOT_INSTALLED}: OpenVINO is not installed: pip install 'polytf[bench]'"},
        onnxruntime={"median_s": 0.004},
    )
    wrong = _row(
        polytf={"median_s": 0.002},
        tensorflow={"median_s": 0.004},
        openvino={"error": "wrong result: ..."},
        onnxruntime={"error": "tf2onnx cannot convert"},
    )
    table = {title: [cell(row) for row in (measured, wrong)] for title, cell in columns([measured, wrong])}
    assert table["OpenVINO ms"] == [NOT_INSTALLED, "wrong"] and table["ORT ms"] == ["4.000", "failed"]
    assert table["best engine"] == ["ORT", "TF"]
    assert table["tuned / best engine"] == ["**1.50**", "**0.50**"] and table["untuned / best engine"] == ["2.25", "-"]
    text = cpu_markdown({"machine": {}, "settings": {}, "rows": [measured, wrong], "notes": []})
    assert text.count(RATIO_CONVENTION) == 1 and "baseline time / polytf time" not in text
    assert "Time / the best engine's (ORT, 4.000 ms): tuned 1.50, untuned 2.25." in text
    assert "m, 2 thread(s): OpenVINO failed: not installed" in text


def test_the_engines_suite_has_the_issues_rows(monkeypatch):
    from polytf.bench import suite

    labels = [workload.label for workload, _ in suite.resolve_entries([], "engines", None)]
    for name in ("resnet50", "inception_v3", "densenet121", "mobilenet_v2", "efficientnet_b0"):
        assert f"{name} b1" in labels and f"{name} b8" in labels
    assert {"transformer_encoder b1", "gpt2_block b2", "cifar_cnn b32", "mlp b1", "matmul 1024x1024x1024"} <= set(labels)
    assert ("mlp_mixer b1" in labels) == ("mlp_mixer" in suite._zoo_names())  # optional: there when the zoo has it
    names = suite._zoo_names()
    monkeypatch.setattr(suite, "_zoo_names", lambda: (*names, "mlp_mixer"))
    assert "mlp_mixer b1" in [workload.label for workload, _ in suite.resolve_entries([], "engines", None)]
    monkeypatch.setattr(suite, "_zoo_names", lambda: tuple(name for name in names if name != "mlp_mixer"))
    assert "mlp_mixer b1" not in [workload.label for workload, _ in suite.resolve_entries([], "engines", None)]
