"""PreparedModel: a model after the front half of the compiler (:mod:`polytf.compiler.preparation`).

Its own module, apart from the passes and the frontend that make it, so that a load that
finds it kept (:mod:`polytf.compiler.load_cache`) and the steps that read it import neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.graph import FusionGroup, Graph
from polytf.lowering.host_fallback import HostNode, HostStep
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.passes.report import PassReport

__all__ = ["PreparedModel"]


@dataclass(frozen=True)
class PreparedModel:
    """A model after the front half of the compiler.

    Attributes:
        graph: typed and optimized graph.
        groups: fusion groups in execution order, host groups (``on_host``) included.
        kernels: the lowered Scops of the compiled groups, same order.
        passes: what each graph pass changed, in the order they ran (all rounds).
        host_nodes: the nodes that run on the host, with the reason
            (:mod:`polytf.lowering.host_fallback`).
    """

    graph: Graph
    groups: tuple[FusionGroup, ...]
    kernels: tuple[LoweredKernel, ...]
    passes: tuple[PassReport, ...]
    host_nodes: tuple[HostNode, ...] = ()

    def steps(self) -> list[LoweredKernel | HostStep]:
        """Kernels and host steps in execution order."""
        kernels = iter(self.kernels)
        host = {node.name: node for node in self.host_nodes}
        return [HostStep.of(self.graph, group, host[group.nodes[0]]) if group.on_host else next(kernels) for group in self.groups]
