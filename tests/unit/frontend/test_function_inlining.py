"""Function calls (PartitionedCall, StatefulPartitionedCall, a call by the function's name)
inlined by the frontend: names, ports, nested calls, control inputs, attribute placeholders,
errors; random libraries against their numpy meaning; and TensorFlow models whose frozen
graphs keep calls, against TensorFlow running the same GraphDef."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, types_pb2

from polytf.errors import GraphError
from polytf.frontend import FunctionLibrary, graph_from_graphdef, inline_function_calls
from polytf.frontend.output_arguments import OUTPUT_ARGUMENTS
from polytf.graph import Graph
from polytf.ops import lookup

FLOAT = types_pb2.DT_FLOAT
T_FLOAT = {"T": attr_value_pb2.AttrValue(type=FLOAT)}


def node(name: str, op: str, *inputs: str, **attrs: attr_value_pb2.AttrValue) -> node_def_pb2.NodeDef:
    result = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for key, value in attrs.items():
        result.attr[key].CopyFrom(value)
    return result


def const(name: str, value) -> node_def_pb2.NodeDef:
    array = np.asarray(value)
    dtype = FLOAT if array.dtype == np.float32 else types_pb2.DT_INT32
    result = node(name, "Const", dtype=attr_value_pb2.AttrValue(type=dtype))
    tensor = result.attr["value"].tensor
    tensor.dtype = dtype
    for size in array.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = array.tobytes()
    return result


def placeholder(name: str) -> node_def_pb2.NodeDef:
    return node(name, "Placeholder", dtype=attr_value_pb2.AttrValue(type=FLOAT))


def call(
    name: str, function: str, *inputs: str, outputs: int = 1, op: str = "StatefulPartitionedCall", **func_attrs
) -> node_def_pb2.NodeDef:
    """A call node; ``op`` is a call op, or ``""`` for a call by the function's name."""
    if not op:
        return node(name, function, *inputs, **func_attrs)
    result = node(name, op, *inputs)
    result.attr["f"].func.name = function
    for key, value in func_attrs.items():
        result.attr["f"].func.attr[key].CopyFrom(value)
    result.attr["Tin"].list.type.extend([FLOAT] * sum(not i.startswith("^") for i in inputs))
    result.attr["Tout"].list.type.extend([FLOAT] * outputs)
    return result


def function(
    name: str,
    arguments: Sequence[str],
    returns: dict[str, str],
    nodes: Sequence[node_def_pb2.NodeDef],
    control_ret: dict[str, str] | None = None,
) -> function_pb2.FunctionDef:
    result = function_pb2.FunctionDef(node_def=list(nodes))
    result.signature.name = name
    for argument in arguments:
        result.signature.input_arg.add(name=argument, type=FLOAT)
    for output, tensor in returns.items():
        result.signature.output_arg.add(name=output, type=FLOAT)
        result.ret[output] = tensor
    for output, target in (control_ret or {}).items():
        result.signature.control_output.append(output)
        result.control_ret[output] = target
    return result


def graphdef(nodes: Sequence[node_def_pb2.NodeDef], functions: Sequence[function_pb2.FunctionDef]) -> graph_pb2.GraphDef:
    result = graph_pb2.GraphDef(node=list(nodes))
    result.library.function.extend(functions)
    return result


def evaluate(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's outputs, node by node with the op table's numpy references."""
    values: dict[str, np.ndarray] = {}
    for item in graph.nodes.values():
        if item.op == "Placeholder":
            values[item.output(0)] = np.asarray(feeds[item.name], dtype=np.float32)
            continue
        results = lookup(item.op).reference(item, [values[t] for t in item.inputs])
        for port, result in enumerate(results):
            values[item.output(port)] = np.asarray(result)
    return {tensor: values[tensor] for tensor in graph.outputs}


def by_name(graph_def: graph_pb2.GraphDef) -> dict[str, node_def_pb2.NodeDef]:
    return {item.name: item for item in graph_def.node}


X = np.array([[1.0, -2.0, 3.0, -4.0]], dtype=np.float32)
W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5

#: dense(x, w) = Relu(MatMul(x, w)), as tf.function writes it
DENSE = function(
    "dense",
    ["x", "w"],
    {"y": "Relu:activations:0"},
    [node("MatMul", "MatMul", "x", "w", **T_FLOAT), node("Relu", "Relu", "MatMul:product:0", **T_FLOAT)],
)
#: halves(v) = (v[:, 2:] + 1, v[:, :2] * b): Split's second output first, a Const inside
HALVES = function(
    "halves",
    ["v"],
    {"upper": "add:z:0", "lower": "mul:z:0"},
    [
        const("axis", np.int32(1)),
        const("b", np.float32(3.0)),
        node("split", "Split", "axis:output:0", "v", num_split=attr_value_pb2.AttrValue(i=2), **T_FLOAT),
        const("one", np.float32(1.0)),
        node("add", "AddV2", "split:output:1", "one:output:0", **T_FLOAT),
        node("mul", "Mul", "split:output:0", "b:output:0", **T_FLOAT),
    ],
)


def test_a_call_becomes_its_body_with_readable_names() -> None:
    graph_def = graphdef(
        [
            placeholder("x"),
            const("w", W),
            call("model/dense/StatefulPartitionedCall", "dense", "x", "w"),
            node("out", "Identity", "model/dense/StatefulPartitionedCall", **T_FLOAT),
        ],
        [DENSE],
    )
    graph = graph_from_graphdef(graph_def, outputs=["out"])
    assert [n.op for n in graph.nodes.values()] == ["Placeholder", "Const", "MatMul", "Relu", "Identity", "Identity"]
    assert graph.nodes["model/dense/StatefulPartitionedCall/MatMul"].inputs == ("x:0", "w:0")
    assert graph.nodes["model/dense/StatefulPartitionedCall"].inputs == ("model/dense/StatefulPartitionedCall/Relu:0",)
    assert graph.nodes["model/dense/StatefulPartitionedCall"].attrs["T"] == "float32"
    np.testing.assert_allclose(evaluate(graph, {"x": X})["out:0"], np.maximum(X @ W, 0), rtol=1e-6)


def test_the_graph_without_calls_is_returned_as_it_is() -> None:
    graph_def = graphdef([placeholder("x"), node("r", "Relu", "x", **T_FLOAT)], [DENSE])
    assert inline_function_calls(graph_def) is graph_def


@pytest.mark.parametrize("op", ["PartitionedCall", "StatefulPartitionedCall", ""])
def test_a_function_of_several_outputs_keeps_every_port(op: str) -> None:
    graph_def = graphdef(
        [
            placeholder("x"),
            call("c", "halves", "x", outputs=2, op=op),
            node("first", "Identity", "c", **T_FLOAT),
            node("second", "Identity", "c:1", **T_FLOAT),
        ],
        [HALVES],
    )
    inlined = by_name(inline_function_calls(graph_def))
    assert inlined["c"].op == "IdentityN" and list(inlined["c"].input) == ["c/add:0", "c/mul:0"]
    assert list(inlined["c/add"].input) == ["c/split:1", "c/one:0"]
    values = evaluate(graph_from_graphdef(graph_def, outputs=["first", "second"]), {"x": X})
    np.testing.assert_allclose(values["first:0"], X[:, 2:] + 1)
    np.testing.assert_allclose(values["second:0"], X[:, :2] * 3)


def test_nested_calls_are_inlined_under_their_callers_names() -> None:
    # outer(x, w) = halves(dense(x, w)[:, :2]) by name, then dense again through a PartitionedCall
    outer = function(
        "outer",
        ["x", "w"],
        {"a": "second:output:0", "b": "halves_call:lower:0"},
        [
            call("dense_call", "dense", "x", "w", op="PartitionedCall"),
            const("begin", np.array([0, 0], np.int32)),
            const("size", np.array([1, 2], np.int32)),
            node(
                "slice",
                "Slice",
                "dense_call:output:0",
                "begin:output:0",
                "size:output:0",
                **T_FLOAT,
                Index=attr_value_pb2.AttrValue(type=types_pb2.DT_INT32),
            ),
            call("halves_call", "halves", "slice:output:0", op=""),
            node("square", "Square", "halves_call:upper:0", **T_FLOAT),
            const("w2", np.ones((1, 1), np.float32)),
            call("second", "dense", "square:y:0", "w2:output:0", op="PartitionedCall"),
        ],
    )
    graph_def = graphdef([placeholder("x"), const("w", W), call("c", "outer", "x", "w", outputs=2)], [DENSE, HALVES, outer])
    names = [n.name for n in inline_function_calls(graph_def).node]
    assert {"c/dense_call/MatMul", "c/halves_call/split", "c/second/Relu", "c/dense_call", "c/halves_call", "c"} <= set(names)
    assert not any(op in ("PartitionedCall", "StatefulPartitionedCall", "dense", "halves", "outer") for op in names)
    values = evaluate(graph_from_graphdef(graph_def, outputs=["c:0", "c:1"]), {"x": X})
    sliced = np.maximum(X @ W, 0)[:, :2]
    np.testing.assert_allclose(values["c:0"], np.maximum(np.square(sliced[:, 1:] + 1), 0), rtol=1e-6)
    np.testing.assert_allclose(values["c:1"], sliced[:, :1] * 3, rtol=1e-6)


def test_a_returned_argument_is_the_callers_tensor() -> None:
    swap = function("swap", ["p", "q"], {"first": "q", "second": "p:0"}, [])
    graph_def = graphdef([placeholder("x"), placeholder("y"), call("s", "swap", "x", "y:0", outputs=2)], [swap])
    assert list(by_name(inline_function_calls(graph_def))["s"].input) == ["y:0", "x:0"]


def test_control_inputs_reach_the_body_and_control_outputs_the_call() -> None:
    body = function(
        "ordered",
        ["x"],
        {"y": "r:y:0"},
        [
            const("c", np.float32(2.0)),
            node("m", "Mul", "x", "c:output:0", **T_FLOAT),
            node("log", "NoOp"),
            node("r", "Relu", "m:z:0", "^log", **T_FLOAT),
        ],
        control_ret={"logged": "log"},
    )
    graph_def = graphdef(
        [placeholder("x"), node("ctrl", "NoOp"), call("k", "ordered", "x", "^ctrl"), node("after", "NoOp", "^k")], [body]
    )
    inlined = by_name(inline_function_calls(graph_def))
    assert list(inlined["k/c"].input) == ["^ctrl"]  # no input: ordered after the call's controls
    assert list(inlined["k/m"].input) == ["x:0", "k/c:0", "^ctrl"]  # reads an argument
    assert list(inlined["k/log"].input) == ["^ctrl"]
    assert list(inlined["k/r"].input) == ["k/m:0", "^k/log"]  # reads only the body: ordered through it
    assert list(inlined["k"].input) == ["k/r:0", "^k/log", "^ctrl"]
    assert list(inlined["after"].input) == ["^k"]


def test_attribute_placeholders_take_the_calls_values() -> None:
    generic = function(
        "generic", ["x"], {"y": "r:activations:0"}, [node("r", "Relu", "x", T=attr_value_pb2.AttrValue(placeholder="dtype"))]
    )
    float_type = attr_value_pb2.AttrValue(type=FLOAT)
    for op, attrs in (("PartitionedCall", {"dtype": float_type}), ("", {"dtype": float_type})):
        graph_def = graphdef([placeholder("x"), call("g", "generic", "x", op=op, **attrs)], [generic])
        assert by_name(inline_function_calls(graph_def))["g/r"].attr["T"].type == FLOAT
    graph_def = graphdef([placeholder("x"), call("g", "generic", "x")], [generic])
    with pytest.raises(GraphError, match=r"attribute 'T' of node 'r' is the placeholder 'dtype'.*no value"):
        inline_function_calls(graph_def, "model.pb")


def test_while_nodes_stay_and_the_library_is_kept() -> None:
    loop = node("loop", "While", "x", cond=attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name="dense")))
    graph_def = graphdef([placeholder("x"), const("w", W), loop, call("c", "dense", "x", "w")], [DENSE])
    inlined = inline_function_calls(graph_def)
    assert by_name(inlined)["loop"] == loop
    assert "dense" in FunctionLibrary.from_graphdef(inlined, "model.pb")


def test_instantiate_gives_prefixed_nodes_and_returned_tensors() -> None:
    library = FunctionLibrary.from_graphdef(graphdef([], [DENSE, HALVES]), "model.pb")
    nodes, outputs = library.instantiate("halves", "loop/body/", ["state:1"], caller="loop")
    assert outputs == ["loop/body/add:0", "loop/body/mul:0"]
    assert {n.name: list(n.input) for n in nodes}["loop/body/split"] == ["loop/body/axis:0", "state:1"]
    assert [a.name for a in library.signature("dense", caller="loop").input_arg] == ["x", "w"]
    assert "dense" in library and "missing" not in library


@pytest.mark.parametrize(
    "functions, words",
    [
        (
            [
                function("f", ["x"], {"y": "g_call:output:0"}, [call("g_call", "g", "x")]),
                function("g", ["x"], {"y": "f_call:y:0"}, [call("f_call", "f", "x", op="")]),
            ],
            ["calls itself", "'f' -> 'g' -> 'f'", "node 'c/g_call/f_call'", "model.pb"],
        ),
        ([function("f", ["x"], {"y": "again:output:0"}, [call("again", "f", "x")])], ["calls itself", "'f' -> 'f'"]),
        ([function("other", ["x"], {"y": "x"}, [])], ["node 'c'", "function 'f'", "does not define", "'other'", "model.pb"]),
        ([function("f", ["x", "z"], {"y": "x"}, [])], ["called with 1 input", "takes 2 (x, z)"]),
        (
            [function("f", ["x"], {"y": "q:y:0"}, [node("r", "Relu", "x", **T_FLOAT)])],
            ["'q:y:0'", "function 'f'", "neither an argument (x)"],
        ),
        (
            [function("f", ["x"], {"y": "s:y:0"}, [node("s", "Split", "x", num_split=attr_value_pb2.AttrValue(i=2))])],
            ["'s:y:0'", "'y'", "does not have ('output')"],
        ),
        (
            [function("f", ["x"], {"y": "s:output:2"}, [node("s", "Split", "x", num_split=attr_value_pb2.AttrValue(i=2))])],
            ["'s:output:2'"],
        ),
        (
            [function("f", ["x"], {"y": "u:a:0", "z": "u:b:0"}, [node("u", "MyOp", "x")])],
            ["op MyOp", "'a' and 'b'", "order", "node 'u'"],
        ),
        ([function("f", ["x"], {"y": "r"}, [node("r", "Relu", "x")])], ["reads 'r'", "node's output 'node:output_arg:index'"]),
        ([function("f", ["x"], {}, [node("r", "Relu", "^nowhere")])], ["control input '^nowhere'"]),
    ],
    ids=[
        "indirect-recursion",
        "direct-recursion",
        "missing-function",
        "arity",
        "unknown-argument",
        "wrong-output-arg",
        "index-out-of-range",
        "unknown-op-two-arguments",
        "graphdef-style-name",
        "dangling-control",
    ],
)
def test_bad_calls_are_graph_errors_naming_what_is_wrong(functions, words) -> None:
    graph_def = graphdef([placeholder("x"), call("c", "f", "x")], functions)
    with pytest.raises(GraphError) as raised:
        graph_from_graphdef(graph_def, source="model.pb")
    for word in words:
        assert word in str(raised.value), str(raised.value)


def test_a_call_whose_scope_is_taken_gets_another_prefix() -> None:
    graph_def = graphdef(
        [placeholder("x"), const("w", W), call("c", "dense", "x", "w"), node("c/MatMul", "Relu", "x", **T_FLOAT)], [DENSE]
    )
    names = [n.name for n in inline_function_calls(graph_def).node]
    assert "c_inlined/MatMul" in names and names.count("c/MatMul") == 1


# --- random libraries: the inlined graph computes what the functions mean ---------------------


@dataclass
class RandomFunction:
    definition: function_pb2.FunctionDef
    arguments: int
    outputs: int
    meaning: Callable[[list[np.ndarray]], list[np.ndarray]]


CALL_STYLES = ["PartitionedCall", "StatefulPartitionedCall", ""]


def _random_function(draw, index: int, callees: list[RandomFunction]) -> RandomFunction:
    """Function ``fn<index>`` of 1-3 arguments [4]: steps of AddV2, Mul by a Const, Split + swapped
    ConcatV2, and calls of earlier functions (any call style); 1-3 outputs, arguments included."""
    arguments = draw(st.integers(1, 3))
    # a value: (FunctionDef reference, its meaning as a function of the arguments)
    values: list[tuple[str, Callable]] = [
        (draw(st.sampled_from([f"a{i}", f"a{i}:0"])), lambda a, i=i: a[i]) for i in range(arguments)
    ]
    nodes: list[node_def_pb2.NodeDef] = []
    pick = st.integers(0, 10**6)
    for step in range(draw(st.integers(1, 4))):
        kinds = ["add", "scale", "swap"] + (["call"] * 2 if callees else [])
        kind = draw(st.sampled_from(kinds))
        first, first_meaning = values[draw(pick) % len(values)]
        if kind == "add":
            second, second_meaning = values[draw(pick) % len(values)]
            nodes.append(node(f"add{step}", "AddV2", first, second, **T_FLOAT))
            values.append((f"add{step}:z:0", lambda a, f=first_meaning, g=second_meaning: f(a) + g(a)))
        elif kind == "scale":
            factor = np.float32(draw(st.sampled_from([0.5, -2.0, 3.0])))
            nodes += [const(f"k{step}", factor), node(f"mul{step}", "Mul", first, f"k{step}:output:0", **T_FLOAT)]
            values.append((f"mul{step}:z:0", lambda a, f=first_meaning, k=factor: f(a) * k))
        elif kind == "swap":
            nodes += [
                const(f"axis{step}", np.int32(0)),
                node(f"split{step}", "Split", f"axis{step}:output:0", first, num_split=attr_value_pb2.AttrValue(i=2), **T_FLOAT),
                node(
                    f"concat{step}",
                    "ConcatV2",
                    f"split{step}:output:1",
                    f"split{step}:output:0",
                    f"axis{step}:output:0",
                    N=attr_value_pb2.AttrValue(i=2),
                    **T_FLOAT,
                ),
            ]
            values.append((f"concat{step}:output:0", lambda a, f=first_meaning: np.concatenate([f(a)[2:], f(a)[:2]])))
        else:
            callee = callees[draw(pick) % len(callees)]
            chosen = [values[draw(pick) % len(values)] for _ in range(callee.arguments)]
            style = draw(st.sampled_from(CALL_STYLES))
            nodes.append(
                call(f"call{step}", callee.definition.signature.name, *(v[0] for v in chosen), outputs=callee.outputs, op=style)
            )
            for port in range(callee.outputs):
                reference = f"call{step}:output:{port}" if style else f"call{step}:out{port}:0"
                values.append(
                    (reference, lambda a, c=callee, ins=tuple(v[1] for v in chosen), p=port: c.meaning([m(a) for m in ins])[p])
                )
    returned = [values[draw(pick) % len(values)] for _ in range(draw(st.integers(1, 3)))]
    definition = function(
        f"fn{index}", [f"a{i}" for i in range(arguments)], {f"out{i}": r[0] for i, r in enumerate(returned)}, nodes
    )
    return RandomFunction(definition, arguments, len(returned), lambda a, ms=tuple(r[1] for r in returned): [m(a) for m in ms])


@st.composite
def random_programs(draw):
    functions: list[RandomFunction] = []
    for index in range(draw(st.integers(1, 4))):
        functions.append(_random_function(draw, index, functions))
    top = functions[-1]
    inputs = [f"x{draw(st.integers(0, 2))}" for _ in range(top.arguments)]
    controlled = draw(st.booleans())
    return functions, inputs, draw(st.sampled_from(CALL_STYLES)), controlled


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs())
def test_random_libraries_compute_what_their_functions_mean(program) -> None:
    functions, inputs, style, controlled = program
    top = functions[-1]
    feeds = {f"x{i}": np.random.default_rng(i).standard_normal(4).astype(np.float32) for i in range(3)}
    nodes = [placeholder(name) for name in feeds] + [node("ctrl", "NoOp")]
    nodes.append(
        call("call", top.definition.signature.name, *inputs, *(["^ctrl"] if controlled else []), outputs=top.outputs, op=style)
    )
    nodes += [node(f"y{i}", "Identity", f"call:{i}", **T_FLOAT) for i in range(top.outputs)]
    graph_def = graphdef(nodes, [f.definition for f in functions])

    inlined = inline_function_calls(graph_def)
    names = [n.name for n in inlined.node]
    assert len(names) == len(set(names))
    assert not {n.op for n in inlined.node} & {
        "PartitionedCall",
        "StatefulPartitionedCall",
        *(f.definition.signature.name for f in functions),
    }
    if controlled:  # the outer body's nodes without inputs or reading an argument wait for ^ctrl
        for item in inlined.node:
            outer_body = item.name.startswith("call/") and item.name.count("/") == 1
            if outer_body and (not item.input or any(i.split(":")[0] in feeds for i in item.input)):
                assert "^ctrl" in item.input, item
    graph = graph_from_graphdef(graph_def, outputs=[f"y{i}" for i in range(top.outputs)])
    values = evaluate(graph, feeds)
    expected = top.meaning([feeds[name] for name in inputs])
    for i, reference in enumerate(expected):
        np.testing.assert_allclose(values[f"y{i}:0"], reference, rtol=1e-6, atol=1e-6)


# --- TensorFlow: the op registry, and models whose frozen graphs keep calls -------------------


def _tensorflow_op_registry() -> dict:
    pytest.importorskip("tensorflow")
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    op_list = op_def_pb2.OpList()
    op_list.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    return {op.name: op for op in op_list.op}


@pytest.mark.tensorflow
def test_output_arguments_are_tensorflows_for_the_listed_and_the_supported_ops() -> None:
    from polytf.ops.table import supported_ops

    registry = _tensorflow_op_registry()
    for op, arguments in OUTPUT_ARGUMENTS.items():
        expected = [(a.name, a.number_attr, a.type_list_attr) for a in registry[op].output_arg]
        assert [(a.name, a.number_attr, a.type_list_attr) for a in arguments] == expected, op
    for op in (op for op in supported_ops() if op in registry):  # but polytf's own (GroupedConv2D)
        outputs = registry[op].output_arg
        if len(outputs) > 1 or any(a.number_attr or a.type_list_attr for a in outputs):
            assert op in OUTPUT_ARGUMENTS, f"{op} has several or list-valued outputs: list it in OUTPUT_ARGUMENTS"


def _compare_with_tensorflow(graph_def, path, feeds: dict[str, np.ndarray], outputs: list[str], cache_dir) -> None:
    import polytf
    from polytf.model_zoo import run_graphdef_with_tensorflow

    path.write_bytes(graph_def.SerializeToString())
    model = polytf.load(path, fallback=False, cache_dir=cache_dir)
    got = model(**feeds)
    reference = run_graphdef_with_tensorflow(path, feeds, outputs)
    for name in outputs:
        scale = float(np.max(np.abs(reference[name])))
        assert scale > 0
        np.testing.assert_allclose(got[name], reference[name], rtol=1e-4, atol=1e-5 * scale + 1e-6, err_msg=name)


@pytest.mark.tensorflow
def test_nested_tf_functions_kept_as_calls_match_tensorflow(tmp_path) -> None:
    tf = pytest.importorskip("tensorflow")
    from polytf.model_zoo import freeze_to_graphdef

    weights = tf.constant(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))

    @tf.function(jit_compile=True)
    def dense(x):
        return tf.nn.relu(tf.matmul(x, weights))

    @tf.function(experimental_attributes={"_noinline": True})
    def halves(x):
        low, high = tf.split(x, 2, axis=1)
        return high + 1.0, dense(tf.concat([low, high, low[:, :2]], axis=1)) * 2.0

    def model(x):
        y = dense(x)
        a, b = halves(y)
        return y, a + b[:, :3]

    graph_def = freeze_to_graphdef(model, [("input", (2, 8))])
    calls = [n for n in graph_def.node if n.op in ("PartitionedCall", "StatefulPartitionedCall")]
    assert len(calls) == 2 and len(graph_def.library.function) >= 2, [n.op for n in graph_def.node]
    nested = [n for f in graph_def.library.function for n in f.node_def if n.op == "PartitionedCall"]
    assert nested, "halves' body should call dense"
    feeds = {"input": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)}
    _compare_with_tensorflow(graph_def, tmp_path / "nested.pb", feeds, ["Identity", "Identity_1"], tmp_path / "cache")


@pytest.mark.tensorflow
def test_keras_grouped_convolutions_match_tensorflow(tmp_path) -> None:
    """Keras 3 writes Conv2D(groups > 1) as a StatefulPartitionedCall of an _XlaMustCompile function."""
    pytest.importorskip("tensorflow")
    import keras

    from polytf.model_zoo import freeze_to_graphdef
    from polytf.model_zoo.keras_models import randomize_weights

    inputs = keras.Input((6, 6, 8), batch_size=1)
    hidden = keras.layers.Conv2D(8, 3, groups=4, padding="same", activation="relu")(inputs)
    model = randomize_weights(keras.Model(inputs, keras.layers.Conv2D(4, 1, groups=2)(hidden)))
    graph_def = freeze_to_graphdef(model, [("input", (1, 6, 6, 8))])
    calls = [n for n in graph_def.node if n.op == "StatefulPartitionedCall"]
    assert len(calls) == 2 and all(n.attr["_XlaMustCompile"].b for n in calls)
    feeds = {"input": np.random.default_rng(2).standard_normal((1, 6, 6, 8)).astype(np.float32)}
    _compare_with_tensorflow(graph_def, tmp_path / "grouped.pb", feeds, ["Identity"], tmp_path / "cache")
