"""Run-time int32, int64 and bool tensors: comparisons, logical ops, Select/SelectV2, Cast
between dtypes and GatherV2 on run-time indices — references against ``tf.raw_ops``,
lowerings through the interpreter, compiled kernels under default and search-space
recipes, whole models through ``polytf.load``, and the out-of-range guard of gathers."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.config import MeasurementConfig
from polytf.errors import IndexOutOfRangeError, ShapeError
from polytf.graph import Node
from polytf.lowering.host_fallback import lower_with_fallback
from polytf.ops import lookup
from polytf.ops.comparison import COMPARISONS
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
CHECK = MeasurementConfig(rtol=1e-5, atol_scale=1e-6)


def placeholder(name, shape, dtype="float32"):
    return Node(name, "Placeholder", attrs={"dtype": dtype, "shape": tuple(shape)})


def _mixed(rng, shape, dtype):
    if dtype == "float32":
        x = rng.standard_normal(shape).astype(np.float32)
        x.reshape(-1)[:2] = [np.nan, 0.0]
        return x
    return rng.integers(-3, 4, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_comparison_reference_matches_tensorflow_and_lowering(rng, run_op, op, dtype):
    tf = pytest.importorskip("tensorflow")
    a, b = _mixed(rng, (3, 5), dtype), _mixed(rng, (5,), dtype)
    b[0] = a[0, 0]  # some equal pairs, NaN against a number
    (expected,), (got,), _ = run_op(Node("c", op, ("a:0", "b:0")), [a, b])
    actual = getattr(tf.raw_ops, op)(x=a, y=b).numpy()
    assert expected.dtype == bool
    np.testing.assert_array_equal(expected, actual)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["LogicalAnd", "LogicalOr", "LogicalNot"])
def test_logical_ops_match_tensorflow(rng, run_op, op):
    tf = pytest.importorskip("tensorflow")
    a, b = rng.random((4, 6)) < 0.5, rng.random((6,)) < 0.5
    inputs = [a] if op == "LogicalNot" else [a, b]
    (expected,), (got,), _ = run_op(Node("l", op, tuple(f"i{k}:0" for k in range(len(inputs)))), inputs)
    actual = (tf.raw_ops.LogicalNot(x=a) if op == "LogicalNot" else getattr(tf.raw_ops, op)(x=a, y=b)).numpy()
    np.testing.assert_array_equal(expected, actual)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("op", "shapes"),
    [("SelectV2", ((4, 1), (4, 5), ())), ("SelectV2", ((5,), (2, 4, 5), (4, 5))), ("Select", ((4,), (4, 3), (4, 3))), ("Select", ((4, 3), (4, 3), (4, 3)))],
)
def test_select_matches_tensorflow(rng, run_op, op, shapes):
    tf = pytest.importorskip("tensorflow")
    condition = rng.random(shapes[0]) < 0.5
    then, otherwise = (rng.standard_normal(s).astype(np.float32) for s in shapes[1:])
    (expected,), (got,), _ = run_op(Node("s", op, ("c:0", "t:0", "e:0")), [condition, then, otherwise])
    names = ("t", "e") if op == "SelectV2" else ("x", "y")  # tf.raw_ops.Select takes x and y
    actual = getattr(tf.raw_ops, op)(condition=condition, **dict(zip(names, (then, otherwise)))).numpy()
    np.testing.assert_array_equal(expected, actual)
    np.testing.assert_array_equal(got, expected)


def test_select_needs_a_bool_condition():
    from polytf.graph import TensorType

    with pytest.raises(ShapeError, match="must be bool"):
        lookup("SelectV2").infer(Node("s", "SelectV2", ("c:0", "t:0", "e:0")), [TensorType((3,), "float32")] * 3, [None] * 3)


@pytest.mark.parametrize(("source", "destination"), [("float32", "int32"), ("float32", "int64"), ("int32", "float32"), ("int64", "int32"), ("float32", "bool"), ("bool", "float32"), ("int32", "bool")])
def test_runtime_cast_matches_tensorflow(rng, run_op, source, destination):
    tf = pytest.importorskip("tensorflow")
    if source == "bool":
        x = rng.random((13,)) < 0.5
    elif source == "float32":
        x = (rng.standard_normal(13) * 5).astype(np.float32)
        x[:4] = [-2.7, 2.7, -0.0, 0.0]
    else:
        x = rng.integers(-9, 9, 13).astype(source)
    node = Node("c", "Cast", ("x:0",), attrs={"SrcT": source, "DstT": destination})
    (expected,), (got,), _ = run_op(node, [x])
    actual = tf.raw_ops.Cast(x=x, DstT=tf.as_dtype(destination)).numpy()
    np.testing.assert_array_equal(expected, actual)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.dtype(destination)


def _embedding_graph(vocabulary=11, width=6, sequence=7, batch=2):
    rng = np.random.default_rng(5)
    table = rng.standard_normal((vocabulary, width)).astype(np.float32)
    positions = rng.standard_normal((sequence, width)).astype(np.float32)
    graph = build_graph(
        [
            placeholder("ids", (batch, sequence), "int32"),
            placeholder("mask", (batch, sequence), "int32"),
            const("table", table),
            const("axis", np.int32(0)),
            const("positions", positions),
            const("zero", np.int32(0)),
            const("big", np.float32(-1e4)),
            Node("embed", "GatherV2", ("table:0", "ids:0", "axis:0"), attrs={"batch_dims": 0}),
            Node("with_positions", "AddV2", ("embed:0", "positions:0")),
            Node("padding", "Equal", ("mask:0", "zero:0")),
            const("shape", np.array([batch, sequence, 1], np.int32)),
            Node("padding3", "Reshape", ("padding:0", "shape:0")),
            Node("masked", "SelectV2", ("padding3:0", "big:0", "with_positions:0")),
            Node("mask_float", "Cast", ("mask:0",), attrs={"SrcT": "int32", "DstT": "float32"}),
            Node("mask3", "Reshape", ("mask_float:0", "shape:0")),
            Node("out", "Mul", ("masked:0", "mask3:0")),
        ],
        ["out:0"],
    )
    return graph, table, positions


def _expected(ids, mask, table, positions):
    embedded = table[ids] + positions
    return np.where((mask == 0)[..., None], np.float32(-1e4), embedded) * mask[..., None].astype(np.float32)


def test_gather_on_runtime_ids_lowers_to_a_gather_statement():
    graph, _, _ = _embedding_graph()
    kernels = kernels_of(graph)
    gathers = [k for k in kernels if "GatherV2" in {op for _, op in k.scop.ops}]
    assert len(gathers) == 1
    (statement,) = gathers[0].scop.statements  # the gather inlined into the position add
    assert str(statement.value).startswith("add(gather(")
    (dynamic,) = [a for a in statement.reads if a.is_dynamic]
    relation = statement.access_map(dynamic)
    # the table's whole first axis, for every point
    assert relation.range().is_equal(isl.Set("{ A0[r, c] : 0 <= r <= 10 and 0 <= c <= 5 }"))


def test_compiled_kernels_with_int_and_bool_arrays_match_the_reference():
    graph, _, _ = _embedding_graph()
    for kernel in kernels_of(graph):
        space = SearchSpace.for_scop(kernel.scop, 2)
        for recipe in dict.fromkeys([space.default_recipe(), *space.heuristic_recipes()]):
            compiled = TARGET.compile(kernel.scop, recipe)
            bench = KernelBench(kernel, seed=3)
            error, _ = bench.verify(compiled, 2, CHECK)
            assert error is None, (kernel.scop.name, recipe, error)


def _model(monkeypatch, tmp_path):
    graph, table, positions = _embedding_graph()
    prepared = PreparedModel(graph, *lower_with_fallback(graph)[:2], ())
    return build_model(prepared, threads=2), table, positions


def test_a_model_with_int32_inputs_runs_and_matches_numpy(monkeypatch, tmp_path):
    model, table, positions = _model(monkeypatch, tmp_path)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 11, (2, 7)).astype(np.int32)
    mask = (rng.random((2, 7)) < 0.7).astype(np.int32)
    (out,) = model(ids=ids, mask=mask).values()
    np.testing.assert_allclose(out, _expected(ids, mask, table, positions), rtol=1e-6)
    # int64 ids that fit are converted; floats are not silently truncated
    (again,) = model(ids=ids.astype(np.int64), mask=mask).values()
    np.testing.assert_array_equal(again, out)


@pytest.mark.parametrize("bad", [11, -1, 2**31 - 1])
def test_an_out_of_range_id_is_an_error_naming_the_node(monkeypatch, tmp_path, bad):
    model, table, positions = _model(monkeypatch, tmp_path)
    ids = np.zeros((2, 7), np.int32)
    ids[1, 3] = bad
    with pytest.raises(IndexOutOfRangeError, match=rf"GatherV2 node 'embed': indices\[1, 3\] = {bad} is not in \[0, 11\)"):
        model(ids=ids, mask=np.ones((2, 7), np.int32))
    (out,) = model(ids=np.zeros((2, 7), np.int32), mask=np.ones((2, 7), np.int32)).values()  # still usable
    assert np.isfinite(out).all()


def test_generated_code_never_reads_outside_the_table():
    """The guard under the runtime's check: a kernel run directly with bad ids (past the end
    and negative) on a table with sentinel rows right before and right after it in memory
    reads only table rows (clamped), never the sentinels."""
    graph, table, positions = _embedding_graph()
    (kernel,) = [k for k in kernels_of(graph) if "GatherV2" in {op for _, op in k.scop.ops}]
    compiled = TARGET.compile(kernel.scop, SearchSpace.for_scop(kernel.scop, 1).default_recipe())
    arguments = ArgumentTable(compiled)
    guard = 4
    backing = np.full((guard + table.shape[0] + guard, table.shape[1]), 1e30, np.float32)
    backing[guard : guard + table.shape[0]] = table
    ids = np.array([[0, 10, 11, 12, 1000, -1, -5]] * 2, np.int32)
    for info in kernel.scop.arrays:
        slot = arguments.slot(info.name)
        if info.tensor == "table:0":
            arguments.bind(slot, backing[guard : guard + table.shape[0]])  # a view: the sentinels sit on both sides
        elif info.tensor == "ids:0":
            arguments.bind(slot, ids)
        elif info.role == "input":
            arguments.bind(slot, np.ascontiguousarray(kernel.constant_values.get(info.name, positions)).reshape(info.shape))
        elif info.role == "output":
            arguments.bind(slot, np.zeros(info.shape, np.float32))
    arguments.allocate_unbound()
    arguments.run(1)
    (out,) = (arguments.array(arguments.slot(a.name)) for a in kernel.scop.arrays if a.role == "output")
    assert np.max(np.abs(out)) < 1e3, "a sentinel row was read"
    clamped = np.clip(ids, 0, table.shape[0] - 1)
    np.testing.assert_allclose(out - positions, table[clamped], rtol=1e-5, atol=1e-5)


def test_tensorflow_graphdef_with_token_ids_matches_tensorflow(tmp_path):
    """A frozen TensorFlow function on int32 token ids (embedding lookup, a padding mask from
    an int32 input, a causal mask by comparison and SelectV2, Cast) against TensorFlow."""
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    rng = np.random.default_rng(1)
    table = tf.constant(rng.standard_normal((50, 8)).astype(np.float32))
    weights = tf.constant(rng.standard_normal((8, 8)).astype(np.float32))

    def model(ids, mask):
        x = tf.gather(table, ids)
        scores = tf.matmul(x, x, transpose_b=True)
        keep = tf.logical_and(tf.cast(mask, tf.bool)[:, None, :], tf.greater_equal(tf.range(6)[:, None], tf.range(6)[None, :]))
        scores = tf.where(keep, scores, tf.fill(tf.shape(scores), -1e9))
        return tf.matmul(tf.nn.softmax(scores), tf.matmul(x, weights)) * tf.cast(tf.reduce_sum(mask, axis=-1), tf.float32)[:, None, None]

    graph_def = freeze_to_graphdef(tf.function(model), [("ids", (2, 6), "int32"), ("mask", (2, 6), "int32")])
    path = tmp_path / "tokens.pb"
    path.write_bytes(graph_def.SerializeToString())
    ids = rng.integers(0, 50, (2, 6)).astype(np.int32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    compiled = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    (name,) = compiled.output_names
    got = compiled(ids=ids, mask=mask)[name]
    expected = run_graphdef_with_tensorflow(path, {"ids": ids, "mask": mask}, [name])[name]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_reductions_and_powers_compile_and_match_tensorflow(tmp_path, dtype):
    """Run-time integer Div (toward zero), FloorDiv, FloorMod (sign of the divisor) by
    constant divisors of both signs, integer Pow with a constant exponent, and Max/Min
    reductions that start from the dtype's extremes: compiled, equal to TensorFlow."""
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    divisors = tf.constant(np.array([3, -3, 7, -1, 1, 2], dtype))

    def model(x):
        return (
            tf.raw_ops.Div(x=x, y=divisors),
            tf.math.floordiv(x, divisors),
            tf.math.floormod(x, divisors),
            tf.math.pow(x, tf.constant(3, dtype)),
            tf.reduce_max(x, axis=1),
            tf.reduce_min(x, axis=0),
        )

    path = tmp_path / "integers.pb"
    path.write_bytes(freeze_to_graphdef(tf.function(model), [("x", (5, 6), dtype)]).SerializeToString())
    compiled = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    assert not compiled.host_nodes
    info = np.iinfo(dtype)
    x = np.random.default_rng(3).integers(-20, 21, size=(5, 6)).astype(dtype)
    x[0, :] = info.max  # Min over axis 0 must not start below it
    x[1, :] = info.min + 1  # Max over axis 1 must not start above it
    x[:, 0] = info.min + 1
    expected = run_graphdef_with_tensorflow(path, {"x": x}, list(compiled.output_names))
    actual = compiled(x=x)
    for name in compiled.output_names:
        if name == "Identity_3":  # the cube of the extremes overflows: compare where TensorFlow does not
            rows = slice(2, None)
            np.testing.assert_array_equal(actual[name][rows, 1:], expected[name][rows, 1:], err_msg=name)
            continue
        assert actual[name].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    # the most negative value divided by -1 wraps (as numpy) instead of trapping the process
    x[:, 3] = info.min
    np.testing.assert_array_equal(compiled(x=x)["Identity_1"][:, 3], np.full(5, info.min, dtype))


def test_integer_division_by_a_run_time_divisor_runs_on_the_host(tmp_path):
    """A run-time divisor could be zero, which TensorFlow reports as an error: the node runs
    on the host (its reference raises that error), and fallback=False refuses it by name."""
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.errors import UnsupportedOpError
    from polytf.lowering.host_fallback import HostExecutionError
    from polytf.model_zoo.freeze import freeze_to_graphdef

    path = tmp_path / "divide.pb"
    path.write_bytes(freeze_to_graphdef(tf.function(lambda x, y: tf.math.floormod(x, y) + 1), [("x", (4,), "int32"), ("y", (4,), "int32")]).SerializeToString())
    model = polytf.load(path, cache_dir=tmp_path / "cache")
    (host,) = model.host_nodes
    assert host.op == "FloorMod" and "divisor" in host.reason
    x, y = np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)
    (name,) = model.output_names
    np.testing.assert_array_equal(model(x=x, y=y)[name], tf.math.floormod(x, y).numpy() + 1)
    with pytest.raises(HostExecutionError, match="division by zero"):
        model(x=x, y=np.array([1, 0, 1, 1], np.int32))
    with pytest.raises(UnsupportedOpError, match="FloorMod"):
        polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
