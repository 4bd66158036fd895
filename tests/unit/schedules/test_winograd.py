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
from polytf.schedules.analytic_recipe import CacheSizes
from polytf.schedules.builder import build_ast, register_tile_run, schedule_scop
from polytf.schedules.recipe import CpuRecipe, GpuRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.shared_nests import copy_groups, elementwise_units, group_depth
from polytf.schedules.structure import anchor_statement, copy_statements
from polytf.schedules.target_limits import TargetLimits
from polytf.schedules.validation import validate_recipe
from polytf.schedules.winograd import (
    TRANSFORMS,
    WINOGRAD_ALGORITHMS,
    WINOGRAD_TOLERANCE,
    preferred_winograd,
    winograd_applies,
    winograd_problem,
    winograd_recipe,
    winograd_scop,
    winograd_tiles,
)
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
F2, F4 = WINOGRAD_ALGORITHMS


def _conv(h, w, c, o, padding="SAME", seed=1, batch=1):
    """``x: [batch, h, w, c]`` -> Conv2D 3×3 stride 1 -> BiasAdd -> Relu, with a random filter."""
    rng = np.random.default_rng(seed)
    nodes = [
        placeholder("x", (batch, h, w, c)),
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
    # one recipe per algorithm first, so that a short budget compares the algorithms
    first = [algorithm for algorithm in algorithms if algorithm != "direct"]
    assert algorithms[: len(first)] == first and set(first) >= {F2, F4}
    assert space.default_recipe().algorithm == "direct"  # 9 tiles of 8 channels: the untuned default stays direct


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


@pytest.mark.parametrize(
    ("batch", "size", "ins", "outs", "expected"),
    [
        (1, 56, 64, 64, F4),  # ResNet50 conv2_x: 196 tiles
        (1, 28, 128, 32, F4),  # DenseNet121: 49 tiles
        (1, 35, 64, 96, F4),  # InceptionV3: 81 tiles covering 6% more than the output
        (1, 14, 256, 256, F2),  # 16 4×4 tiles: too few rows for F(4,3)'s weights; 49 2×2 tiles
        (8, 14, 256, 256, F2),  # at batch 8: 128 4×4 tiles covering 31% more than the output; 2×2 ones cover it
        (8, 14, 128, 32, F4),  # the same with 32 output channels: too few for F(2,3)'s transforms
        (1, 7, 512, 512, ""),  # 4 and 16 tiles
        (8, 7, 512, 512, ""),  # 128 2×2 tiles covering 31% more than the output
        (1, 14, 128, 32, ""),  # 32 output channels: too few for F(2,3)'s transforms
        (1, 147, 32, 64, ""),  # 32 channels: the transforms cost as much as the products
        (1, 10, 64, 64, ""),  # 9 tiles
    ],
)
def test_the_untuned_default_uses_winograd_where_it_measured_faster(batch, size, ins, outs, expected):
    problem = winograd_problem(_conv(size, size, ins, outs, batch=batch).scop)
    assert preferred_winograd(problem) == expected


def test_a_default_winograd_kernel_keeps_each_tile_in_cache():
    """The default recipe of ResNet50's 28×28×128 layer is F(4,3) with the tiles of
    :func:`winograd_tiles`: the transformed point outermost in the GEMM's band, the tile row's 7
    tiles as register-tile rows of 4 and 3 (not 6 and 1), the α² input-transform copies in one
    loop body per tile, the products' zero fill with the micro-kernel, and the m² output transforms
    and m² epilogue statements in nests of their own (one loop body measured slower)."""
    kernel = _conv(28, 28, 128, 128)
    space = SearchSpace.for_scop(kernel.scop, threads=2, lanes=8, registers=16, caches=CacheSizes(l2_bytes=512 * 1024))
    recipe = space.default_recipe()
    assert recipe.algorithm == F4
    problem = winograd_problem(kernel.scop)
    tiles = winograd_tiles(problem, 4, 32, 16, True, CacheSizes(l2_bytes=512 * 1024), 2)
    assert (recipe.tile_sizes[1], recipe.tile_sizes[3]) == (tiles.rows, tiles.channels or 128)
    translated = winograd_recipe(kernel.scop, recipe, TargetLimits(8, 16))
    assert translated.point_order[0] == "d4" and translated.register_tile_sizes[2:] == (4, 16)
    scheduled = schedule_scop(kernel.scop, recipe, limits=TargetLimits(8, 16), constant_arrays=constant_arrays(kernel))
    groups = copy_groups(copy_statements(scheduled.scop))
    assert sorted(len(group) for group in groups)[-1] == 36  # the input transform, one nest
    transforms = max(groups, key=len)
    assert group_depth(transforms) == 4  # ... and one loop body: (n, tile row, tile column, channel) shared
    ast = build_ast(scheduled.schedule).to_C_str()
    body = ast[ast.index(f"{transforms[0].name}(") : ast.index(f"{transforms[-1].name}(")]
    assert "for (" not in body  # no loop of its own for any of the 36 transforms
    run = register_tile_run(scheduled.scop, translated)
    assert [s.name for s in run] == ["S0", "S1"]  # zero fill + batched GEMM
    units = elementwise_units(scheduled.scop, run)
    assert len(units) == 1 + 2 * 16 and all(len(unit) == 1 for unit in units[1:])


@settings(max_examples=25, deadline=None)
@given(
    batch=st.sampled_from([1, 2, 8]),
    size=st.integers(5, 60),
    outs=st.sampled_from([16, 32, 64, 96, 128, 256, 512]),
    m=st.sampled_from([2, 4]),
    weights_outer=st.booleans(),
    l2_kib=st.sampled_from([512, 1024, 2048]),
)
def test_winograd_tiles_keep_the_products_in_half_of_l2_and_balance_the_threads(batch, size, outs, m, weights_outer, l2_kib):
    problem = winograd_problem(_conv(size, size, 4, outs, batch=batch).scop)
    caches = CacheSizes(l2_bytes=l2_kib * 1024)
    tiles = winograd_tiles(problem, m, 0, 16, weights_outer, caches, 2)
    alpha, tile_columns = m + 2, -(-size // m)
    channels = tiles.channels or outs
    assert tiles.rows % m == 0 or tiles.rows == size
    assert 0 < tiles.rows <= size and 0 < channels <= outs
    if tiles.rows > m:
        assert (tiles.rows // m) * tile_columns * alpha * alpha * channels * 4 <= caches.l2_bytes // 2
    if weights_outer and outs > 16:
        parts = -(-outs // channels)
        busiest = -(-parts // 2) * channels
        assert busiest * 32 <= (outs / 2 + 16) * 33  # within 1/32 of an even split (to a register tile)


def test_the_profile_counts_the_multiplications_a_winograd_kernel_executes():
    """``show --profile`` takes a Winograd kernel's FLOPs from its batched GEMM (α² · tiles ·
    C · O multiply-adds), not from the direct convolution (up to 9 · H · W · C · O), which would put
    it above the machine's peak."""
    from polytf.poly.flops import contraction_flops
    from polytf.runtime.cpu.profile import executed_flops

    kernel = _conv(28, 28, 16, 32)
    direct = contraction_flops(kernel.scop)
    assert 0 < direct <= 2 * 9 * 28 * 28 * 16 * 32  # SAME padding: the border's missing taps are not counted
    assert executed_flops(kernel.scop, CpuRecipe()) == direct
    assert executed_flops(kernel.scop, CpuRecipe(algorithm=F4)) == 2 * 36 * 7 * 7 * 16 * 32
    assert executed_flops(kernel.scop, CpuRecipe(algorithm=F2)) == 2 * 16 * 14 * 14 * 16 * 32
