"""The import contracts of pyproject.toml hold, and would catch an import that breaks them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("importlinter")

from layering import REPOSITORY, check_contracts, import_cycles, import_graph, installed_view  # noqa: E402


@pytest.fixture()
def view(tmp_path: Path) -> Path:
    """The package's sources in their installed layout."""
    return installed_view(REPOSITORY, tmp_path / "view")


def test_the_import_contracts_hold(view):
    report = check_contracts(view)
    assert report.kept, report.output


def test_no_module_takes_part_in_an_import_circle(view):
    assert import_cycles(import_graph(view)) == []


def test_an_import_up_a_layer_breaks_the_layers_contract(view):
    """The graph IR, the lowest layer but the base modules, may not import the compiler driver."""
    graph_module = view / "polytf" / "graph" / "graph.py"
    graph_module.write_text(graph_module.read_text() + "\nimport polytf.compiler  # noqa: E402, F401 - deliberately inverted\n")
    report = check_contracts(view)
    assert not report.kept
    assert "polytf.graph.graph -> polytf.compiler" in report.output


def test_an_import_circle_breaks_the_acyclic_contract(view):
    """``ops.attributes`` is imported by every op module; importing one back closes a circle."""
    attributes = view / "polytf" / "ops" / "attributes.py"
    attributes.write_text(attributes.read_text() + "\nimport polytf.ops.conv  # noqa: E402, F401 - deliberately circular\n")
    report = check_contracts(view)
    assert not report.kept
    assert "polytf.ops" in report.output
    assert import_cycles(import_graph(view))
