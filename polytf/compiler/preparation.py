"""The front half of the compiler: a model file to lowered kernels and host steps.

Steps of :func:`prepare_model` (each a pure function of the previous step's value)::

    ModelSource ─► read ─► infer types ─► graph passes ─► partition + lower ─► place buffers ─► PreparedModel
                  GraphDef  shapes,        fold, CSE,      fusion groups,      operands written
                  or Saved- dtypes         prune,          Scops; host steps   into their
                  Model                    simplify        where needed        consumer's slab

1. read: :func:`polytf.frontend.load_graph` (a frozen GraphDef, or a SavedModel's signature
   frozen by TensorFlow), only the fan-in of the requested outputs;
2. infer types: :func:`polytf.lowering.shape_inference.infer_types`, input shapes applied;
3. graph passes: :func:`polytf.passes.pipeline.optimize` (Grappler's passes: constant
   folding, common-subexpression elimination, arithmetic simplification, batch-norm
   folding, expansion), then typed afresh, which checks every node a pass made;
4. partition and lower: :func:`polytf.lowering.host_fallback.lower_with_fallback`, XLA-style
   fusion groups lowered to Scops; a node polytf cannot lower runs on the host through its
   numpy reference (or, without fallback, the model is refused);
5. place buffers: :func:`polytf.plan.buffer_placement.place_in_consumer_buffers`, the
   operands of ``ConcatV2`` and ``Pad`` written straight into their result.

The kernels are compiled afterwards (:mod:`polytf.compiler.kernel_compilation`), with a
tuning record's recipe or the default one.
"""

from __future__ import annotations

import os

from polytf.compiler.model_source import ModelSource
from polytf.compiler.prepared_model import PreparedModel
from polytf.errors import ShapeError
from polytf.frontend import load_graph
from polytf.graph import Graph
from polytf.lowering.host_fallback import lower_with_fallback
from polytf.lowering.shape_inference import infer_types
from polytf.passes.pipeline import optimize
from polytf.passes.pruning import prune_to_outputs
from polytf.passes.report import PassReport
from polytf.plan.buffer_placement import place_in_consumer_buffers

__all__ = ["PreparedModel", "prepare_graph", "prepare_model", "read_graph"]


def read_graph(source: ModelSource) -> Graph:
    """The graph of ``source``'s file, its outputs and signature (step 1; see
    :func:`prepare_model` for the errors)."""
    return load_graph(source.path, outputs=source.output_names, signature=source.signature)


def prepare_graph(source: ModelSource | str | os.PathLike, *, optimize_graph: bool = True, graph: Graph | None = None) -> tuple[Graph, tuple[PassReport, ...]]:
    """Read ``source`` (unless ``graph`` is its graph, as :func:`read_graph` read it), infer
    its types and run the graph passes (steps 1 to 3); returns the typed graph and what each
    pass changed (see :func:`prepare_model` for the arguments and errors)."""
    source = ModelSource.of(source)
    _check_sizes_given(source)
    graph = read_graph(source) if graph is None else graph
    typed = infer_types(graph, source.input_shapes)
    if not optimize_graph:
        pruned, report = prune_to_outputs(typed)
        return pruned, (report,)
    optimized, reports = optimize(typed)
    # The passes keep types and constants in step; typing the result afresh checks every new node.
    return infer_types(optimized.with_changes(types={}, constants={}), source.input_shapes), reports


def _check_sizes_given(source: ModelSource) -> None:
    """Preparing a model needs every size: a size symbol in ``source.input_shapes`` is the
    dynamic model's to bind (:mod:`polytf.compiler.dynamic_model`).

    Raises:
        ShapeError: an input shape with a size symbol (names the placeholder and symbol).
    """
    for name, shape in source.input_shapes.items():
        symbols = [size for size in shape if isinstance(size, str)]
        if symbols:
            example = ",".join("1" if isinstance(size, str) else str(size) for size in shape)
            raise ShapeError(
                f"input '{name}' has size symbol {symbols[0]}, and this step needs every size: "
                f"give them, e.g. --input {name}:{example} (CLI) or input_shapes={{'{name}': ({example},)}} (API)"
            )


def prepare_model(
    source: ModelSource | str | os.PathLike,
    *,
    fallback: bool = True,
    fuse: bool = True,
    optimize_graph: bool = True,
    in_place: bool = True,
    graph: Graph | None = None,
) -> PreparedModel:
    """Read ``source`` and lower it to kernels (module docstring).

    Args:
        source: the model (a path stands for ``ModelSource(path)``: the graph's sinks, its
            declared shapes, the default signature).
        fallback: nodes with a numpy reference that polytf cannot lower run on the host
            (:mod:`polytf.lowering.host_fallback`); False refuses them
            (:attr:`BuildOptions.fallback <polytf.compiler.build_options.BuildOptions.fallback>`).
        fuse: False puts every compute node in its own kernel.
        optimize_graph: False runs only pruning instead of every graph pass (for comparisons).
        in_place: write the operands of ConcatV2 and Pad straight into the slabs of
            their result (:mod:`polytf.plan.buffer_placement`); False keeps the copies.
        graph: ``source``'s graph, already read (:func:`read_graph`); None reads it.

    Raises:
        GraphError: unreadable file or malformed graph (names the file).
        UnsupportedOpError: every unsupported node, in one message (with ``fallback=False``
            also every node that would run on the host).
        ShapeError: shapes that cannot be inferred (says how to fix them); a size symbol in
            ``source.input_shapes`` (a static model needs every size).
    """
    graph, reports = prepare_graph(source, optimize_graph=optimize_graph, graph=graph)
    groups, kernels, host_nodes = lower_with_fallback(graph, fuse=fuse, fallback=fallback)
    if in_place:
        groups, kernels = place_in_consumer_buffers(graph, groups, kernels)
    return PreparedModel(graph, groups, kernels, reports, host_nodes)
