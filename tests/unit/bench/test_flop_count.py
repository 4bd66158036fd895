"""The one FLOP counter (contractions, 2 per multiply-add executed) and the models suite."""

from __future__ import annotations

import pytest
from hand_built_graphs import GRAPHS, kernels_of

from polytf.bench.suite import SUITES, contraction_flops, resolve_entries
from polytf.poly.flops import contraction_flops as scop_flops
from polytf.poly.flops import domain_points, is_contraction, statement_flops

MATMUL_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 6 } dim { size: 5 } } } } }
node { name: "b" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 5 } dim { size: 4 } } } } }
node { name: "mm" op: "MatMul" input: "a" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }
"""


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_domain_points_agree_with_isl(name):
    for kernel in kernels_of(GRAPHS[name]()):
        for statement in kernel.scop.statements:
            assert domain_points(statement) == statement.domain().count_val().to_python(), str(statement)


def test_matmul_counts_two_flops_per_multiply_add():
    (kernel,) = kernels_of(GRAPHS["matmul_bias_relu"]())  # x: [7, 13] @ w: [13, 11], + bias, relu
    contractions = [s for s in kernel.scop.statements if is_contraction(s)]
    assert len(contractions) == 1 and contractions[0].op == "MatMul"
    assert scop_flops(kernel.scop) == 2 * 7 * 13 * 11
    assert all(statement_flops(s) == 0 for s in kernel.scop.statements if s not in contractions)


def test_padding_taps_are_not_counted():
    # x: [1, 9, 7, 3], 3x3 filter to 5 channels, stride 2, SAME: output [1, 5, 4, 5], padded at the borders
    (kernel, *_) = kernels_of(GRAPHS["conv_same_stride2"]())
    (conv,) = [s for s in kernel.scop.statements if is_contraction(s)]
    assert conv.op == "Conv2D" and conv.constraints
    # taps inside the input, per axis: rows 2*d1 + r0 - 1 in [0, 9), columns 2*d2 + r1 - 1 in [0, 7)
    rows = sum(1 for d in range(5) for r in range(3) if 0 <= 2 * d + r - 1 < 9)
    columns = sum(1 for d in range(4) for r in range(3) if 0 <= 2 * d + r - 1 < 7)
    assert statement_flops(conv) == 2 * rows * columns * 5 * 3 < 2 * 5 * 4 * 5 * 3 * 3 * 3
    pool = kernels_of(GRAPHS["maxpool_same"]())
    assert all(scop_flops(k.scop) == 0 for k in pool)  # no product reduced: not counted


def test_model_flops_from_a_graphdef(tmp_path):
    path = tmp_path / "mm.pbtxt"
    path.write_text(MATMUL_PBTXT)
    assert contraction_flops(path) == 2 * 6 * 5 * 4
    relu_only = tmp_path / "relu.pbtxt"
    relu_only.write_text(MATMUL_PBTXT.split('node { name: "mm"')[0] + 'node { name: "out" op: "Relu" input: "a" }\n')
    assert contraction_flops(relu_only) is None


def test_models_suite_has_five_applications_at_batch_1_and_8():
    plan = resolve_entries([], "models", None)
    names = ["resnet50", "inception_v3", "densenet121", "mobilenet_v2", "efficientnet_b0"]
    assert [w.label for w, _ in plan] == [f"{n} b{b}" for n in names for b in (1, 8)]
    assert len(SUITES["models"]) == 10 and all(w.model in names for w, _ in plan)
