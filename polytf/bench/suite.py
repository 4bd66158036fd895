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
        optional: left out of the suite, not an error, when this installation's zoo has no
            such model (a model a suite names before the zoo has it).
    """

    spec: str
    threads: tuple[int, ...] | None = None
    optional: bool = False


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
    # cuda (``--target cuda``): a large GEMM (against cuBLAS), a ResNet-style conv layer at
    # batch 32 (against cuDNN), and two whole models at batch 32
    "cuda": (
        BenchEntry("matmul:4096x4096x4096"),
        BenchEntry("conv3x3_bias_relu_56:32"),
        BenchEntry("resnet50:32"),
        BenchEntry("transformer_encoder:32"),
    ),
    # models: Keras applications at batch 1 and 8 (a model polytf cannot compile yet is a
    # failed row of the report, and the run goes on)
    "models": tuple(
        BenchEntry(f"{name}:{batch}")
        for name in ("resnet50", "inception_v3", "densenet121", "mobilenet_v2", "efficientnet_b0")
        for batch in (1, 8)
    ),
    # engines: the rows of the issue comparing polytf with the engines users deploy with (OpenVINO,
    # ONNX Runtime, TensorFlow, XLA; "polytf / best engine" per row): the models suite, the
    # zoo's Transformer blocks (encoder 1x128x256; GPT block 2x64 tokens; an MLP-Mixer block when
    # the zoo has one), and the small rows (CIFAR CNN b32, MLP b1, MatMul 1024^3)
    "engines": (
        *(
            BenchEntry(f"{name}:{batch}")
            for name in ("resnet50", "inception_v3", "densenet121", "mobilenet_v2", "efficientnet_b0")
            for batch in (1, 8)
        ),
        BenchEntry("transformer_encoder:1"),
        BenchEntry("gpt2_block:2"),
        BenchEntry("mlp_mixer:1", optional=True),
        BenchEntry("cifar_cnn:32"),
        BenchEntry("mlp:1"),
        BenchEntry("matmul:1024x1024x1024"),
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
        suite: suite name; used when given, and when ``specs`` is empty (default ``issue3``); its
            optional entries whose zoo model does not exist are left out.
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
        if entry.optional and entry.spec.partition(":")[0] not in _zoo_names():
            continue
        counts = tuple(threads) if threads else (entry.threads or DEFAULT_THREADS)
        resolved.append((parse_entry(entry.spec), counts))
    return resolved


def contraction_flops(path: str | os.PathLike) -> int | None:
    """Floating-point operations of one inference of the GraphDef at ``path``: the model is
    lowered to kernels as :func:`polytf.load` lowers it, and every contraction statement of
    every kernel (MatMul, BatchMatMulV2, Einsum, Conv2D, DepthwiseConv2dNative: ``C += A * B``)
    counts 2 FLOPs per point of its iteration domain (:func:`polytf.poly.flops.contraction_flops`;
    padding taps of a convolution are not work and not counted). Element-wise epilogues,
    pooling and softmax are not counted. ``None`` when the model has no contraction.

    Raises:
        GraphError, ShapeError, UnsupportedOpError: the graph cannot be read or lowered.
    """
    from polytf.compiler.preparation import prepare_model
    from polytf.poly.flops import contraction_flops as scop_flops
    from polytf.poly.flops import is_contraction

    scops = [kernel.scop for kernel in prepare_model(path).kernels]
    if not any(is_contraction(statement) for scop in scops for statement in scop.statements):
        return None
    return sum(scop_flops(scop) for scop in scops)
