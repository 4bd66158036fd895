"""``polytf ops``: the supported ops in README's words, and ``--model``: a table of how each op
of the model runs, what is left out and why, the errors on stderr naming their nodes, and
exit status 1 when the model cannot be compiled as it is."""

from __future__ import annotations

import pytest
from coverage_graphs import (
    write_constant_subgraph,
    write_no_code_ops,
    write_shape_error_in_the_middle,
    write_unsupported_in_the_middle,
)

from polytf.cli import main


def run_ops(capsys, *arguments):
    status = main(["ops", *map(str, arguments)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def row(out, op):
    """The first table line of ``op`` (the cells of that line; a long cell wraps onto the next)."""
    (line,) = [line for line in out.splitlines() if line.startswith(f"│ {op} ")]
    return [cell.strip() for cell in line.strip("│").split("│")]


def test_supported_ops_are_listed_as_readme_says(capsys):
    status, out, _ = run_ops(capsys)
    assert status == 0
    assert row(out, "Const")[3] == row(out, "Placeholder")[3] == "input / constant"
    assert row(out, "Identity")[3] == row(out, "NoOp")[3] == "no code (view)"
    assert row(out, "Conv2D")[3] == "compiled" and row(out, "TopKV2")[3] == "host (numpy reference)"


def test_one_unsupported_op(tmp_path, capsys):
    status, out, err = run_ops(capsys, "--model", write_unsupported_in_the_middle(tmp_path / "model.pb"))
    assert status == 1
    assert row(out, "Conv2D")[:3] == ["Conv2D", "1", "1 compiled"] and row(out, "Relu")[2] == "1 compiled"
    assert row(out, "Placeholder")[2:] == ["1 no code", "input / constant"] and row(out, "Reshape")[2:] == ["1 no code", "view"]
    assert row(out, "Erfinv")[2:] == ["1 unsupported", "polytf does not support this op"]
    assert row(out, "MatMul")[2] == "1 not reached" and "'u' (Erfinv)" in row(out, "MatMul")[3]
    assert "10 nodes in the file: 1 unsupported, 2 not reached, 2 compiled, 5 no code" in out
    assert "error: 1 node(s) use ops polytf does not support (Erfinv)" in err and "node 'u' (op Erfinv)" in err
    assert "--input u:D0,D1,..." in err

    status, out, _ = run_ops(capsys, "--model", tmp_path / "model.pb", "--input", "u:1,256")
    assert status == 1 and row(out, "MatMul")[2] == "1 compiled" and row(out, "Erfinv")[2] == "1 unsupported"


def test_a_shape_error_prints_the_table_of_the_reached_ops_and_names_the_node(tmp_path, capsys):
    status, out, err = run_ops(capsys, "--model", write_shape_error_in_the_middle(tmp_path / "model.pb"))
    assert status == 1
    assert row(out, "Relu")[2] == row(out, "Tanh")[2] == "1 compiled" and row(out, "Exp")[2] == "1 not reached"
    assert row(out, "MatMul")[2] == "1 unsupported" and "'bad' (MatMul)" in row(out, "MatMul")[3]
    assert (
        "error: while inferring shapes of node 'bad' (MatMul): MatMul inner dimensions differ: float32[2, 3] x float32[4, 5]"
        in err
    )


def test_a_constant_subgraph_is_rewritten_by_constant_folding(tmp_path, capsys):
    status, out, err = run_ops(capsys, "--model", write_constant_subgraph(tmp_path / "model.pb"))
    assert status == 0 and err == ""
    assert row(out, "Mul")[:3] == ["Mul", "1", "1 rewritten (constant folding)"]
    assert row(out, "Const")[:3] == ["Const", "2 + 1 made by constant folding", "3 no code"]
    assert row(out, "AddV2")[2] == "1 compiled"


def test_placeholders_constants_identities_and_noops_are_no_code(tmp_path, capsys):
    status, out, _ = run_ops(capsys, "--model", write_no_code_ops(tmp_path / "model.pb"))
    assert status == 0
    assert [row(out, op)[2] for op in ("Placeholder", "Const", "Identity", "NoOp")] == [
        "1 no code",
        "1 no code",
        "2 no code",
        "1 no code",
    ]
    assert row(out, "AddV2")[2] == "1 compiled" and "compiled" not in " ".join(row(out, "Identity"))


def test_an_unreadable_model_is_an_error_without_a_table(tmp_path, capsys):
    (tmp_path / "model.pb").write_bytes(b"\xff not a graph")
    with pytest.raises(SystemExit) as exited:
        main(["ops", "--model", str(tmp_path / "model.pb")])
    assert str(exited.value).startswith("error: ") and "model.pb" in str(exited.value)
    assert "ops of" not in capsys.readouterr().out
