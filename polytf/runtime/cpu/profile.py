"""Per-kernel profile of a CompiledModel: where the time of one call goes, and how close each
kernel comes to the machine's float32 peak.

Kernels are timed where the model runs them: whole calls ``model(**inputs)`` with a clock
read before the first step and after each one (:meth:`CompiledModel.timed_calls`), so each
kernel finds the caches as the kernels before it left them. The whole call is timed on the
same clock, and what it spends outside its steps (input checks, binding, output arrays, the
Python between kernels) is the runtime's overhead: the call / kernels ratio is taken per call
(median over the calls), so that machine noise between calls does not enter it. Each kernel
is also timed alone, repeated with its operands hot in the caches (what the profile showed
before the in-model timing): the gap between the two is what the caches cost in the model.
A kernel's FLOPs are those of its contractions (:func:`polytf.poly.flops.contraction_flops`:
2 per multiply-add executed); under a Winograd recipe, those of the batched GEMM it executes
(:func:`polytf.schedules.winograd.winograd_scop`), not the direct convolution's, which would
put a kernel that does fewer multiplications above the machine's peak.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from polytf.ops import lookup
from polytf.poly.flops import contraction_flops, is_contraction
from polytf.schedules.winograd import WINOGRAD_ALGORITHMS, winograd_applies, winograd_scop

__all__ = ["KernelProfile", "ModelProfile", "profile_model", "DEPTHWISE", "CONVOLUTION"]

#: :attr:`KernelProfile.convolution` of a convolution that filters each channel on its own.
DEPTHWISE = "depthwise"
#: :attr:`KernelProfile.convolution` of a convolution whose outputs sum over input channels too.
CONVOLUTION = "convolution"


def executed_flops(scop, recipe) -> int:
    """FLOPs of the contractions ``scop`` executes under ``recipe`` (module docstring): a
    Winograd recipe's are those of its batched GEMM, fewer than the convolution's."""
    algorithm = getattr(recipe, "algorithm", "direct")
    if algorithm in WINOGRAD_ALGORITHMS and winograd_applies(scop):
        return contraction_flops(winograd_scop(scop, algorithm))
    return contraction_flops(scop)


def gflops(flops: float, seconds: float) -> float | None:
    """``flops`` done in ``seconds`` as 10^9 FLOPs per second (None without FLOPs or time)."""
    return flops / seconds / 1e9 if flops and seconds > 0 else None


def percent_of_peak(gflops: float | None, peak_gflops: float | None) -> float | None:
    """``gflops`` as a percentage of ``peak_gflops`` (None when either is missing)."""
    return 100.0 * gflops / peak_gflops if gflops is not None and peak_gflops else None


#: The largest percentage of the measured peak a kernel can reach, with room for the peak's
#: own measurement error; a figure above it cannot be (the kernel's time was measured wrong:
#: a clock that jumped, a busy machine) and is flagged instead of printed.
POSSIBLE_PERCENT_OF_PEAK = 105.0


def percent_cell(percent: float | None) -> str:
    """A % of peak for a table: ``"57.3"``, ``"-"`` when unknown, ``"> 100?"`` when impossible
    (:data:`POSSIBLE_PERCENT_OF_PEAK`; :meth:`ModelProfile.impossible` says why)."""
    if percent is None:
        return "-"
    return "> 100?" if percent > POSSIBLE_PERCENT_OF_PEAK else f"{percent:.1f}"


@dataclass(frozen=True)
class KernelProfile:
    """One kernel of a profile.

    Attributes:
        name: kernel name (``scop.name``).
        ops: ``(node name, op type)`` of the TensorFlow nodes fused into it.
        output_shapes: shapes of the arrays it writes for later kernels or the caller.
        median_s: median seconds of the kernel inside whole model calls.
        flops: float32 operations of its contractions (0 when it has none).
        recipe: its schedule recipe, short form (``ScheduleRecipe.describe``).
        peak_gflops: the machine's peak the percentage is taken of (None: not measured).
        filter_size: ``(KH, KW)`` of its first convolution (an op whose weight layout has a
            window: ``OpDefinition.weight_layout``), else None.
        convolution: :data:`CONVOLUTION` or :data:`DEPTHWISE` (it sums over its window only)
            for a kernel with a convolution, else None.
        convolution_node: ``(node name, op type)`` of that convolution, else None.
        alone_median_s: median seconds of the kernel called alone, repeatedly (operands hot
            in the caches); None when not measured.
    """

    name: str
    ops: tuple[tuple[str, str], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    median_s: float
    flops: int
    recipe: str
    peak_gflops: float | None = None
    filter_size: tuple[int, int] | None = None
    alone_median_s: float | None = None
    convolution: str | None = None
    convolution_node: tuple[str, str] | None = None

    @property
    def gflops(self) -> float | None:
        """10^9 FLOPs per second inside the model, None without contractions."""
        return gflops(self.flops, self.median_s)

    @property
    def percent_of_peak(self) -> float | None:
        """:attr:`gflops` as a percentage of :attr:`peak_gflops` (None when either is missing)."""
        return percent_of_peak(self.gflops, self.peak_gflops)


@dataclass(frozen=True)
class ModelProfile:
    """The profile of one model: its kernels in execution order and the whole call.

    Attributes:
        kernels: one row per kernel, execution order.
        call_s: median seconds of one whole call ``model(**inputs)``.
        threads: threads per kernel.
        peak_gflops: the machine's peak for ``threads`` threads (None: not measured).
        call_to_kernels_ratio: median over the timed calls of each call's time / the time of
            the steps inside it (kernels and host steps); above 1 by the runtime's overhead.
        host_s: median seconds of the host steps of a call (nodes run by their numpy
            reference between the kernels; 0 without any).
    """

    kernels: tuple[KernelProfile, ...]
    call_s: float
    threads: int
    peak_gflops: float | None = None
    call_to_kernels_ratio: float | None = None
    host_s: float = 0.0

    @property
    def kernels_s(self) -> float:
        """Sum of the kernels' in-model medians, seconds."""
        return sum(kernel.median_s for kernel in self.kernels)

    @property
    def alone_kernels_s(self) -> float | None:
        """Sum of the kernels' medians when each runs alone with hot caches (None: not measured)."""
        if any(kernel.alone_median_s is None for kernel in self.kernels):
            return None
        return sum(kernel.alone_median_s for kernel in self.kernels)

    @property
    def alone_ratio(self) -> float | None:
        """Kernels in the model / the same kernels alone with hot caches: what running them in
        sequence costs in cache misses (None: not measured)."""
        alone = self.alone_kernels_s
        return self.kernels_s / alone if alone else None

    @property
    def flops(self) -> int:
        return sum(kernel.flops for kernel in self.kernels)

    @property
    def gflops(self) -> float | None:
        """Model FLOPs per whole-call second, 10^9/s (None without contractions)."""
        return gflops(self.flops, self.call_s)

    @property
    def percent_of_peak(self) -> float | None:
        return percent_of_peak(self.gflops, self.peak_gflops)

    def totals(self) -> str:
        """One line: call ms, sum of kernels ms, their ratio, model GFLOP/s and % of peak."""
        parts = [
            f"call {self.call_s * 1e3:.3f} ms",
            f"sum of kernels in the call {self.kernels_s * 1e3:.3f} ms",
            f"call / kernels {_number(self.call_to_kernels_ratio, '.3f')}",
        ]
        if self.host_s:
            parts.append(f"host steps {self.host_s * 1e3:.3f} ms")
        if self.alone_kernels_s:
            parts.append(f"kernels alone (hot caches) {self.alone_kernels_s * 1e3:.3f} ms")
        parts.append(f"{_number(self.gflops, '.1f')} GFLOP/s")
        if self.peak_gflops:
            parts.append(
                f"{percent_cell(self.percent_of_peak)}% of {self.peak_gflops:.0f} GFLOP/s peak "
                f"({self.threads} thread{'s' if self.threads != 1 else ''})"
            )
        return "total: " + ", ".join(parts)

    def impossible(self) -> list[str]:
        """One line per kernel (and for the whole call) timed faster than the measured peak
        allows (:data:`POSSIBLE_PERCENT_OF_PEAK`): its figures are wrong, and why."""
        lines = [
            f"{kernel.name}: timed at {kernel.percent_of_peak:.0f}% of the measured peak, which cannot be: its timing is wrong "
            "(a busy machine, or a clock that jumped); re-run on a quiet machine"
            for kernel in self.kernels
            if kernel.percent_of_peak is not None and kernel.percent_of_peak > POSSIBLE_PERCENT_OF_PEAK
        ]
        if self.percent_of_peak is not None and self.percent_of_peak > POSSIBLE_PERCENT_OF_PEAK:
            lines.append(f"the whole call: timed at {self.percent_of_peak:.0f}% of the measured peak, which cannot be; re-run on a quiet machine")
        return lines

    def rows(self) -> list[list[str]]:
        """Table cells, one list per kernel, in :meth:`headers` order."""
        return [
            [
                kernel.name,
                " + ".join(op for _, op in kernel.ops),
                " ".join("x".join(map(str, shape)) for shape in kernel.output_shapes),
                f"{kernel.median_s * 1e3:.3f}",
                _number(None if kernel.alone_median_s is None else kernel.alone_median_s * 1e3, ".3f"),
                f"{kernel.flops / 1e6:.1f}" if kernel.flops else "-",
                _number(kernel.gflops, ".1f"),
                percent_cell(kernel.percent_of_peak),
                kernel.recipe,
            ]
            for kernel in self.kernels
        ]

    @staticmethod
    def headers() -> list[str]:
        return ["kernel", "ops", "output", "median ms", "alone ms", "MFLOP", "GFLOP/s", "% peak", "recipe"]

    def table(self) -> Any:
        """A :class:`rich.table.Table` of the kernels in execution order."""
        from rich.table import Table

        table = Table(title=f"per-kernel profile ({self.threads} thread{'s' if self.threads != 1 else ''})")
        for header in self.headers():
            # a kernel's name wraps, never cut short: `polytf show --kernel NAME` needs it whole
            table.add_column(header, justify="left" if header in ("kernel", "ops", "output", "recipe") else "right", overflow="fold" if header == "kernel" else "ellipsis")
        for row in self.rows():
            table.add_row(*row)
        return table

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields, every kernel with its derived figures, and the totals."""
        return {
            "call_s": self.call_s,
            "kernels_s": self.kernels_s,
            "call_to_kernels_ratio": self.call_to_kernels_ratio,
            "host_s": self.host_s,
            "alone_kernels_s": self.alone_kernels_s,
            "alone_ratio": self.alone_ratio,
            "threads": self.threads,
            "peak_gflops": self.peak_gflops,
            "flops": self.flops,
            "gflops": self.gflops,
            "percent_of_peak": self.percent_of_peak,
            "kernels": [
                {**asdict(kernel), "gflops": kernel.gflops, "percent_of_peak": kernel.percent_of_peak} for kernel in self.kernels
            ],
        }


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _convolution(scop: Any) -> dict[str, Any]:
    """:attr:`KernelProfile.filter_size`, ``convolution`` and ``convolution_node`` of ``scop``:
    from its first contraction statement whose op's weight has a spatial window (the
    ``weight_layout`` trait, which also says whether it is depthwise); the window is the
    statement's first two reduction iterators (``KH, KW``)."""
    for statement in scop.statements:
        definition = lookup(statement.op)
        layout = definition.weight_layout if definition is not None else None
        if layout is None or not layout.is_convolution or not is_contraction(statement):
            continue
        extents = dict(zip(statement.iterators, statement.extents))
        window = statement.reduction_iterators
        if len(window) >= 2:
            return {
                "filter_size": (int(extents[window[0]]), int(extents[window[1]])),
                "convolution": DEPTHWISE if layout.depthwise else CONVOLUTION,
                "convolution_node": (statement.node, statement.op),
            }
    return {}


def profile_model(
    model: Any, inputs: Mapping[str, np.ndarray], repeats: int = 10, peak_gflops: float | None = None, warmup: int = 2, alone: bool = True
) -> ModelProfile:
    """Time every kernel inside whole calls (and alone), and count their FLOPs.

    Args:
        model: a :class:`polytf.runtime.cpu.compiled_model.CompiledModel`.
        inputs: one array per placeholder (as for ``model(**inputs)``).
        repeats: timed whole calls, and timed calls of each kernel alone (>= 1); medians are
            reported.
        peak_gflops: the machine's float32 peak for ``model.threads`` threads, GFLOP/s
            (:func:`polytf.bench.peak.measure_fp32_peak`); None leaves the percentages out.
        warmup: untimed whole calls first.
        alone: also time each kernel alone, with hot caches (:attr:`KernelProfile.alone_median_s`).

    Returns:
        A :class:`ModelProfile`, kernels in execution order.

    Raises:
        GraphError, ShapeError: the inputs do not fit the model (as for ``model(**inputs)``).
        PolyhedralError: a contraction's domain cannot be counted (a polytf bug).
    """
    repeats = max(1, int(repeats))
    calls = model.timed_calls(inputs, repeats, warmup)
    kinds = model.step_kinds
    in_model = [statistics.median(call.step_s[i] for call in calls) for i, kind in enumerate(kinds) if kind == "kernel"]
    host_s = sum(statistics.median(call.step_s[i] for call in calls) for i, kind in enumerate(kinds) if kind == "host")
    alone_s = [statistics.median(seconds) for _, seconds in model.kernel_latency_s(inputs, repeats, 0)] if alone else [None] * len(in_model)
    rows = []
    for kernel, median_s, alone_median_s in zip(model.kernels, in_model, alone_s):
        scop = kernel.scop
        rows.append(
            KernelProfile(
                name=scop.name,
                ops=tuple(scop.ops),
                output_shapes=tuple(tuple(int(d) for d in info.shape) for info in scop.arrays if info.role == "output"),
                median_s=median_s,
                flops=executed_flops(scop, kernel.recipe),
                recipe=kernel.recipe.describe(),
                peak_gflops=peak_gflops,
                alone_median_s=alone_median_s,
                **_convolution(scop),
            )
        )
    ratios = [call.call_s / call.steps_s for call in calls if call.steps_s > 0]
    return ModelProfile(
        tuple(rows),
        statistics.median(call.call_s for call in calls),
        int(model.threads),
        peak_gflops,
        statistics.median(ratios) if ratios else None,
        host_s,
    )
