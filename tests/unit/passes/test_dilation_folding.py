"""Dilation folding: ``SpaceToBatchND -> convolution -> BatchToSpaceND`` becomes one convolution
with ``dilations`` exactly when the paddings and crops are a SAME or VALID padding.

Hand-built graphs (numpy references before and after the pass), graphs TensorFlow writes for
dilated convolutions (1-D, 2-D, depthwise; SAME, VALID, causal; sizes the dilation does not
divide) against TensorFlow running the unfolded GraphDef, folded and with the pass left out,
and the zoo's dilated TCN compiled without fallback."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import numpy as np
import pytest
from graph_evaluation import assert_same_values, assert_types_consistent, evaluate, ops_of, typed_graph
from hand_built_graphs import const, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polytf.passes.pipeline as pipeline
from polytf.graph import Graph, Node
from polytf.ops import lookup
from polytf.passes.dilation_folding import fold_dilations
from polytf.passes.pipeline import optimize

MOVES = {"SpaceToBatchND", "BatchToSpaceND"}


def _required_paddings(sizes, kernel, dilations, padding):
    """TensorFlow's paddings and crops of ``with_space_to_batch`` (nn_ops.py,
    ``required_space_to_batch_paddings``): SAME's base padding plus the extra that rounds the
    padded size up to a multiple of the block, cropped again afterwards."""
    paddings, crops = [], []
    for size, taps, dilation in zip(sizes, kernel, dilations):
        span = (taps - 1) * dilation if padding == "SAME" else 0
        before, after = span // 2, span - span // 2
        extra = (-(size + before + after)) % dilation
        paddings.append([before, after + extra])
        crops.append([0, extra])
    return np.asarray(paddings, np.int32), np.asarray(crops, np.int32)


def _pattern(
    sizes=(9,),
    kernel=(3,),
    dilations=(2,),
    padding="SAME",
    channels=3,
    filters=4,
    batch=1,
    depthwise=False,
    bias_inside=False,
    paddings=None,
    crops=None,
    strides=(1, 1, 1, 1),
    to_space_block=None,
):
    """The nodes TensorFlow writes for a dilated convolution (``Conv1D``'s ExpandDims/Squeeze
    for one spatial dimension), then a BiasAdd and a Relu; output ``relu:0``."""
    rng = np.random.default_rng(sum(sizes) + 7 * sum(kernel) + 11 * sum(dilations))
    spatial = len(sizes)
    default_paddings, default_crops = _required_paddings(sizes, kernel, dilations, padding)
    paddings = default_paddings if paddings is None else np.asarray(paddings, np.int32)
    crops = default_crops if crops is None else np.asarray(crops, np.int32)
    window = (1, *kernel) if spatial == 1 else tuple(kernel)
    if depthwise:
        weights = rng.standard_normal((*window, channels, filters // channels)).astype(np.float32)
    else:
        weights = rng.standard_normal((*window, channels, filters)).astype(np.float32)
    block = np.asarray(dilations, np.int32)
    nodes = [
        placeholder("x", (batch, *sizes, channels)),
        const("block", block),
        const("to_space_block", block if to_space_block is None else np.asarray(to_space_block, np.int32)),
        const("paddings", paddings),
        const("crops", crops),
        const("w", weights),
        const("b", rng.standard_normal(filters).astype(np.float32)),
        Node("to_batch", "SpaceToBatchND", ("x:0", "block:0", "paddings:0")),
    ]
    conv_input = "to_batch:0"
    if spatial == 1:
        nodes += [const("axis", np.int32(-3)), Node("expand", "ExpandDims", ("to_batch:0", "axis:0"))]
        conv_input = "expand:0"
    op = "DepthwiseConv2dNative" if depthwise else "Conv2D"
    attrs = {"strides": strides, "padding": "VALID", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}
    nodes.append(Node("conv", op, (conv_input, "w:0"), attrs=attrs))
    tensor = "conv:0"
    if bias_inside:
        nodes.append(Node("bias_inside", "BiasAdd", (tensor, "b:0"), attrs={"data_format": "NHWC"}))
        tensor = "bias_inside:0"
    if spatial == 1:
        nodes.append(Node("squeeze", "Squeeze", (tensor,), attrs={"squeeze_dims": (-3,)}))
        tensor = "squeeze:0"
    nodes += [
        Node("to_space", "BatchToSpaceND", (tensor, "to_space_block:0", "crops:0")),
        Node("bias", "BiasAdd", ("to_space:0", "b:0"), attrs={"data_format": "NHWC"}),
        Node("relu", "Relu", ("bias:0",)),
    ]
    return nodes


def _feeds(graph: Graph, seed=0):
    (x,) = [node for node in graph.nodes.values() if node.op == "Placeholder"]
    return {x.name: np.random.default_rng(seed).standard_normal(graph.types[x.output(0)].shape).astype(np.float32)}


def _convolutions(graph: Graph):
    layouts = {node.name: lookup(node.op).weight_layout for node in graph.nodes.values()}
    return [node for node in graph.nodes.values() if layouts[node.name] is not None and layouts[node.name].is_convolution]


@st.composite
def _pattern_case(draw):
    spatial = draw(st.integers(1, 2))
    depthwise = spatial == 2 and draw(st.booleans())
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(spatial))
    dilations = tuple(draw(st.integers(1, 4)) for _ in range(spatial))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    lowest = [(k - 1) * d + 1 if padding == "VALID" else 1 for k, d in zip(kernel, dilations)]
    sizes = tuple(draw(st.integers(low, low + 9)) for low in lowest)
    channels = draw(st.integers(1, 3))
    filters = channels * draw(st.integers(1, 2)) if depthwise else draw(st.integers(1, 4))
    return {
        "sizes": sizes,
        "kernel": kernel,
        "dilations": dilations,
        "padding": padding,
        "channels": channels,
        "filters": filters,
        "batch": draw(st.integers(1, 2)),
        "depthwise": depthwise,
        "bias_inside": draw(st.booleans()),
    }


@settings(max_examples=40, deadline=None)
@given(_pattern_case())
def test_tensorflow_paddings_fold_into_the_dilated_convolution(case):
    graph = typed_graph(_pattern(**case), ["relu:0"])
    optimized, reports = optimize(graph)
    assert not MOVES & set(ops_of(optimized))
    one_tap = all(k == 1 for k in case["kernel"])
    convolutions = _convolutions(optimized)
    if one_tap and not case["depthwise"] and not convolutions:
        assert "MatMul" in ops_of(optimized)  # the folded 1x1 convolution became a matrix product
    else:
        (convolution,) = convolutions
        dilations = case["dilations"]
        expected = (1, 1, dilations[0], 1) if len(dilations) == 1 else (1, *dilations, 1)
        assert tuple(convolution.attrs["dilations"]) == expected
        assert convolution.attrs["padding"] == ("VALID" if one_tap else case["padding"])
    assert sum(r.rewrites for r in reports if r.name == "dilation folding") == 1
    assert_same_values(graph, optimized, _feeds(graph), rtol=1e-5)
    assert_types_consistent(optimized)


def test_one_dimensional_pattern_keeps_its_views_and_the_bias_inside_follows():
    graph = typed_graph(_pattern(sizes=(11,), kernel=(3,), dilations=(4,), bias_inside=True, batch=2), ["relu:0"])
    folded, report = fold_dilations(graph)
    assert report.rewrites == 1 and "1 x Conv2D" in report.detail
    assert sorted(ops_of(folded)) == sorted(
        ["Placeholder", "Const", "Const", "Const", "ExpandDims", "Conv2D", "BiasAdd", "Squeeze", "BiasAdd", "Relu"]
    )
    assert folded.nodes["expand"].inputs[0] == "x:0" and folded.nodes["bias"].inputs[0] == "squeeze:0"
    assert folded.types["conv:0"].shape == (2, 1, 11, 4)
    assert_same_values(graph, folded, _feeds(graph))


@pytest.mark.parametrize(
    "changes,why",
    [
        ({"paddings": [[1, 2]], "crops": [[0, 1]]}, "paddings and crops that are neither SAME nor VALID"),
        ({"paddings": [[2, 3]], "crops": [[1, 2]]}, "a padding of 1 on each side where SAME needs 2"),
        ({"strides": (1, 1, 2, 1), "padding": "VALID", "sizes": (13,)}, "a strided convolution"),
        ({"to_space_block": [4], "batch": 2}, "a batch-to-space block other than the space-to-batch one"),
    ],
)
def test_patterns_that_are_no_dilated_convolution_are_left_alone(changes, why):
    graph = typed_graph(_pattern(**({"sizes": (9,), "kernel": (3,), "dilations": (2,), "padding": "SAME"} | changes)), ["relu:0"])
    folded, report = fold_dilations(graph)
    assert report.rewrites == 0, why
    assert MOVES <= set(ops_of(folded))
    assert_same_values(graph, folded, _feeds(graph))


def test_a_second_reader_or_an_untyped_graph_keeps_the_pattern():
    nodes = _pattern(sizes=(8, 7), kernel=(3, 3), dilations=(2, 2))
    nodes.append(Node("other", "Relu", ("to_batch:0",)))
    graph = typed_graph(nodes, ["relu:0", "other:0"])
    folded, report = fold_dilations(graph)
    assert report.rewrites == 0 and MOVES <= set(ops_of(folded))
    untyped = Graph(nodes={n.name: n for n in _pattern()}, outputs=("relu:0",), source="<test>")
    folded, report = fold_dilations(untyped)
    assert report.rewrites == 0 and MOVES <= set(ops_of(folded))


def test_a_convolution_already_dilated_is_left_alone():
    nodes = _pattern(sizes=(12, 12), kernel=(2, 2), dilations=(2, 2), padding="VALID")
    nodes = [
        Node(n.name, n.op, n.inputs, n.control_inputs, {**n.attrs, "dilations": (1, 2, 2, 1)}) if n.name == "conv" else n
        for n in nodes
    ]
    graph = typed_graph(nodes, ["relu:0"])
    assert fold_dilations(graph)[1].rewrites == 0


# --- graphs TensorFlow writes ------------------------------------------------------------------


@contextlib.contextmanager
def _without_dilation_folding():
    """The graph optimizer without this pass: the two ops then run on their own."""
    saved = pipeline.PASSES
    pipeline.PASSES = tuple(entry for entry in saved if entry[0] != "dilation folding")
    try:
        yield
    finally:
        pipeline.PASSES = saved


def _assert_close(got, reference, what):
    """The project's end-to-end tolerance: rtol 1e-4, atol 1e-5 * max|reference| + 1e-6."""
    atol = 1e-5 * float(np.max(np.abs(reference), initial=0.0)) + 1e-6
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=atol, err_msg=what)


@st.composite
def _tensorflow_case(draw):
    spatial = draw(st.integers(1, 2))
    depthwise = spatial == 2 and draw(st.booleans())
    padding = draw(st.sampled_from(["SAME", "VALID", "causal"] if spatial == 1 else ["SAME", "VALID"]))
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(spatial))
    dilations = [draw(st.integers(1, 5)) for _ in range(spatial)]
    if max(dilations) == 1:
        dilations[draw(st.integers(0, spatial - 1))] = draw(st.integers(2, 5))
    lowest = [(k - 1) * d + 1 if padding == "VALID" else 1 for k, d in zip(kernel, dilations)]
    sizes = tuple(draw(st.integers(low, low + 10)) for low in lowest)
    return {
        "spatial": spatial,
        "depthwise": depthwise,
        "padding": padding,
        "kernel": kernel,
        "dilations": tuple(dilations),
        "sizes": sizes,
        "batch": draw(st.integers(1, 2)),
        "channels": draw(st.integers(1, 3)),
        "filters": draw(st.integers(1, 3)),
    }


def _write_tensorflow_graph(case, folder: Path) -> Path:
    """A frozen GraphDef of ``tf.nn.convolution`` / ``tf.nn.depthwise_conv2d`` with dilations
    (causal: an explicit Pad in front, as Keras writes it), a bias and a Relu."""
    tf = pytest.importorskip("tensorflow")
    from polytf.model_zoo.freeze import freeze_to_graphdef

    rng = np.random.default_rng(3)
    channels, filters, kernel, dilations = case["channels"], case["filters"], case["kernel"], list(case["dilations"])
    if case["depthwise"]:
        weights = tf.constant(rng.standard_normal((*kernel, channels, filters)).astype(np.float32))
        bias = tf.constant(rng.standard_normal(channels * filters).astype(np.float32))
    else:
        weights = tf.constant(rng.standard_normal((*kernel, channels, filters)).astype(np.float32))
        bias = tf.constant(rng.standard_normal(filters).astype(np.float32))

    def model(x):
        padding = case["padding"]
        if padding == "causal":
            x = tf.pad(x, [[0, 0], [(kernel[0] - 1) * dilations[0], 0], [0, 0]])
            padding = "VALID"
        if case["depthwise"]:
            y = tf.nn.depthwise_conv2d(x, weights, [1, 1, 1, 1], padding, dilations=dilations)
        else:
            y = tf.nn.convolution(x, weights, padding=padding, dilations=dilations)
        return tf.nn.relu(tf.nn.bias_add(y, bias))

    graph_def = freeze_to_graphdef(model, [("input", (case["batch"], *case["sizes"], channels))])
    path = folder / "dilated.pb"
    path.write_bytes(graph_def.SerializeToString())
    return path


@pytest.mark.tensorflow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tensorflow_case())
def test_folded_and_unfolded_graphs_match_tensorflow(case):
    pytest.importorskip("tensorflow")
    from polytf.compiler.preparation import prepare_graph
    from polytf.frontend import load_graph
    from polytf.model_zoo import run_graphdef_with_tensorflow

    with tempfile.TemporaryDirectory() as folder:
        path = _write_tensorflow_graph(case, Path(folder))
        assert MOVES <= set(ops_of(load_graph(path))), "TensorFlow writes a dilated convolution with a space-to-batch pair"
        x = np.random.default_rng(1).standard_normal((case["batch"], *case["sizes"], case["channels"])).astype(np.float32)
        reference = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])["Identity"]
        folded, reports = prepare_graph(path)
        with _without_dilation_folding():
            unfolded, _ = prepare_graph(path)
    assert not MOVES & set(ops_of(folded)) and sum(r.rewrites for r in reports if r.name == "dilation folding") == 1
    assert MOVES <= set(ops_of(unfolded))
    _assert_close(evaluate(folded, {"input": x})["Identity:0"], reference, "folded")
    _assert_close(evaluate(unfolded, {"input": x})["Identity:0"], reference, "unfolded")


@pytest.mark.tensorflow
@pytest.mark.parametrize("fold", [True, False])
def test_compiled_dilated_conv1d_matches_tensorflow(tmp_path, fold):
    """Compiled without fallback: the folded convolution, and the unfolded space-to-batch,
    convolution and batch-to-space kernels."""
    pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo import run_graphdef_with_tensorflow

    case = {
        "spatial": 1,
        "depthwise": False,
        "padding": "SAME",
        "kernel": (3,),
        "dilations": (3,),
        "sizes": (20,),
        "batch": 2,
        "channels": 3,
        "filters": 5,
    }
    path = _write_tensorflow_graph(case, tmp_path)
    x = np.random.default_rng(2).standard_normal((2, 20, 3)).astype(np.float32)
    with contextlib.nullcontext() if fold else _without_dilation_folding():
        model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    _assert_close(
        model(input=x)["Identity"], run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])["Identity"], f"fold={fold}"
    )


@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.parametrize("name", ["temporal_conv_net", "temporal_conv_net_same"])
def test_temporal_conv_net_folds_compiles_and_matches_tensorflow(frozen_model, tmp_path, name):
    import polytf
    from polytf.compiler.preparation import prepare_model
    from polytf.frontend import load_graph
    from polytf.model_zoo import run_graphdef_with_tensorflow

    path = frozen_model(name, 1)
    assert sum(op in MOVES for op in ops_of(load_graph(path))) == 12  # dilations 2, 4, 8: two convolutions each
    prepared = prepare_model(path, fallback=False)
    assert not MOVES & set(ops_of(prepared.graph))
    assert sum(r.rewrites for r in prepared.passes if r.name == "dilation folding") == 6
    dilated = sorted(
        tuple(n.attrs["dilations"]) for n in _convolutions(prepared.graph) if tuple(n.attrs["dilations"]) != (1, 1, 1, 1)
    )
    assert dilated == [(1, 1, d, 1) for d in (2, 2, 4, 4, 8, 8)]
    x = np.random.default_rng(4).standard_normal((1, 128, 16)).astype(np.float32)
    model = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    reference = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])["Identity"]
    assert float(np.std(reference)) > 0.1
    _assert_close(model(input=x)["Identity"], reference, name)
