"""``polytf show MODEL``: the model's kernels in execution order, and how many distinct
computations they are (identical kernels compile once)."""

from __future__ import annotations

from graphdef_builders import write_dense_block_graphdef

from polytf.cli import main
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import prepare_model


def test_show_counts_the_distinct_computations_among_the_kernels(tmp_path, capsys):
    """A DenseNet block: its 3x3 convolutions, writing windows of one concatenation, are one
    computation compiled once."""
    model = tmp_path / "dense.pb"
    write_dense_block_graphdef(model)
    kernels = prepare_model(ModelSource(model)).kernels
    distinct = len({kernel.scop.fingerprint() for kernel in kernels})
    assert distinct < len(kernels)
    assert main(["show", str(model)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{len(kernels)} kernels ({distinct} distinct: the others run the code of an identical one)" in out
    assert out.count("_grow") == 3  # every 3x3 convolution is listed, each under its own name
