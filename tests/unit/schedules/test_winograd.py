"""Winograd F(2×2,3×3) and F(4×4,3×3) (polytf.schedules.winograd): the transform matrices
compute a correlation exactly; the rewritten Scop, run by the reference interpreter and
compiled with the filter transformed ahead of time, equals the numpy reference within the
stated tolerance on shapes whose tiles do not divide the output (hypothesis); the tuner is
offered the algorithms only for 3×3 stride-1 convolutions, and validation names why
elsewhere; a small Keras model compiled with a forced Winograd recipe agrees with
TensorFlow."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from hand_built_graphs import (
    build_graph,
    const,
    graph_conv_bias_relu,
    graph_depthwise,
    graph_matmul_bias_relu,
    kernels_of,
    placeholder,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from polytf.compiler.kernel_compilation import constant_arrays
from polytf.config import MeasurementConfig
from polytf.errors import ScheduleError
from polytf.graph import Node
from polytf.poly.interpreter import interpret
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import schedule_scop
from polytf.schedules.recipe import CpuRecipe, GpuRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.structure import anchor_statement, copy_statements
from polytf.schedules.validation import validate_recipe
from polytf.schedules.winograd import TRANSFORMS, WINOGRAD_ALGORITHMS, WINOGRAD_TOLERANCE, winograd_applies, winograd_scop
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
F2, F4 = WINOGRAD_ALGORITHMS


def _conv(h, w, c, o, padding="SAME", seed=1):
    """``x: [1, h, w, c]`` -> Conv2D 3×3 stride 1 -> BiasAdd -> Relu, with a random filter."""
    rng = np.random.default_rng(seed)
    nodes = [
        placeholder("x", (1, h, w, c)),
        const("f", rng.standard_normal((3, 3, c, o)).astype(np.float32)),
        const("b", rng.standard_normal(o).astype(np.float32)),
        Node(
            "conv",
            "Conv2D",
            ("x:0", "f:0"),
            attrs={"strides": (1, 1, 1, 1), "padding": padding, "data_format": "NHWC", "dilations": (1, 1, 1, 1)},
        ),
        Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
        Node("relu", "Relu", ("bias:0",)),
    ]
    return kernels_of(build_graph(nodes, ["relu:0"]))[0]


def _within_tolerance(got: np.ndarray, expected: np.ndarray, algorithm: str) -> None:
    scale = float(np.max(np.abs(expected))) + 1e-30
    worst = float(np.max(np.abs(got - expected))) / scale
    assert worst <= WINOGRAD_TOLERANCE[algorithm], (
        f"{algorithm}: error {worst:.2e} x max|ref| beyond {WINOGRAD_TOLERANCE[algorithm]:.0e}"
    )


@pytest.mark.parametrize("m", [2, 4])
def test_transform_matrices_compute_a_correlation_exactly(m):
    """``y = Aᵀ [(G g) ⊙ (Bᵀ d)]`` is ``y[i] = Σ_k d[i + k] g[k]`` (Lavin & Gray, eq. 7),
    in exact rational arithmetic, for random integer d and g."""
    input_transform, filter_transform, output_transform = TRANSFORMS[m]
    rng = np.random.default_rng(m)
    for _ in range(5):
        d = [Fraction(int(v)) for v in rng.integers(-9, 10, m + 2)]
        g = [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
        transformed = [
            sum(Fraction(row[k]) * g[k] for k in range(3)) * sum(Fraction(b[j]) * d[j] for j in range(m + 2))
            for row, b in zip(filter_transform, input_transform)
        ]
        y = [sum(Fraction(a[j]) * transformed[j] for j in range(m + 2)) for a in output_transform]
        assert y == [sum(d[i + k] * g[k] for k in range(3)) for i in range(m)]


@settings(max_examples=12, deadline=None)
@given(
    h=st.integers(3, 9),
    w=st.integers(3, 9),
    c=st.integers(1, 4),
    o=st.integers(1, 5),
    padding=st.sampled_from(["SAME", "VALID"]),
    algorithm=st.sampled_from(list(WINOGRAD_ALGORITHMS)),
)
def test_rewritten_scop_computes_the_reference(h, w, c, o, padding, algorithm):
    kernel = _conv(h, w, c, o, padding)
    assert winograd_applies(kernel.scop)
    scop = winograd_scop(kernel.scop, algorithm)
    assert anchor_statement(scop).op == "Conv2D" and len(anchor_statement(scop).reduction_iterators) == 1  # the batched GEMM
    rng = np.random.default_rng(0)
    inputs = {a.name: rng.standard_normal(a.shape).astype(np.float32) for a in kernel.input_arrays}
    inputs.update(kernel.constant_values)
    ((name, expected),) = kernel.reference(inputs).items()
    _within_tolerance(interpret(scop, inputs)[name], expected, algorithm)


@pytest.mark.parametrize(
    ("shape", "padding", "algorithm", "parallel"),
    [((7, 5, 3, 10), "SAME", F2, True), ((9, 6, 5, 17), "VALID", F4, False), ((5, 11, 8, 16), "SAME", F4, True)],
    ids=["f2-same-odd", "f4-valid", "f4-same-parallel"],
)
def test_compiled_kernels_with_the_filter_transformed_ahead_of_time_compute_the_reference(shape, padding, algorithm, parallel):
    kernel = _conv(*shape, padding=padding)
    space = SearchSpace.for_scop(
        kernel.scop, threads=2, lanes=TARGET.limits.vector_lanes, registers=TARGET.limits.vector_registers
    )
    assert algorithm in space.choices("algorithm")
    recipe = dataclasses.replace(space.default_recipe(), algorithm=algorithm, parallel=parallel)
    compiled = TARGET.compile(kernel.scop, recipe, constant_arrays(kernel))
    alpha = WINOGRAD_ALGORITHMS[algorithm] + 2
    assert len(compiled.constant_copies) == alpha * alpha  # G g Gᵀ: once, by the caller
    bench = KernelBench(kernel, seed=3)
    error, _ = bench.verify(compiled, 2, MeasurementConfig())  # the tuner's own verification
    assert error is None
    (output,) = kernel.output_arrays
    _within_tolerance(bench.arrays[bench.index[output.name]], bench.expected[output.name], algorithm)


def test_filter_transform_stays_in_the_kernel_when_the_filter_is_no_constant():
    kernel = _conv(6, 6, 2, 8)
    recipe = CpuRecipe(algorithm=F2)
    inside = schedule_scop(kernel.scop, recipe, limits=TARGET.limits)
    ahead = schedule_scop(kernel.scop, recipe, limits=TARGET.limits, constant_arrays=constant_arrays(kernel))
    assert not inside.constant_copies and len(ahead.constant_copies) == 16
    assert len(copy_statements(inside.scop)) == len(copy_statements(ahead.scop)) + 16


def test_the_scop_and_its_fingerprint_are_left_alone():
    kernel = _conv(6, 6, 2, 8)
    before = kernel.scop.fingerprint()
    schedule_scop(kernel.scop, CpuRecipe(algorithm=F4), limits=TARGET.limits)
    assert kernel.scop.fingerprint() == before
    assert winograd_scop(kernel.scop, F4).fingerprint() != before


@pytest.mark.parametrize(
    ("kernel", "reason"),
    [
        (lambda: kernels_of(graph_conv_bias_relu(8, 8, 3, 4, stride=2))[0], "stride 1"),
        (lambda: kernels_of(graph_conv_bias_relu(9, 9, 3, 4, stride=1, dilation=2))[0], ""),
        (lambda: kernels_of(graph_matmul_bias_relu(6, 5, 7))[0], "not a 2-D convolution"),
        (lambda: kernels_of(graph_depthwise())[0], ""),
    ],
    ids=["stride-2", "dilation-2", "matmul", "depthwise"],
)
def test_winograd_is_offered_only_where_it_applies_and_refused_elsewhere(kernel, reason):
    kernel = kernel()
    assert not winograd_applies(kernel.scop)
    space = SearchSpace.for_scop(kernel.scop, threads=2)
    assert not set(WINOGRAD_ALGORITHMS) & set(space.choices("algorithm"))
    with pytest.raises(ScheduleError, match=f"algorithm.*Winograd does not apply.*{reason}"):
        validate_recipe(kernel.scop, dataclasses.replace(space.default_recipe(), algorithm=F2))


def test_a_gpu_recipe_cannot_ask_for_winograd():
    kernel = _conv(6, 6, 2, 8)
    with pytest.raises(ScheduleError, match="Winograd does not apply: a GPU recipe"):
        validate_recipe(kernel.scop, GpuRecipe(algorithm=F4))


def test_the_tuner_starts_from_winograd_recipes_too():
    kernel = _conv(12, 12, 8, 16)
    space = SearchSpace.for_scop(kernel.scop, threads=2)
    algorithms = [recipe.algorithm for recipe in space.heuristic_recipes()]
    assert F2 in algorithms and F4 in algorithms
    assert space.default_recipe().algorithm == "direct"  # the untuned default keeps the direct convolution


@pytest.mark.tensorflow
def test_keras_conv_compiled_with_winograd_matches_tensorflow(tmp_path):
    """A Keras Conv2D 3×3 (bias, ReLU) frozen to a GraphDef, every applicable kernel forced to
    F(4,3), against TensorFlow running the same graph (the tolerance of the e2e tests, the
    absolute part widened to Winograd's)."""
    pytest.importorskip("tensorflow")
    import keras

    from polytf.compiler.model_builder import build_model
    from polytf.compiler.preparation import prepare_model
    from polytf.model_zoo import freeze_to_graphdef, run_graphdef_with_tensorflow

    inputs = keras.Input(shape=(10, 9, 6), batch_size=1, name="input")
    outputs = keras.layers.Conv2D(12, 3, padding="same", activation="relu", bias_initializer="random_normal")(inputs)
    path = tmp_path / "conv.pb"
    path.write_bytes(freeze_to_graphdef(keras.Model(inputs, outputs), [("input", (1, 10, 9, 6))]).SerializeToString())
    prepared = prepare_model(path, fallback=False)
    recipes = {}
    for kernel in prepared.kernels:
        if winograd_applies(kernel.scop):
            recipes[kernel.scop.name] = dataclasses.replace(TARGET.search_space(kernel.scop, 2).default_recipe(), algorithm=F4)
    assert recipes, "the Keras convolution should be one Winograd can run"
    model = build_model(prepared, recipes, TARGET, threads=2)
    feeds = {"input": np.random.default_rng(7).standard_normal((1, 10, 9, 6)).astype(np.float32)}
    (result,) = model(**feeds).values()
    (reference,) = run_graphdef_with_tensorflow(path, feeds, ["Identity"]).values()
    atol = WINOGRAD_TOLERANCE[F4] * float(np.max(np.abs(reference))) + 1e-6
    np.testing.assert_allclose(result.reshape(reference.shape), reference, rtol=1e-4, atol=atol)
