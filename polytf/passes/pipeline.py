"""The graph optimizer: every graph pass, in order, repeated until nothing changes.

Source: Grappler's meta optimizer (tensorflow/core/grappler/optimizers/meta_optimizer.cc)
runs its optimizers in a fixed order for a bounded number of iterations; this pipeline does
the same with polytf's passes:

1. prune to the fan-in of the outputs (:mod:`~polytf.passes.pruning`);
2. identity removal (identity-like ops, ``NoOp``, control edges);
3. constant folding (with the op table's numpy references);
   then dilation folding (``SpaceToBatchND -> convolution -> BatchToSpaceND`` into one
   convolution with ``dilations``, before the expansion rewrites the convolution);
   then op expansion (ops with an expansion rule: ``Split``/``SplitV``/``Unpack`` into one
   ``Slice`` per used output, ``ArgMax``/``ArgMin``/``OneHot`` into comparisons and reductions);
   then loop rerolling (a stack of identical per-step chains, Keras' ``TimeDistributed``,
   as one chain over the stacked rows: :mod:`~polytf.passes.loop_rerolling`);
4. arithmetic simplification (``x*1``, ``x+0``, ``Neg(Neg(x))``, constant chains, ``Sub`` of a constant);
5. batch-norm folding into convolution weights and biases;
   then matrix products (a 1x1, stride-1 ``Conv2D`` as a ``MatMul`` of row-major views, by
   its op's ``matrix_product`` rule: :func:`~polytf.passes.expansion.rewrite_matrix_products`);
   then reshape sinking (an element-wise node moves above the reshape between it and its
   producer, so that it fuses into the producer's kernel: :mod:`~polytf.passes.reshape_sinking`);
6. common-subexpression elimination;
7. constant folding again (merged and rewritten nodes may have become constant);
8. prune.

Each pass is a pure ``Graph -> (Graph, PassReport)`` function; :func:`optimize` returns the
final graph and every report, round by round, for ``polytf show --passes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from polytf.config import GraphPassConfig
from polytf.graph import Graph
from polytf.passes.arithmetic import simplify_arithmetic
from polytf.passes.batch_norm_folding import fold_batch_norms
from polytf.passes.common_subexpressions import eliminate_common_subexpressions
from polytf.passes.constant_folding import fold_constants
from polytf.passes.dilation_folding import fold_dilations
from polytf.passes.expansion import expand_ops, rewrite_matrix_products
from polytf.passes.identity_removal import remove_identities
from polytf.passes.loop_rerolling import reroll_loops
from polytf.passes.pruning import prune_to_outputs
from polytf.passes.report import PassReport
from polytf.passes.reshape_sinking import sink_reshapes

GraphPass = Callable[[Graph, GraphPassConfig], tuple[Graph, PassReport]]

#: The passes of one round, in order.
PASSES: tuple[tuple[str, GraphPass], ...] = (
    ("prune", lambda graph, config: prune_to_outputs(graph)),
    ("identity removal", lambda graph, config: remove_identities(graph)),
    ("constant folding", fold_constants),
    ("dilation folding", lambda graph, config: fold_dilations(graph)),
    ("op expansion", lambda graph, config: expand_ops(graph)),
    ("loop rerolling", lambda graph, config: reroll_loops(graph)),
    ("arithmetic simplification", lambda graph, config: simplify_arithmetic(graph)),
    ("batch norm folding", lambda graph, config: fold_batch_norms(graph)),
    ("matrix products", lambda graph, config: rewrite_matrix_products(graph)),
    ("reshape sinking", lambda graph, config: sink_reshapes(graph)),
    ("common subexpression elimination", eliminate_common_subexpressions),
    ("constant folding", fold_constants),
    ("prune", lambda graph, config: prune_to_outputs(graph)),
)


def optimize(
    graph: Graph, config: GraphPassConfig | None = None, observe: Callable[[str, Graph, Graph], None] | None = None
) -> tuple[Graph, tuple[PassReport, ...]]:
    """Run :data:`PASSES` until a round changes nothing (at most ``config.max_rounds`` rounds).

    Args:
        graph: typed (after :func:`polytf.lowering.shape_inference.infer_types`; new nodes are then
            typed too) or untyped.
        config: pass settings (size caps, rounds).
        observe: called after each pass with its name, its input graph and its output graph
            (``polytf ops --model`` follows each node through the passes with it).

    Returns:
        The optimized graph (same outputs, same placeholders, same values up to float32
        rounding) and the reports of every pass run, each with its ``round``.
    """
    config = config or GraphPassConfig()
    reports: list[PassReport] = []
    for round_number in range(1, max(1, config.max_rounds) + 1):
        changed = False
        for pass_name, graph_pass in PASSES:
            before = graph
            graph, report = graph_pass(graph, config)
            if observe is not None:
                observe(pass_name, before, graph)
            reports.append(replace(report, round=round_number))
            changed = changed or report.changed
        if not changed:
            break
    return graph, tuple(reports)


def summary(reports: tuple[PassReport, ...]) -> PassReport:
    """One report spanning all of ``reports`` (first input to last output)."""
    if not reports:
        return PassReport("total", 0, 0)
    first, last = reports[0], reports[-1]
    rewrites = sum(r.rewrites for r in reports)
    return PassReport(
        "total", first.nodes_before, last.nodes_after, first.edges_before, last.edges_after, rewrites, round=last.round
    )
