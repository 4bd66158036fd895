"""In-place concatenation and padding: operands written straight into their result's buffer,
results identical to the model with the copies, refused where a kernel would read what it
writes, and rewritten kernels that still verify against their numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, placeholder

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.config import MeasurementConfig
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.plan.buffer_placement import find_placements, place_in_consumer_buffers
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
RNG = np.random.default_rng(7)


def _conv(name, source, kernel, channels_in, channels_out, padding="SAME", stride=1):
    return [
        const(f"{name}_f", RNG.standard_normal((kernel, kernel, channels_in, channels_out)).astype(np.float32)),
        Node(name, "Conv2D", (source, f"{name}_f:0"), attrs={"strides": (1, stride, stride, 1), "padding": padding, "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
    ]


def _concat(name, *sources, axis=3):
    return [const(f"{name}_axis", np.array(axis, np.int32)), Node(name, "ConcatV2", (*sources, f"{name}_axis:0"), attrs={"N": len(sources)})]


def _lowered(graph):
    groups = partition(graph)
    return groups, tuple(lower_group(graph, group) for group in groups)


def _models(graph):
    """The model with the copies and the model with its tensors placed, default recipes."""
    groups, kernels = _lowered(graph)
    plain = build_model(PreparedModel(graph, groups, kernels, ()), threads=2)
    placed_groups, placed_kernels = place_in_consumer_buffers(graph, groups, kernels)
    placed = build_model(PreparedModel(graph, placed_groups, placed_kernels, ()), threads=2)
    return plain, placed, kernels, placed_kernels


def _same_results(plain, placed, inputs):
    expected, actual = plain(**inputs), placed(**inputs)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-5)


def densenet_block(layers=3, channels=8, growth=4, bottleneck=None):
    """x -> conv -> [concat(previous, relu(conv(relu(previous))))] x layers -> relu -> 1x1 conv.

    With ``bottleneck`` (DenseNet's layers), each layer's 3x3 conv reads ``relu(1x1 conv to
    bottleneck channels)`` instead: every 3x3 convolution is then the same computation,
    written at another offset of the block's concatenation."""
    nodes = [placeholder("x", (1, 6, 6, 3)), *_conv("stem", "x:0", 3, 3, channels)]
    previous, width = "stem:0", channels
    for layer in range(layers):
        nodes.append(Node(f"pre{layer}", "Relu", (previous,)))
        source, source_width = f"pre{layer}:0", width
        if bottleneck:
            nodes += _conv(f"narrow{layer}", source, 1, width, bottleneck)
            nodes.append(Node(f"mid{layer}", "Relu", (f"narrow{layer}:0",)))
            source, source_width = f"mid{layer}:0", bottleneck
        nodes += _conv(f"conv{layer}", source, 3, source_width, growth)
        nodes += _concat(f"cat{layer}", previous, f"conv{layer}:0")
        previous, width = f"cat{layer}:0", width + growth
    nodes.append(Node("post", "Relu", (previous,)))
    nodes += _conv("head", "post:0", 1, width, 5)
    return build_graph(nodes, ["head:0"])


def test_a_densenet_block_writes_every_layer_into_one_concatenation():
    graph = densenet_block()
    groups, kernels = _lowered(graph)
    placements = find_placements(graph, kernels)
    # cat2 is read only by the Relu fused into its own kernel: a temporary, no buffer to write into
    assert set(placements) == {"stem:0", "conv0:0", "cat0:0", "conv1:0"}
    assert {p.buffer for p in placements.values()} == {"cat1:0"}
    assert [placements[t].offset[3] for t in ("stem:0", "conv0:0", "conv1:0")] == [0, 8, 12]
    assert placements["cat0:0"].offset == (0, 0, 0, 0)
    plain, placed, kernels, placed_kernels = _models(graph)
    assert len(placed.kernels) == len(plain.kernels)  # each concatenation's kernel keeps its fused Relu
    copies = [s for kernel in placed_kernels for s in kernel.scop.statements if s.op == "ConcatV2"]
    assert {s.node for s in copies} == {"cat2"}  # cat0's and cat1's copies are gone
    conv = next(k for k in placed_kernels if any(s.node == "conv1" for s in k.scop.statements))
    written = conv.scop.array(next(s for s in conv.scop.statements if s.node == "conv1").write.array)
    assert written.shape == (1, 6, 6, 16) and written.tensor == "cat1:0" and written.role == "output"
    _same_results(plain, placed, {"x": RNG.standard_normal((1, 6, 6, 3)).astype(np.float32)})


@pytest.mark.parametrize("axis", [1, 2, 3])
def test_concatenation_on_any_axis(axis):
    nodes = [placeholder("x", (2, 5, 4, 3)), *_conv("a", "x:0", 3, 3, 3), *_conv("b", "x:0", 1, 3, 3)]
    nodes += _concat("cat", "a:0", "b:0", axis=axis)
    nodes += _conv("head", "cat:0", 1, 6 if axis == 3 else 3, 2)
    graph = build_graph(nodes, ["head:0"])
    plain, placed, _, _ = _models(graph)
    assert len(placed.kernels) == len(plain.kernels) - 1  # nothing left of the concatenation's kernel
    offsets = {t: p.offset for t, p in find_placements(graph, _lowered(graph)[1]).items()}
    expected_b = [0, 0, 0, 0]
    expected_b[axis] = (2, 5, 4, 3)[axis]
    assert offsets == {"a:0": (0, 0, 0, 0), "b:0": tuple(expected_b)}
    _same_results(plain, placed, {"x": RNG.standard_normal((2, 5, 4, 3)).astype(np.float32)})


def padded_depthwise():
    """x -> 1x1 conv -> Pad 1 (zeros) -> 3x3 depthwise VALID stride 2 (Keras' stride-2 depthwise layers)."""
    nodes = [placeholder("x", (1, 7, 7, 4)), *_conv("a", "x:0", 1, 4, 4)]
    nodes += [const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)), Node("pad", "Pad", ("a:0", "pads:0"))]
    nodes += [
        const("dw_f", RNG.standard_normal((3, 3, 4, 1)).astype(np.float32)),
        Node("dw", "DepthwiseConv2dNative", ("pad:0", "dw_f:0"), attrs={"strides": (1, 2, 2, 1), "padding": "VALID", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
    ]
    return build_graph(nodes, ["dw:0"])


def test_a_zero_pad_keeps_only_its_halo():
    graph = padded_depthwise()
    plain, placed, kernels, placed_kernels = _models(graph)
    pad = next(k for k in placed_kernels if any(s.op == "Pad" for s in k.scop.statements))
    assert len(pad.scop.statements) == 1 and pad.scop.statements[0].constraints  # the halo only
    assert find_placements(graph, kernels)["a:0"].offset == (0, 1, 1, 0)
    _same_results(plain, placed, {"x": RNG.standard_normal((1, 7, 7, 4)).astype(np.float32)})


def test_placeholders_constants_and_model_outputs_keep_their_buffers():
    nodes = [placeholder("x", (1, 4, 4, 2)), *_conv("a", "x:0", 1, 2, 2), const("c", np.ones((1, 4, 4, 2), np.float32))]
    nodes += _concat("cat", "x:0", "a:0", "c:0")
    nodes += [Node("act", "Relu", ("cat:0",))]
    graph = build_graph(nodes + _concat("out", "a:0", "act:0"), ["out:0", "a:0"])
    placements = find_placements(graph, _lowered(graph)[1])
    assert "x:0" not in placements and "c:0" not in placements
    assert "a:0" not in placements  # a model output
    assert all(p.buffer != "out:0" for p in placements.values())  # a model output


def test_a_kernel_that_reads_one_slab_and_writes_another_keeps_the_copies():
    """concat(a, g(a)): g's kernel would read slab 0 of the buffer and write slab 1."""
    nodes = [placeholder("x", (1, 4, 4, 2)), *_conv("a", "x:0", 1, 2, 2), *_conv("g", "a:0", 3, 2, 2)]
    nodes += _concat("cat", "a:0", "g:0")
    nodes += _conv("head", "cat:0", 1, 4, 2)
    graph = build_graph(nodes, ["head:0"])
    groups, kernels = _lowered(graph)
    assert len(find_placements(graph, kernels)) == 2
    new_groups, new_kernels = place_in_consumer_buffers(graph, groups, kernels)
    assert new_kernels is kernels and new_groups is groups
    plain, placed, _, _ = _models(graph)
    _same_results(plain, placed, {"x": RNG.standard_normal((1, 4, 4, 2)).astype(np.float32)})


@pytest.mark.parametrize("graph", [densenet_block(layers=3), densenet_block(layers=3, bottleneck=6), padded_depthwise()], ids=["concatenations", "windows", "pad"])
def test_rewritten_kernels_verify_against_their_reference(graph):
    groups, kernels = _lowered(graph)
    _, placed_kernels = place_in_consumer_buffers(graph, groups, kernels)
    changed = [k for k in placed_kernels if k not in kernels]
    assert len(changed) >= 2
    space_config = MeasurementConfig(repeats=1, min_repeat_s=0.0)
    for kernel in changed:
        compiled = TARGET.compile(kernel.scop, TARGET.search_space(kernel.scop, 2).default_recipe())
        measurement = KernelBench(kernel).measure(compiled, 2, space_config, timed=False)
        assert measurement.error is None, (kernel.scop.name, measurement.error)

def test_a_kernel_writing_one_slab_writes_a_window_and_expects_nan_elsewhere():
    """conv1 writes channels 12..15 of cat1's buffer [1, 6, 6, 16]: its array is the buffer
    seen from element 12 on, written at channels 0..3 of the window."""
    graph = densenet_block(layers=3)
    groups, kernels = _lowered(graph)
    _, placed_kernels = place_in_consumer_buffers(graph, groups, kernels)
    conv = next(k for k in placed_kernels if any(s.node == "conv1" for s in k.scop.statements))
    (written,) = [info.name for info in conv.scop.arrays if info.role == "output"]
    assert conv.array_origins == {written: 12}
    bench = KernelBench(conv)
    ((_, expected),) = bench.expected.items()
    assert expected.shape[-1] == 16 and np.isfinite(expected[..., :4]).all() and np.isnan(expected[..., 4:]).all()
    compiled = TARGET.compile(conv.scop, TARGET.search_space(conv.scop, 2).default_recipe())
    # the window needs the bytes up to the last element written, not the buffer's
    assert compiled.argument_bytes[[info.name for info in compiled.arrays].index(written)] == (5 * 6 * 16 + 5 * 16 + 3 + 1) * 4  # element (0, 5, 5, 3) of the window, and the one before it


def test_the_convolutions_writing_one_concatenation_at_other_offsets_are_one_kernel():
    graph = densenet_block(layers=3, bottleneck=6)
    plain, placed, kernels, placed_kernels = _models(graph)
    convs = [k for k in placed_kernels if any(s.node in ("conv0", "conv1") for s in k.scop.statements)]
    assert len(convs) == 2 and convs[0].scop.fingerprint() == convs[1].scop.fingerprint()
    assert [sorted(k.array_origins.values()) for k in convs] == [[8], [12]]
    # each writes a window of the concatenation [1, 6, 6, 16], not an array of its own
    assert all(info.shape == (1, 6, 6, 16) and info.tensor == "cat1:0" for k in convs for info in k.scop.arrays if info.role == "output")
    _same_results(plain, placed, {"x": RNG.standard_normal((1, 6, 6, 3)).astype(np.float32)})
