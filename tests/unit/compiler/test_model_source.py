"""A ModelSource is checked once, when made: a bad path, shape or output is a clear error
naming it; the values it keeps are immutable and normalised (tuple shapes and outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from polytf.compiler.model_source import ModelSource
from polytf.errors import GraphError, PolytfError, ShapeError


def test_defaults_read_the_whole_graph_with_its_declared_shapes():
    source = ModelSource("model.pb")
    assert source.signature is None and dict(source.input_shapes) == {} and source.outputs is None
    assert source.output_names is None


def test_shapes_and_outputs_are_normalised_and_read_only():
    source = ModelSource(Path("m.pb"), input_shapes={"x": [1, 784], "y:0": (2,)}, outputs=["logits", "probs:0"])
    assert dict(source.input_shapes) == {"x": (1, 784), "y:0": (2,)}
    assert source.outputs == ("logits", "probs:0") and source.output_names == ["logits", "probs:0"]
    with pytest.raises(TypeError):
        source.input_shapes["x"] = (2, 784)
    assert ModelSource("m.pb", outputs="logits").outputs == ("logits",)  # one name, as load_graph takes it


def test_equal_sources_are_equal_and_hash_alike():
    first = ModelSource("m.pb", input_shapes={"a": [1], "b": [2]}, outputs=["o"])
    second = ModelSource("m.pb", input_shapes={"b": (2,), "a": (1,)}, outputs=("o",))
    assert first == second and hash(first) == hash(second) and len({first, second}) == 1
    assert first != ModelSource("m.pb", input_shapes={"a": [1], "b": [3]}, outputs=["o"])


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"x": [1, -1]}, "input shape for 'x': dimension -1 is negative"),
        ({"x": ["3a"]}, "input shape for 'x': '3a' is not a size or a size symbol"),
        ({"x": ["N=0..2"]}, "input shape for 'x': size symbol N: its range must start at 1"),
        ({"x": [None]}, "input shape for 'x': dimension None is neither a size nor a size symbol"),
        ({"x": "1,784"}, "input shape for 'x' must be a sequence of sizes (ints) and size symbols, got '1,784'"),
        ({"x": 3}, "input shape for 'x' must be a sequence of sizes (ints) and size symbols, got 3"),
        ([("x", [1])], "input shapes must map placeholder names to shapes"),
    ],
)
def test_a_bad_input_shape_is_a_shape_error_naming_it(shapes, message):
    """A size symbol's text (``"N"``, ``"N=1..64"``) is a dimension too; anything else is refused."""
    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ModelSource("m.pb", input_shapes=shapes)


def test_bad_paths_signatures_and_outputs_are_refused():
    with pytest.raises(PolytfError, match="model path must be a file or directory name, not 3"):
        ModelSource(3)
    with pytest.raises(PolytfError, match="model path"):
        ModelSource("")
    with pytest.raises(PolytfError, match="signature must be a name"):
        ModelSource("saved_model", signature=1)
    with pytest.raises(GraphError, match="no outputs requested for the graph in 'm.pb'"):
        ModelSource("m.pb", outputs=[])
    with pytest.raises(GraphError, match="output names must be node or tensor names, not 7"):
        ModelSource("m.pb", outputs=["a", 7])


def test_of_takes_a_path_with_its_facts_or_a_source_alone():
    source = ModelSource.of("m.pb", "serving_default", {"x": [4]}, ["y"])
    assert source == ModelSource("m.pb", "serving_default", {"x": (4,)}, ("y",))
    assert ModelSource.of(source) is source
    with pytest.raises(PolytfError, match="input_shapes, outputs given beside a ModelSource"):
        ModelSource.of(source, input_shapes={"x": [4]}, outputs=["y"])
