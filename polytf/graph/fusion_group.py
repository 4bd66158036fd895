"""FusionGroup: the nodes of a graph that compile into one kernel, as a value.

The partition pass (:mod:`polytf.passes.fusion`) makes them; lowering
(:mod:`polytf.lowering.lowered_kernel`) turns each into a Scop.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusionGroup:
    """Nodes compiled into one kernel.

    Attributes:
        name: kernel name (C identifier), e.g. ``"k2_dense_1_MatMul"``.
        nodes: compute node names, in program order; the first is the anchor.
        inputs: tensors read from outside the group.
        outputs: tensors produced in the group and needed outside it.
        on_host: the group is one node that runs on the host through its numpy reference.
    """

    name: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    on_host: bool = False


__all__ = ["FusionGroup"]
