"""No kernel without a schedule: every kernel of the zoo's models that is not tiny gets a
default recipe with threads, tiles, register tiles or packing, never its nest as lowered. A kernel left as lowered runs at a few percent of the machine's peak
(a U-Net's transposed convolutions did: 5-7 GFLOP/s, two thirds of the model's time), and
nothing else would say so.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tensorflow")

from polytf.compiler.preparation import prepare_model  # noqa: E402
from polytf.schedules.search_space import SearchSpace  # noqa: E402
from polytf.schedules.structure import anchor_statement  # noqa: E402

#: Models with every kind of kernel the zoo has (contractions, pooling, resizing, transposed
#: convolutions, normalisations, attention, recurrent steps), then the Keras applications;
#: seconds each to freeze and prepare (no kernel is compiled).
MODELS = [
    "cifar_cnn", "unet", "transposed_unet", "swin_block", "video_cnn", "gpt2_block", "bert_encoder", "mlp_mixer", "temporal_conv_net", "lstm20",
    "resnet50", "mobilenet_v2", "inception_v3", "densenet121", "efficientnet_b0", "convnext_tiny", "regnetx_200mf",
]


#: Kernels whose anchor has fewer iteration points than this are too small to need a
#: schedule (a classifier head's pooling and normalisation over 7x7x768 values).
SMALL_KERNEL_POINTS = 2**17


def _unscheduled_kernel(kernel) -> bool:
    """Whether the default recipe of ``kernel`` leaves its loop nest as lowered, up to an
    interchange: one thread, no tile, register tile or packing (a Conv2DBackpropInput
    lowered in its zero-dilated form had ``order d0,d1,d2,r0,r1,r2,d3`` and nothing else)."""
    if math.prod(anchor_statement(kernel.scop).extents) < SMALL_KERNEL_POINTS:
        return False
    recipe = SearchSpace.for_scop(kernel.scop, 2).default_recipe()
    return not (recipe.parallel or any(recipe.tile_sizes) or any(recipe.reduction_tile_sizes) or any(recipe.register_tile_sizes) or recipe.pack)


def _unscheduled(path) -> list[str]:
    return [f"{kernel.scop.name} ({', '.join(op for _, op in kernel.scop.ops)})" for kernel in prepare_model(path).kernels if _unscheduled_kernel(kernel)]


@pytest.mark.parametrize("name", MODELS)
def test_every_kernel_of_a_zoo_model_is_scheduled(frozen_model, name) -> None:
    assert _unscheduled(frozen_model(name, 1)) == []
