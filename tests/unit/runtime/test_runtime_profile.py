"""profile_model: one row per kernel in execution order, FLOPs of the contractions, GFLOP/s and
% of a given peak, the whole call against the sum of the kernels inside it; timed calls of a
model: one clock for the call and its steps, results unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, placeholder

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.runtime.cpu.profile import CONVOLUTION, DEPTHWISE, ModelProfile, profile_model


def conv_then_dense():
    """x: [1, 8, 8, 3] -> Conv2D 3x3 SAME to 4 channels + Relu -> MaxPool 2x2 -> reshape [1, 64] -> MatMul to 5."""
    rng = np.random.default_rng(0)
    return build_graph(
        [
            placeholder("x", (1, 8, 8, 3)),
            const("f", rng.standard_normal((3, 3, 3, 4)).astype(np.float32)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs={"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
            Node("relu", "Relu", ("conv:0",)),
            Node("pool", "MaxPool", ("relu:0",), attrs={"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1), "padding": "VALID", "data_format": "NHWC"}),
            const("shape", np.array([1, 64], np.int32)),
            Node("flat", "Reshape", ("pool:0", "shape:0")),
            const("w", rng.standard_normal((64, 5)).astype(np.float32)),
            Node("dense", "MatMul", ("flat:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
        ],
        ["dense:0"],
    )


@pytest.fixture(scope="module")
def model():
    graph = conv_then_dense()
    groups = partition(graph)
    return build_model(PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ()), threads=1)


def test_one_row_per_kernel_in_execution_order(model):
    inputs = {"x": np.random.default_rng(1).standard_normal((1, 8, 8, 3)).astype(np.float32)}
    profile = profile_model(model, inputs, repeats=3, peak_gflops=100.0)
    assert [row.name for row in profile.kernels] == [kernel.scop.name for kernel in model.kernels]
    conv, *_, dense = profile.kernels
    assert conv.convolution == CONVOLUTION and conv.convolution_node[1] == "Conv2D" and conv.filter_size == (3, 3) and conv.output_shapes == ((1, 8, 8, 4),)
    taps = sum(1 for d in range(8) for r in range(3) if 0 <= d + r - 1 < 8)  # SAME: border taps read padding
    assert conv.flops == 2 * taps * taps * 4 * 3
    assert dense.flops == 2 * 64 * 5 and dense.convolution is None and dense.filter_size is None
    assert profile.flops == sum(row.flops for row in profile.kernels)
    for row in profile.kernels:
        assert row.median_s > 0 and row.recipe == model.recipes[row.name].describe()
        if row.flops:
            assert row.gflops == pytest.approx(row.flops / row.median_s / 1e9)
            assert row.percent_of_peak == pytest.approx(row.gflops)  # of 100 GFLOP/s
        else:
            assert row.gflops is None and row.percent_of_peak is None
    assert profile.call_s > 0 and profile.kernels_s == pytest.approx(sum(row.median_s for row in profile.kernels))
    # each call is timed on the clock of its kernels: it can only be longer than them
    assert profile.call_to_kernels_ratio >= 1.0 and profile.call_s >= profile.kernels_s * 0.5
    assert all(row.alone_median_s > 0 for row in profile.kernels)
    assert profile.alone_kernels_s == pytest.approx(sum(row.alone_median_s for row in profile.kernels))
    assert profile.alone_ratio == pytest.approx(profile.kernels_s / profile.alone_kernels_s) and profile.host_s == 0.0
    assert profile.gflops == pytest.approx(profile.flops / profile.call_s / 1e9) and profile.threads == 1


def test_table_totals_and_json(model):
    inputs = {"x": np.zeros((1, 8, 8, 3), np.float32)}
    without_peak = profile_model(model, inputs, repeats=1)
    assert without_peak.percent_of_peak is None and all(row.percent_of_peak is None for row in without_peak.kernels)
    assert "% of" not in without_peak.totals() and "call / kernels" in without_peak.totals()
    profile = profile_model(model, inputs, repeats=1, peak_gflops=50.0)
    table = profile.table()
    assert [column.header for column in table.columns] == ModelProfile.headers() and table.row_count == len(model.kernels)
    assert profile.rows()[0][1].startswith("Conv2D")
    assert "of 50 GFLOP/s peak (1 thread)" in profile.totals()
    data = json.loads(json.dumps(profile.to_dict()))
    assert len(data["kernels"]) == len(model.kernels) and data["kernels"][0]["filter_size"] == [3, 3]
    assert data["call_to_kernels_ratio"] == pytest.approx(profile.call_to_kernels_ratio)
    assert data["alone_kernels_s"] == pytest.approx(profile.alone_kernels_s) and data["host_s"] == 0.0


def test_timed_calls_read_one_clock_for_the_call_and_its_steps(model):
    inputs = {"x": np.random.default_rng(2).standard_normal((1, 8, 8, 3)).astype(np.float32)}
    expected = model(**inputs)
    calls = model.timed_calls(inputs, repeats=4, warmup=1)
    assert len(calls) == 4 and model.step_kinds == ("kernel",) * len(model.kernels)
    for call in calls:
        assert len(call.step_s) == len(model.kernels) and all(step > 0 for step in call.step_s)
        assert call.call_s >= call.steps_s == pytest.approx(sum(call.step_s))
    np.testing.assert_array_equal(model(**inputs)["dense"], expected["dense"])


def test_profile_without_alone_timing(model):
    profile = profile_model(model, {"x": np.zeros((1, 8, 8, 3), np.float32)}, repeats=2, alone=False)
    assert all(row.alone_median_s is None for row in profile.kernels)
    assert profile.alone_kernels_s is None and profile.alone_ratio is None
    assert "alone" not in profile.totals() and profile.rows()[0][4] == "-"


def test_a_depthwise_convolution_is_told_from_a_convolution_by_its_reductions():
    from hand_built_graphs import graph_depthwise

    graph = graph_depthwise(shape=(1, 6, 6, 4))
    groups = partition(graph)
    model = build_model(PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ()), threads=1)
    inputs = {"x": np.random.default_rng(2).standard_normal((1, 6, 6, 4)).astype(np.float32)}
    (row,) = profile_model(model, inputs, repeats=1, alone=False).kernels
    assert row.convolution == DEPTHWISE and row.convolution_node == ("dw", "DepthwiseConv2dNative") and row.filter_size == (3, 3)


def test_a_percentage_of_peak_that_cannot_be_is_flagged_not_printed(model):
    inputs = {"x": np.zeros((1, 8, 8, 3), np.float32)}
    honest = profile_model(model, inputs, repeats=1, peak_gflops=1e6)  # far above anything measured
    assert honest.impossible() == [] and "> 100?" not in str(honest.rows())
    tiny_peak = profile_model(model, inputs, repeats=1, peak_gflops=1e-6)  # every kernel "faster than the peak"
    contractions = [row for row in tiny_peak.kernels if row.percent_of_peak is not None]
    assert contractions and all(row.percent_of_peak > 100 for row in contractions)
    cells = [cells[7] for cells in tiny_peak.rows()]
    assert all(cell in ("> 100?", "-") for cell in cells) and "> 100?" in cells
    lines = tiny_peak.impossible()
    assert len(lines) == len(contractions) + 1 and all("cannot be" in line for line in lines)
    assert "> 100?% of" in tiny_peak.totals()
