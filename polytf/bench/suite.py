"""What ``polytf bench`` measures: entries (zoo model specs or GraphDef files), suites of
entries with their thread counts, and the FLOP count of a model.

An entry spec is a zoo model name with an optional size, or a GraphDef file:

========================== =====================================================
spec                       model
========================== =====================================================
``matmul:1024x1024x1024``  ``a: [M, K] @ b: [K, N]`` with ``M x K x N`` given
``cifar_cnn:32``           zoo model ``cifar_cnn`` with batch 32
``conv3x3_bias_relu_56``   zoo model with its default batch (1)
``models/net.pb``          a frozen GraphDef (``.pb`` or ``.pbtxt``), as it is
========================== =====================================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from polytf.errors import PolytfError

__all__ = [
    "BenchEntry",
    "Workload",
    "SUITES",
    "DEFAULT_SUITE",
    "DEFAULT_THREADS",
    "parse_entry",
    "parse_threads",
    "resolve_entries",
    "contraction_flops",
]

#: Thread count of entries that list none, when ``--threads`` is not given.
DEFAULT_THREADS = (2,)


@dataclass(frozen=True)
class BenchEntry:
    """One line of a suite.

    Attributes:
        spec: zoo model spec (``"matmul:1024x1024x1024"``, ``"mlp:64"``) or GraphDef path.
        threads: thread counts to run it with; ``None`` means the ``--threads`` value
            (default :data:`DEFAULT_THREADS`). An explicit ``--threads`` overrides both.
    """

    spec: str
    threads: tuple[int, ...] | None = None


#: Named suites. ``issue3``: the workloads of the performance issue (GEMM, a ResNet-style
#: conv layer, the CIFAR CNN and the MLP at batch 1 and at a larger batch).
SUITES: dict[str, tuple[BenchEntry, ...]] = {
    "issue3": (
        BenchEntry("matmul:1024x1024x1024", threads=(1, 2)),
        BenchEntry("matmul:384x1000x257"),
        BenchEntry("conv3x3_bias_relu_56"),
        BenchEntry("cifar_cnn:32"),
        BenchEntry("cifar_cnn:1"),
        BenchEntry("mlp:64"),
        BenchEntry("mlp:1"),
    ),
    # issue4: a MobileNetV2 and a Transformer encoder block, batch 1
    "issue4": (
        BenchEntry("mobilenet_v2"),
        BenchEntry("transformer_encoder"),
    ),
    "smoke": (
        BenchEntry("matmul:64x96x80"),
        BenchEntry("odd_matmul"),
    ),
}
DEFAULT_SUITE = "issue3"


@dataclass(frozen=True)
class Workload:
    """A parsed entry spec.

    Attributes:
        spec: the spec as given.
        label: short name for tables (``"matmul 1024x1024x1024"``, ``"cifar_cnn b32"``).
        model: zoo model name, or ``None`` for a GraphDef file.
        batch: zoo batch (``None``: the model's default).
        sizes: ``matmul`` sizes ``(M, K, N)``.
        path: the GraphDef file of a file entry.
    """

    spec: str
    label: str
    model: str | None = None
    batch: int | None = None
    sizes: tuple[int, ...] | None = None
    path: Path | None = None

    @property
    def public_spec(self) -> str:
        """The spec as reports show it: a file entry given by an absolute path shows its file name only."""
        if self.path is not None and self.path.is_absolute():
            try:
                return str(self.path.relative_to(Path.cwd()))
            except ValueError:
                return self.path.name
        return self.spec

    def write(self, folder: Path) -> Path:
        """The GraphDef file to benchmark: a file entry's own path, else the zoo model written
        into ``folder`` (needs TensorFlow; raises DependencyMissingError without it)."""
        if self.path is not None:
            return self.path
        from polytf.model_zoo import write_model

        name = self.label.replace(" ", "_")
        return write_model(
            self.model, Path(folder) / f"{name}.pb", batch=self.batch if self.batch is not None else 1, sizes=self.sizes
        )


def _zoo_names() -> tuple[str, ...]:
    from polytf.model_zoo.freeze import MODEL_NAMES

    return MODEL_NAMES


def _sized_models() -> dict[str, tuple[str, ...]]:
    from polytf.model_zoo.freeze import SIZED_MODELS

    return SIZED_MODELS


def parse_entry(spec: str) -> Workload:
    """Parse an entry spec (see the module docstring).

    Raises:
        PolytfError: neither a zoo model spec nor an existing ``.pb``/``.pbtxt`` file.
    """
    text = spec.strip()
    if text.endswith((".pb", ".pbtxt")) or os.sep in text or "/" in text:
        path = Path(text)
        if not path.is_file():
            raise PolytfError(f"bench entry {spec!r}: no such GraphDef file")
        return Workload(spec, path.stem, path=path)
    name, _, size = text.partition(":")
    names = _zoo_names()
    if name not in names:
        raise PolytfError(
            f"unknown bench entry {spec!r}: give a zoo model ({', '.join(names)}), e.g. 'cifar_cnn:32' or "
            "'matmul:1024x1024x1024', or a .pb/.pbtxt file"
        )
    sized = _sized_models()
    if not size:
        return Workload(spec, name, model=name)
    parts = size.lower().replace("×", "x").split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise PolytfError(f"bench entry {spec!r}: the size after ':' must be positive integers joined by 'x'")
    numbers = tuple(int(p) for p in parts)
    if name in sized:
        if len(numbers) != len(sized[name]):
            raise PolytfError(f"bench entry {spec!r}: {name} takes sizes {'x'.join(sized[name])}, e.g. '{name}:1024x1024x1024'")
        return Workload(spec, f"{name} {'x'.join(map(str, numbers))}", model=name, sizes=numbers)
    if len(numbers) != 1:
        raise PolytfError(f"bench entry {spec!r}: {name} takes one size, the batch, e.g. '{name}:32'")
    return Workload(spec, f"{name} b{numbers[0]}", model=name, batch=numbers[0])


def parse_threads(text: str) -> tuple[int, ...]:
    """``"1,2"`` -> ``(1, 2)``.

    Raises:
        PolytfError: not a comma-separated list of positive integers.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise PolytfError(f"--threads {text!r}: give positive thread counts separated by commas, e.g. 1,2")
    return tuple(dict.fromkeys(int(p) for p in parts))


def resolve_entries(
    specs: Sequence[str], suite: str | None, threads: Sequence[int] | None
) -> list[tuple[Workload, tuple[int, ...]]]:
    """The workloads to run and the thread counts of each, in order.

    Args:
        specs: entry specs from the command line.
        suite: suite name; used when given, and when ``specs`` is empty (default ``issue3``).
        threads: ``--threads`` if given: overrides every entry's own thread counts.

    Raises:
        PolytfError: an unknown suite or entry.
    """
    entries: list[BenchEntry] = []
    if suite is not None or not specs:
        name = suite or DEFAULT_SUITE
        if name not in SUITES:
            raise PolytfError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
        entries.extend(SUITES[name])
    entries.extend(BenchEntry(spec) for spec in specs)
    resolved = []
    for entry in entries:
        counts = tuple(threads) if threads else (entry.threads or DEFAULT_THREADS)
        resolved.append((parse_entry(entry.spec), counts))
    return resolved


def contraction_flops(path: str | os.PathLike) -> int | None:
    """Floating-point operations of one inference: ``2·M·N·K`` per MatMul (and per batch of a
    BatchMatMulV2), ``2·N·Ho·Wo·Cout·KH·KW·Cin`` per Conv2D, ``2·N·Ho·Wo·Cout·KH·KW`` per
    DepthwiseConv2dNative, and for an Einsum 2 × the output size × the sizes of the contracted
    indices (multiply and add counted apart; element-wise epilogues, pooling and softmax not
    counted). ``None`` when the graph has none of these ops.

    Raises:
        GraphError, ShapeError: the graph cannot be read or has non-static shapes.
    """
    from polytf.frontend import load_graph
    from polytf.ops.shape_inference import infer_types

    graph = infer_types(load_graph(path))
    total, found = 0, False
    for node in graph.nodes.values():
        if node.op == "MatMul":
            a = graph.types[node.inputs[0]].shape
            m, n = graph.types[node.output(0)].shape
            k = a[0] if node.attr("transpose_a", False) else a[1]
            total += 2 * int(m) * int(n) * int(k)
            found = True
        elif node.op == "Conv2D":
            batch, height, width, filters = graph.types[node.output(0)].shape
            kernel_h, kernel_w, channels, _ = graph.types[node.inputs[1]].shape
            total += 2 * int(batch) * int(height) * int(width) * int(filters) * int(kernel_h) * int(kernel_w) * int(channels)
            found = True
        elif node.op == "DepthwiseConv2dNative":
            kernel_h, kernel_w = graph.types[node.inputs[1]].shape[:2]
            total += 2 * math.prod(int(d) for d in graph.types[node.output(0)].shape) * int(kernel_h) * int(kernel_w)
            found = True
        elif node.op == "BatchMatMulV2":
            a = graph.types[node.inputs[0]].shape
            k = a[-2] if node.attr("adj_x", False) else a[-1]
            total += 2 * math.prod(int(d) for d in graph.types[node.output(0)].shape) * int(k)
            found = True
        elif node.op == "Einsum":
            equation = node.attr("equation", b"")
            equation = equation.decode() if isinstance(equation, bytes) else str(equation)
            operands, _, output = equation.replace(" ", "").partition("->")
            sizes = {}
            for labels, tensor in zip(operands.split(","), node.inputs):
                sizes.update(zip(labels, graph.types[tensor].shape))
            contracted = math.prod(int(sizes[label]) for label in sizes if label not in output)
            total += 2 * math.prod(int(d) for d in graph.types[node.output(0)].shape) * contracted
            found = True
    return total if found else None
