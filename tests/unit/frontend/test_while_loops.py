"""While loops unrolled by the frontend, in both forms TensorFlow writes (a functional ``While``
and the TF1 frame of Enter/Merge/Switch/NextIteration/Exit), TensorList ops resolved, the
integer evaluator against the op table, and the errors: a dynamic trip count, too many
iterations, nested frames, a broken frame, a cycle that is no loop.

Hand-built GraphDefs need no TensorFlow; the ``tensorflow``-marked tests freeze small
``tf.while_loop`` functions both ways and compare polytf with TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, types_pb2

from polytf.errors import GraphError
from polytf.frontend import graph_from_graphdef
from polytf.frontend import while_loops as while_loops_module
from polytf.frontend.static_values import STATIC_OPS, StaticValues
from polytf.frontend.tensor_lists import resolve_tensor_lists
from polytf.frontend.while_loops import unroll_while_loops
from polytf.graph import Graph, Node
from polytf.ops import lookup

FLOAT = types_pb2.DT_FLOAT
INT32 = types_pb2.DT_INT32
HALF = np.float32(0.5)


def node(name: str, op: str, *inputs: str, **attrs) -> node_def_pb2.NodeDef:
    result = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        if isinstance(value, attr_value_pb2.AttrValue):
            result.attr[key].CopyFrom(value)
        elif isinstance(value, bool):
            result.attr[key].b = value
        elif isinstance(value, str):
            result.attr[key].s = value.encode()
        else:
            result.attr[key].type = value
    return result


def const(name: str, value, *inputs: str) -> node_def_pb2.NodeDef:
    array = np.asarray(value)
    dtype = FLOAT if array.dtype == np.float32 else INT32
    result = node(name, "Const", *inputs, dtype=dtype)
    tensor = result.attr["value"].tensor
    tensor.dtype = dtype
    for size in array.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = array.astype(np.float32 if dtype == FLOAT else np.int32).tobytes()
    return result


def placeholder(name: str, dtype: int = FLOAT, shape: Sequence[int] = (1, 4)) -> node_def_pb2.NodeDef:
    result = node(name, "Placeholder", dtype=dtype)
    for size in shape:
        result.attr["shape"].shape.dim.add(size=size)
    return result


def evaluate(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's outputs, node by node with the op table's numpy references."""
    values: dict[str, np.ndarray] = {}
    for item in graph.nodes.values():
        if item.op == "Placeholder":
            values[item.output(0)] = np.asarray(feeds[item.name])
            continue
        results = lookup(item.op).reference(item, [values[t] for t in item.inputs])
        for port, result in enumerate(results):
            values[item.output(port)] = np.asarray(result)
    return {tensor: values[tensor] for tensor in graph.outputs}


def expected_accumulator(x: np.ndarray, start: int, limit: int) -> tuple[np.ndarray, int]:
    """What both loops below compute: ``acc = x; for i in range(start, limit): acc = acc * 0.5 + x * x``
    (``Mul(x, x)``: a node reading one tensor twice keeps both inputs)."""
    acc = x.copy()
    trips = max(0, limit - start)
    for _ in range(trips):
        acc = acc * HALF + x * x
    return acc, trips


# --- the functional form -------------------------------------------------------------------


def functional_loop(start: int, limit_node: node_def_pb2.NodeDef) -> graph_pb2.GraphDef:
    """``While(i=start, acc=x, n, x)``: cond ``i < n``, body ``(i + 1, acc * 0.5 + x * x, n, x)``;
    output ``out = Identity(while:1)``."""
    cond = function_pb2.FunctionDef(
        node_def=[node("less", "Less", "i", "n", T=INT32)],
    )
    cond.signature.name = "loop_cond"
    body = function_pb2.FunctionDef(
        node_def=[
            const("one", np.int32(1)),
            node("next_i", "AddV2", "i", "one:output:0", T=INT32),
            const("half", HALF),
            node("scaled", "Mul", "acc", "half:output:0", T=FLOAT),
            node("square", "Mul", "x", "x", T=FLOAT),
            node("next_acc", "AddV2", "scaled:z:0", "square:z:0", T=FLOAT),
        ]
    )
    body.signature.name = "loop_body"
    for function in (cond, body):
        for argument, dtype in (("i", INT32), ("acc", FLOAT), ("n", INT32), ("x", FLOAT)):
            function.signature.input_arg.add(name=argument, type=dtype)
    cond.signature.output_arg.add(name="predicate", type=types_pb2.DT_BOOL)
    cond.ret["predicate"] = "less:z:0"
    for output, tensor, dtype in (
        ("i_out", "next_i:z:0", INT32),
        ("acc_out", "next_acc:z:0", FLOAT),
        ("n_out", "n", INT32),
        ("x_out", "x", FLOAT),
    ):
        body.signature.output_arg.add(name=output, type=dtype)
        body.ret[output] = tensor
    loop = node("loop", "While", "start", "x", "limit", "x", cond=attr_value_pb2.AttrValue(), body=attr_value_pb2.AttrValue())
    loop.attr["cond"].func.name = "loop_cond"
    loop.attr["body"].func.name = "loop_body"
    loop.attr["T"].list.type.extend([INT32, FLOAT, INT32, FLOAT])
    graph_def = graph_pb2.GraphDef(
        node=[placeholder("x"), const("start", np.int32(start)), limit_node, loop, node("out", "Identity", "loop:1", T=FLOAT)]
    )
    graph_def.library.function.extend([cond, body])
    return graph_def


# --- the TF1 frame form ----------------------------------------------------------------------


def frame_loop(start: int, limit_node: node_def_pb2.NodeDef, frame: str = "loop") -> list[node_def_pb2.NodeDef]:
    """The same loop as :func:`functional_loop` in TensorFlow's dataflow form (frame ``frame``),
    file order shuffled as TensorFlow writes it (NextIteration before its producer)."""
    f = frame
    return [
        const(f"{f}/start", np.int32(start)),
        limit_node,
        node(f"{f}/enter_i", "Enter", f"{f}/start", frame_name=f, T=INT32),
        node(f"{f}/enter_acc", "Enter", "x", frame_name=f, T=FLOAT),
        node(f"{f}/enter_n", "Enter", limit_node.name, frame_name=f, is_constant=True, T=INT32),
        node(f"{f}/enter_x", "Enter", "x", frame_name=f, is_constant=True, T=FLOAT),
        node(f"{f}/next_i", "NextIteration", f"{f}/body/add_i", T=INT32),
        node(f"{f}/merge_i", "Merge", f"{f}/enter_i", f"{f}/next_i", T=INT32),
        node(f"{f}/merge_acc", "Merge", f"{f}/enter_acc", f"{f}/next_acc", T=FLOAT),
        node(f"{f}/cond/less", "Less", f"{f}/merge_i", f"{f}/enter_n", T=INT32),
        node(f"{f}/loop_cond", "LoopCond", f"{f}/cond/less"),
        node(f"{f}/switch_i", "Switch", f"{f}/merge_i", f"{f}/loop_cond", T=INT32),
        node(f"{f}/switch_acc", "Switch", f"{f}/merge_acc", f"{f}/loop_cond", T=FLOAT),
        node(f"{f}/body/pivot", "Identity", f"{f}/switch_i:1", T=INT32),
        const(f"{f}/body/one", np.int32(1), f"^{f}/body/pivot"),
        node(f"{f}/body/add_i", "AddV2", f"{f}/body/pivot", f"{f}/body/one", T=INT32),
        const(f"{f}/body/half", HALF, f"^{f}/body/pivot"),
        node(f"{f}/body/scaled", "Mul", f"{f}/switch_acc:1", f"{f}/body/half", T=FLOAT),
        node(f"{f}/body/square", "Mul", f"{f}/enter_x", f"{f}/enter_x", T=FLOAT),
        node(f"{f}/body/add_acc", "AddV2", f"{f}/body/scaled", f"{f}/body/square", T=FLOAT),
        node(f"{f}/next_acc", "NextIteration", f"{f}/body/add_acc", T=FLOAT),
        node(f"{f}/exit_i", "Exit", f"{f}/switch_i", T=INT32),
        node(f"{f}/exit_acc", "Exit", f"{f}/switch_acc", T=FLOAT),
        node(f"{f}/done", "NoOp", f"^{f}/exit_i", f"^{f}/exit_acc"),
    ]


def frame_graph(start: int, limit_node: node_def_pb2.NodeDef) -> graph_pb2.GraphDef:
    return graph_pb2.GraphDef(
        node=[
            placeholder("x"),
            *frame_loop(start, limit_node),
            placeholder("unused_control_flow_input_3", FLOAT, ()),
            node("out", "Identity", "loop/exit_acc", "^loop/done", T=FLOAT),
        ]
    )


def build(form: str, start: int, limit: int) -> graph_pb2.GraphDef:
    limit_node = const("limit", np.int32(limit))
    return functional_loop(start, limit_node) if form == "functional" else frame_graph(start, limit_node)


FORMS = ["functional", "frame"]
X = np.array([[1.0, -2.0, 3.0, 0.25]], dtype=np.float32)


@pytest.mark.parametrize("form", FORMS)
def test_a_loop_becomes_one_readable_copy_of_its_body_per_iteration(form) -> None:
    graph = graph_from_graphdef(build(form, 0, 3), outputs=["out"])
    ops = {item.op for item in graph.nodes.values()}
    assert not ops & {"While", "Enter", "Merge", "Switch", "NextIteration", "Exit", "LoopCond"}, ops
    names = set(graph.nodes)
    for iteration in range(3):
        assert any(name.startswith(f"loop/iteration_{iteration}/") for name in names), sorted(names)
    assert not any("iteration_3" in name for name in names)
    scaled = "loop/iteration_2/scaled" if form == "functional" else "loop/iteration_2/body/scaled"
    assert scaled in names, sorted(names)
    assert [n for n in names if "unused_control_flow_input" in n] == []
    assert [n.name for n in graph.nodes.values() if n.op == "Placeholder"] == ["x"]
    np.testing.assert_allclose(evaluate(graph, {"x": X})["out:0"], expected_accumulator(X, 0, 3)[0], rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(form=st.sampled_from(FORMS), start=st.integers(-3, 4), limit=st.integers(-2, 7))
def test_the_trip_count_is_evaluated_and_the_unrolled_loop_computes_the_loop(form, start, limit) -> None:
    graph = graph_from_graphdef(build(form, start, limit), outputs=["out"])
    expected, trips = expected_accumulator(X, start, limit)
    iterations = {name.split("/")[1] for name in graph.nodes if name.startswith("loop/iteration_")}
    assert iterations == {f"iteration_{k}" for k in range(trips)}
    np.testing.assert_allclose(evaluate(graph, {"x": X})["out:0"], expected, rtol=1e-6)


def test_a_graph_without_loops_or_lists_is_returned_as_it_is() -> None:
    graph_def = graph_pb2.GraphDef(node=[placeholder("x"), node("y", "Relu", "x", T=FLOAT)])
    assert unroll_while_loops(graph_def) is graph_def
    assert resolve_tensor_lists(graph_def) is graph_def


@pytest.mark.parametrize("form", FORMS)
def test_a_trip_count_known_only_at_run_time_names_the_loop_and_the_tensor(form) -> None:
    graph_def = (
        functional_loop(0, placeholder("limit", INT32, ()))
        if form == "functional"
        else frame_graph(0, placeholder("limit", INT32, ()))
    )
    kind = "While node 'loop'" if form == "functional" else "while loop frame 'loop'"
    with pytest.raises(
        GraphError, match=rf"{kind} in 'model.pb': its trip count is not known at compile time.*'limit' \(Placeholder\)"
    ):
        graph_from_graphdef(graph_def, source="model.pb")


@pytest.mark.parametrize("form", FORMS)
def test_a_loop_longer_than_the_limit_is_refused(form, monkeypatch) -> None:
    monkeypatch.setattr(while_loops_module, "MAX_ITERATIONS", 4)
    graph_from_graphdef(build(form, 0, 4), outputs=["out"])
    with pytest.raises(GraphError, match="runs more than 4 iterations"):
        graph_from_graphdef(build(form, 0, 5), outputs=["out"])


def test_a_nested_frame_is_a_clean_error() -> None:
    outer = frame_loop(0, const("limit", np.int32(2)), frame="outer")
    inner = frame_loop(0, const("inner_limit", np.int32(2)), frame="inner")
    for item in inner:  # the inner loop runs in the outer body, from the outer accumulator
        if item.op == "Enter" and item.input[0] == "x":
            item.input[0] = "outer/switch_acc:1"
        if item.op == "Const" and not item.input:
            item.input.append("^outer/body/pivot")
    graph_def = graph_pb2.GraphDef(node=[placeholder("x"), *outer, *inner, node("out", "Identity", "outer/exit_acc", T=FLOAT)])
    with pytest.raises(GraphError, match="while loop frame 'inner'.*nested inside while loop frame 'outer'"):
        graph_from_graphdef(graph_def)


def test_a_frame_that_cannot_be_rebuilt_names_the_frame_and_the_node() -> None:
    graph_def = frame_graph(0, const("limit", np.int32(2)))
    for item in graph_def.node:
        if item.name == "loop/merge_acc":
            item.input[1] = "loop/enter_acc"  # no NextIteration
    with pytest.raises(
        GraphError, match="while loop frame 'loop'.*Merge node 'loop/merge_acc'.*NextIteration.*functionalize_while"
    ):
        graph_from_graphdef(graph_def)


def test_a_cycle_that_is_no_loop_is_named_without_export_advice() -> None:
    graph_def = graph_pb2.GraphDef(
        node=[
            placeholder("x"),
            node("a", "AddV2", "x", "b", T=FLOAT),
            node("b", "Relu", "a", T=FLOAT),
            node("out", "Identity", "b", T=FLOAT),
        ]
    )
    with pytest.raises(GraphError) as error:
        graph_from_graphdef(graph_def, source="model.pb")
    message = str(error.value)
    assert "'a' -> 'b' -> 'a'" in message or "'b' -> 'a' -> 'b'" in message
    assert "no while loop" in message and "tf.function" not in message


def test_a_leftover_next_iteration_cycle_says_which_loop_node_it_runs_through() -> None:
    graph_def = graph_pb2.GraphDef(
        node=[
            placeholder("x"),
            node("m", "Merge", "x", "n", T=FLOAT),
            node("n", "NextIteration", "m", T=FLOAT),
            node("out", "Identity", "m", T=FLOAT),
        ]
    )
    with pytest.raises(GraphError, match="NextIteration node 'n'.*could not be rebuilt"):
        graph_from_graphdef(graph_def, source="model.pb")


# --- TensorList ops ----------------------------------------------------------------------------


def list_node(name: str, op: str, *inputs: str) -> node_def_pb2.NodeDef:
    return node(name, op, *inputs, element_dtype=FLOAT)


def list_graph(*extra: node_def_pb2.NodeDef, index: str = "one") -> graph_pb2.GraphDef:
    """``x: [3, 4]`` split into a list, item ``index`` read; a reserved list of 2 items set to
    ``item`` and ``x`` row 0, stacked."""
    return graph_pb2.GraphDef(
        node=[
            placeholder("x", FLOAT, (3, 4)),
            const("shape", np.array([4], dtype=np.int32)),
            const("zero", np.int32(0)),
            const("one", np.int32(1)),
            const("two", np.int32(2)),
            list_node("split", "TensorListFromTensor", "x", "shape"),
            list_node("item", "TensorListGetItem", "split", index, "shape"),
            list_node("first", "TensorListGetItem", "split", "zero", "shape"),
            list_node("reserved", "TensorListReserve", "shape", "two"),
            list_node("set_1", "TensorListSetItem", "reserved", "one", "item"),
            node("handle", "Identity", "set_1", T=types_pb2.DT_VARIANT),
            list_node("set_0", "TensorListSetItem", "handle", "zero", "first"),
            list_node("stacked", "TensorListStack", "set_0", "shape"),
            list_node("whole", "TensorListStack", "split", "shape"),
            node("length", "TensorListLength", "set_0"),
            *extra,
        ]
    )


def test_list_ops_become_slices_identities_and_a_pack() -> None:
    graph = graph_from_graphdef(list_graph(), outputs=["item", "stacked", "whole", "length"])
    ops = {name: item.op for name, item in graph.nodes.items()}
    assert (ops["item"], ops["stacked"], ops["whole"], ops["length"]) == ("StridedSlice", "Pack", "Identity", "Const")
    assert not any(op.startswith("TensorList") for op in ops.values())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = evaluate(graph, {"x": x})
    np.testing.assert_array_equal(got["item:0"], x[1])
    np.testing.assert_array_equal(got["stacked:0"], np.stack([x[0], x[1]]))
    np.testing.assert_array_equal(got["whole:0"], x)
    assert int(got["length:0"]) == 2


@pytest.mark.parametrize(
    "extra,index,outputs,words",
    [
        (
            (placeholder("i", INT32, ()),),
            "i",
            ["item"],
            r"node 'item' \(TensorListGetItem\).*index \('i'\) is not a compile-time integer.*'i' \(Placeholder\)",
        ),
        (
            (list_node("unset", "TensorListStack", "reserved", "shape"),),
            "one",
            ["unset"],
            r"node 'unset'.*items \[0, 1\] are never set",
        ),
        ((node("bad", "Relu", "split", T=FLOAT),), "one", ["bad"], r"node 'bad' \(Relu\).*reads the list 'split'"),
        (
            (
                list_node("far", "TensorListSetItem", "reserved", "two", "item"),
                list_node("read", "TensorListStack", "far", "shape"),
            ),
            "one",
            ["read"],
            r"node 'far'.*sets item 2 of a list of 2 items",
        ),
    ],
)
def test_list_ops_that_cannot_be_resolved_are_graph_errors_naming_the_node(extra, index, outputs, words) -> None:
    with pytest.raises(GraphError, match=words):
        graph_from_graphdef(list_graph(*extra, index=index), outputs=outputs)


# --- the integer evaluator -----------------------------------------------------------------


def _attributes(op: str) -> dict:
    if op == "Cast":
        return {"SrcT": "int32", "DstT": "int64"}
    if op in ("Max", "Min", "Sum", "Prod"):
        return {"keep_dims": False, "T": "int32", "Tidx": "int32"}
    return {"T": "int32"}


def _evaluate_static(op: str, inputs: list[np.ndarray]) -> np.ndarray | None:
    nodes = [const(f"in{k}", value) for k, value in enumerate(inputs)]
    item = node("op", op, *(f"in{k}" for k in range(len(inputs))))
    for key, value in _attributes(op).items():
        if isinstance(value, bool):
            item.attr[key].b = value
        else:
            item.attr[key].type = {"int32": INT32, "int64": types_pb2.DT_INT64}[value]
    return StaticValues([*nodes, item]).value("op:0")


@pytest.mark.parametrize("op", sorted(STATIC_OPS.keys() - {"Range"}))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_static_ops_agree_with_the_op_tables_references(op, data) -> None:
    """The frontend sits below the op table, so its integer ops carry their own numpy forms:
    each must compute what the op table's reference computes."""
    definition = lookup(op)
    assert definition is not None, op
    shape = data.draw(st.sampled_from([(), (3,), (2, 3)]))
    values = st.integers(-20, 20) if op not in ("FloorDiv", "FloorMod") else st.integers(1, 9)
    first = np.asarray(
        data.draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))), dtype=np.int32
    ).reshape(shape)
    if op in ("LogicalAnd", "LogicalOr", "LogicalNot"):
        first = first > 0
    arity = definition.arity.fewest
    inputs = [first]
    if op in ("Max", "Min", "Sum", "Prod"):
        inputs.append(np.arange(len(shape), dtype=np.int32))
    elif arity == 2:
        second = np.asarray(
            data.draw(st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))), dtype=np.int32
        ).reshape(shape)
        inputs.append(second > 0 if first.dtype == bool else second)
    got = _evaluate_static(op, inputs)  # (bool constants are written as int32 0/1)
    reference_node = Node("op", op, tuple(f"in{k}:0" for k in range(len(inputs))), attrs=_attributes(op))
    (expected,) = definition.reference(reference_node, inputs)
    assert got is not None
    np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype))


def test_the_evaluator_follows_long_counter_chains_and_leaves_floats_unknown() -> None:
    nodes = [const("c0", np.int32(0)), const("one", np.int32(1))]
    nodes += [node(f"c{k + 1}", "AddV2", f"c{k}", "one", T=INT32) for k in range(3000)]
    nodes += [
        const("f", np.float32(1.0)),
        node("g", "Identity", "f", T=FLOAT),
        placeholder("p", INT32, ()),
        node("q", "AddV2", "p", "one", T=INT32),
    ]
    nodes += [const("start", np.int32(1)), const("limit", np.int32(9)), const("delta", np.int32(3))]
    nodes += [node("range", "Range", "start", "limit", "delta", Tidx=INT32), node("top", "Max", "c3000", "empty", T=INT32)]
    nodes += [node("empty", "Range", "c0", "c0", "one", Tidx=INT32)]  # Keras' max_iterations: Max over no axis
    values = StaticValues(nodes)
    assert int(values.value("c3000:0")) == 3000
    expected = lookup("Range").reference(
        Node("range", "Range", ("s:0", "l:0", "d:0"), attrs={"Tidx": "int32"}), [np.int32(1), np.int32(9), np.int32(3)]
    )
    np.testing.assert_array_equal(values.value("range:0"), expected[0])
    assert int(values.value("top:0")) == 3000
    assert values.value("g:0") is None
    assert values.value("q:0") is None
    assert values.unknown_sources("q:0") == [("p", "Placeholder")]


# --- TensorFlow's own loops ----------------------------------------------------------------


@pytest.mark.tensorflow
@pytest.mark.parametrize("lower_control_flow", [True, False])
def test_tensorflow_while_loops_with_tensor_arrays_match_tensorflow(lower_control_flow, tmp_path) -> None:
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo import freeze_to_graphdef, run_graphdef_with_tensorflow

    weights = tf.constant(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32) / 2)

    def model(x):  # x: [6, 1, 4], a sequence of 6 rows
        steps = tf.TensorArray(tf.float32, size=6).unstack(x)
        outputs = tf.TensorArray(tf.float32, size=6)

        def body(t, h, outputs):
            h = tf.tanh(tf.matmul(steps.read(t) + h, weights))
            return t + 1, h, outputs.write(t, h)

        _, h, outputs = tf.while_loop(lambda t, h, outputs: t < 6, body, (tf.constant(0), tf.zeros((1, 4)), outputs))
        return h, outputs.stack()

    graph_def = freeze_to_graphdef(model, [("input", (6, 1, 4))], lower_control_flow=lower_control_flow)
    ops = {item.op for item in graph_def.node}
    assert ("Enter" in ops) == lower_control_flow and ("While" in ops or "StatelessWhile" in ops) != lower_control_flow, ops
    path = tmp_path / "loop.pb"
    path.write_bytes(graph_def.SerializeToString())
    x = np.random.default_rng(1).standard_normal((6, 1, 4)).astype(np.float32)
    got = polytf.load(path, fallback=False, cache_dir=tmp_path / "cache")(input=x)
    reference = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity", "Identity_1"])
    for name in ("Identity", "Identity_1"):
        scale = float(np.max(np.abs(reference[name])))
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-4, atol=1e-5 * scale + 1e-6, err_msg=name)


@pytest.mark.tensorflow
def test_nested_loops_unroll_in_the_functional_form_and_are_a_clean_error_in_the_frame_form(tmp_path) -> None:
    tf = pytest.importorskip("tensorflow")
    from polytf.model_zoo import freeze_to_graphdef, run_graphdef_with_tensorflow

    def model(x):  # x: [1, 4]
        def outer(i, acc):
            _, inner_acc = tf.while_loop(lambda j, a: j < 3, lambda j, a: (j + 1, tf.tanh(a * 0.5 + x)), (tf.constant(0), acc))
            return i + 1, inner_acc + 1.0

        return tf.while_loop(lambda i, acc: i < 2, outer, (tf.constant(0), x))[1]

    functional = freeze_to_graphdef(model, [("input", (1, 4))], lower_control_flow=False)
    graph = graph_from_graphdef(functional, outputs=["Identity"])
    iterations = {
        tuple(part.split("/")[0] for part in name.split("/iteration_")[1:]) for name in graph.nodes if "/iteration_" in name
    }
    assert {(o, i) for o in "01" for i in "012"} <= iterations, sorted(graph.nodes)
    assert "while/iteration_1/while/iteration_2/Tanh" in graph.nodes, sorted(graph.nodes)
    path = tmp_path / "nested.pb"
    path.write_bytes(functional.SerializeToString())
    reference = run_graphdef_with_tensorflow(path, {"input": X}, ["Identity"])["Identity"]
    np.testing.assert_allclose(evaluate(graph, {"input": X})["Identity:0"], reference, rtol=1e-5, atol=1e-6)
    lowered = freeze_to_graphdef(model, [("input", (1, 4))])
    with pytest.raises(GraphError, match="is nested inside while loop frame"):
        graph_from_graphdef(lowered)


@pytest.mark.parametrize("form", FORMS)
def test_a_loop_that_never_ends_is_refused_at_once(form) -> None:
    graph_def = build(form, 0, 3)
    nodes = graph_def.library.function[1].node_def if form == "functional" else graph_def.node
    for item in nodes:  # i + 0: the counter never moves
        if item.name in ("one", "loop/body/one"):
            item.attr["value"].tensor.tensor_content = np.int32(0).tobytes()
    with pytest.raises(GraphError, match="never ends: before iteration 1 its loop variables"):
        graph_from_graphdef(graph_def, outputs=["out"])


MUTATED_OPS = ["Identity", "Enter", "Merge", "Switch", "Exit", "NextIteration", "LoopCond", "TensorListGetItem", "NoOp", "While"]


@settings(max_examples=80, deadline=None)
@given(form=st.sampled_from(FORMS), data=st.data())
def test_broken_loops_are_graph_errors_never_crashes(form, data) -> None:
    """Random damage to a loop (an input dropped or rewired, an op or a frame name changed,
    an invariant made a variable) gives a graph or a GraphError, never another exception."""
    graph_def = build(form, 0, 3)
    nodes = list(graph_def.node) + [item for function in graph_def.library.function for item in function.node_def]
    names = [item.name for item in graph_def.node]
    for _ in range(data.draw(st.integers(1, 3))):
        item = data.draw(st.sampled_from(nodes))
        change = data.draw(st.sampled_from(["drop", "rewire", "op", "frame", "constant"]))
        if change == "drop" and item.input:
            del item.input[data.draw(st.integers(0, len(item.input) - 1))]
        elif change == "rewire" and item.input:
            item.input[data.draw(st.integers(0, len(item.input) - 1))] = data.draw(st.sampled_from(names)) + data.draw(
                st.sampled_from(["", ":1"])
            )
        elif change == "op":
            item.op = data.draw(st.sampled_from(MUTATED_OPS))
        elif change == "frame" and "frame_name" in item.attr:
            item.attr["frame_name"].s = b"other"
        elif change == "constant" and "is_constant" in item.attr:
            item.attr["is_constant"].b = not item.attr["is_constant"].b
    try:
        graph_from_graphdef(graph_def, outputs=["out"])
    except GraphError:
        pass


def test_a_loop_body_node_fed_by_itself_is_a_graph_error_not_a_walk_without_end() -> None:
    """Found by the test above in a CI run: the loop's pivot rewired to read itself (and the
    accumulator's Enter made a NoOp) sent the search for the trip count's static value round
    the one-node cycle until the process held 24 GB; a cycle of static ops is now unknown."""
    graph_def = build("frame", 0, 3)
    for item in graph_def.node:
        if item.name == "loop/body/pivot":
            item.input[0] = "loop/body/pivot"
        if item.name == "loop/enter_acc":
            item.op = "NoOp"
    with pytest.raises(GraphError, match="trip count is not known at compile time"):
        graph_from_graphdef(graph_def, outputs=["out"])


def test_an_enter_node_fed_by_itself_is_a_graph_error_naming_it() -> None:
    """Found by the test above: an Enter node whose input is rewired to itself is reached from
    no source of the graph; it was a KeyError deep in the frame reader."""
    graph_def = build("frame", 0, 3)
    (enter,) = [node for node in graph_def.node if node.name == "loop/enter_i"]
    enter.input[0] = "loop/enter_i"
    with pytest.raises(GraphError, match="Enter node 'loop/enter_i' .* reached from no input"):
        graph_from_graphdef(graph_def, outputs=["out"])


@pytest.mark.parametrize("form", FORMS)
def test_unrolling_stops_at_its_node_and_state_budgets(form, monkeypatch) -> None:
    """A loop whose copies or compile-time state outgrow the budgets is a GraphError at once,
    not minutes of unrolling (random damage once made a loop run 4096 iterations of large
    compile-time values, gigabytes held in its states)."""
    assert graph_from_graphdef(build(form, 0, 3), outputs=["out"]) is not None
    monkeypatch.setattr(while_loops_module, "MAX_STATIC_LOOP_BYTES", 4)  # one int32 counter: the second iteration is over
    with pytest.raises(GraphError, match="add up to more than"):
        graph_from_graphdef(build(form, 0, 3), outputs=["out"])
    monkeypatch.undo()
    monkeypatch.setattr(while_loops_module, "MAX_UNROLLED_NODES", len(build(form, 0, 3).node) + 2)
    with pytest.raises(GraphError, match="larger than"):
        graph_from_graphdef(build(form, 0, 3), outputs=["out"])
