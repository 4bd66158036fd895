"""``polytf show --passes MODEL``: node and edge counts per graph pass, and totals."""

from __future__ import annotations

import re

import pytest

from polytf.cli import main


def test_help_describes_passes(capsys):
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    text = capsys.readouterr().out
    assert "--passes" in text and "edge counts" in text


@pytest.mark.tensorflow
def test_show_passes_prints_counts_per_pass_and_totals(tmp_path, capsys):
    pytest.importorskip("tensorflow")
    from polytf.compiler.preparation import prepare_graph
    from polytf.frontend import load_graph
    from polytf.model_zoo import write_model

    path = write_model("cifar_cnn", tmp_path / "cifar_cnn.pb")
    raw = load_graph(path)
    raw_edges = sum(len(n.inputs) + len(n.control_inputs) for n in raw.nodes.values())
    optimized, reports = prepare_graph(path)

    assert main(["show", "--passes", str(path)]) == 0
    text = capsys.readouterr().out
    for name in ("prune", "identity removal", "constant folding", "arithmetic simplification", "batch norm folding", "common subexpression elimination"):
        assert name in text
    removed = len(raw.nodes) - len(optimized.nodes)
    assert f"total: {len(raw.nodes)} -> {len(optimized.nodes)} nodes ({removed} removed" in text
    assert f"{raw_edges} -> {sum(len(n.inputs) + len(n.control_inputs) for n in optimized.nodes.values())} edges" in text
    identity_row = next(line for line in text.splitlines() if "identity removal" in line and "│     1" in line)
    counts = [int(v) for v in re.findall(r"│\s+(\d+)\s+(?=│)", identity_row)][1:5]
    identity_report = next(r for r in reports if r.name == "identity removal")
    assert counts == [identity_report.nodes_before, identity_report.nodes_after, identity_report.edges_before, identity_report.edges_after]
    assert identity_report.nodes_after < identity_report.nodes_before == len(raw.nodes)
    assert len(optimized.nodes) < len(raw.nodes) * 0.6
