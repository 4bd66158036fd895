"""``polytf show MODEL``: a model's kernels, graph passes, profile, or one kernel's code.

- without options: the kernels (and host steps) in execution order;
- ``--passes``: what each graph pass changed (node and edge counts), round by round;
- ``--kernel NAME``: its Scop, recipe, schedule tree, loop AST, GPU launches (``--target
  cuda``), optimised LLVM IR (``--llvm``) and assembly (``--assembly``); the recipe is
  ``--recipe FILE``'s, else the tuning record's, else the default one
  (:func:`polytf.compiler.kernel_compilation.compile_with_record`, as a model is built), the
  kernel emitted as a model runs it (weights packed ahead of time);
- ``--profile``: the model as ``polytf.load`` builds it, timed kernel by kernel on seeded
  random normal inputs, against the float32 peak measured for its threads.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from rich.table import Table

from polytf.bench.memory_bandwidth import measure_memory_bandwidth
from polytf.bench.peak import measure_fp32_peak
from polytf.cli.console import print_host_nodes, stdout
from polytf.cli.model_options import bucket_sizes, build_options, model_source
from polytf.compiler.backends import CUDA_THREADS
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.kernel_compilation import compile_with_record, constant_arrays
from polytf.compiler.loading import load_model
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.compiler.recorded_recipes import cache_key, reading_records, recorded_recipe, stored_recipes
from polytf.compiler.sliced_kernels import kernel_slicing
from polytf.compiler.symbolic_inputs import sized_sources, slicing_base_source, source_signature
from polytf.config import CodegenConfig
from polytf.graph.size_symbols import sizes_text
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.passes.pipeline import summary
from polytf.runtime.cpu.profile import profile_model
from polytf.runtime.machine_load import check_machine_load
from polytf.runtime.sample_inputs import sample_inputs
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.compile_driver import EmittedKernel, emit_kernel
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import CudaTarget

__all__ = ["execute", "print_pass_reports"]


def execute(arguments: argparse.Namespace) -> int:
    """Run ``polytf show``; returns the exit status.

    Raises:
        SystemExit: ``--llvm``, ``--assembly``, ``--recipe`` or ``--arch`` without ``--kernel``
            (they show one kernel), or a ``--recipe`` file that does not exist.
    """
    if not arguments.kernel:
        given = [flag for flag, value in (("--llvm", arguments.llvm), ("--assembly", arguments.assembly), ("--recipe", arguments.recipe), ("--arch", arguments.arch)) if value]
        if given:
            raise SystemExit(f"error: {' and '.join(given)} show{'s' if len(given) == 1 else ''} one kernel: add --kernel NAME (polytf show MODEL lists the kernels)")
    if arguments.recipe and not Path(arguments.recipe).is_file():
        raise SystemExit(f"error: --recipe {arguments.recipe}: no such file (a JSON recipe, as polytf cache list's records hold)")
    source, options = model_source(arguments), build_options(arguments)
    signature = source_signature(source)  # the model file read once for every bucket
    sized = sized_sources(source, bucket_sizes(arguments.buckets), signature)
    if arguments.kernel or arguments.profile:
        sized = sized[:1]  # one kernel, or one profile: at the first bucket's sizes
    for sizes, sized_source in sized:
        if sizes:
            stdout.print(f"at size bucket {sizes_text(sizes)} (the model's size symbols; other sizes: --buckets)", markup=False, highlight=False)
        base = slicing_base_source(source, sizes, signature) if sizes and not (arguments.kernel or arguments.profile or arguments.passes) else None
        show_sized(arguments, sized_source, options, base)
    return 0


def show_sized(arguments: argparse.Namespace, source: ModelSource, options: BuildOptions, base: tuple[dict[str, int], ModelSource] | None = None) -> int:
    """``polytf show`` of ``source``, every size given; ``base``: the sizes (and the source at
    them) whose kernels this size's run on slices (:mod:`polytf.compiler.sliced_kernels`)."""
    if arguments.profile:
        return show_profile(arguments, source, options)
    prepared = prepare_model(source, fallback=options.fallback)
    if arguments.passes:
        print_pass_reports(arguments.model, prepared.passes)
        print_host_nodes(prepared.host_nodes)
    elif not arguments.kernel:
        tuned = _tuned_kernels(prepared, options, arguments)
        show_kernels(arguments.model, prepared, tuned, _sliced_kernels(prepared, tuned, base, options))
    else:
        show_kernel(arguments, prepared, options)
    return 0


def _sliced_kernels(prepared: PreparedModel, tuned: frozenset[str], base: tuple[dict[str, int], ModelSource] | None, options: BuildOptions) -> dict[str, str]:
    """Kernel name -> how it runs on slices of the kernel at ``base``'s sizes (``"3 slices of
    N=1's"``), for each kernel of ``prepared`` without a record that a model built at these
    sizes runs so (:func:`polytf.compiler.sliced_kernels.kernel_slicing`)."""
    if base is None:
        return {}
    sizes, source = base
    base_scops = {kernel.scop.name: kernel.scop for kernel in prepare_model(source, fallback=options.fallback).kernels}
    marks = {}
    for kernel in prepared.kernels:
        name = kernel.scop.name
        slicing = kernel_slicing(kernel.scop, base_scops[name]) if name in base_scops and name not in tuned else None
        if slicing is not None:
            marks[name] = f"{slicing.count} slices of {sizes_text(sizes)}'s"
    return marks


def _tuned_kernels(prepared: PreparedModel, options: BuildOptions, arguments: argparse.Namespace) -> frozenset[str]:
    """The kernels of ``prepared`` with a tuning record for the target and threads of the
    arguments (at these shapes: a size bucket's own records)."""
    target, threads = shown_target(arguments, options)
    return frozenset(stored_recipes(prepared, options, target, threads, CodegenConfig()))


def show_kernels(model: str, prepared: PreparedModel, tuned: frozenset[str] = frozenset(), sliced: Mapping[str, str] | None = None) -> None:
    """The model's kernels and host steps, in execution order; those in ``tuned`` (with a
    tuning record) marked, and those in ``sliced`` (a dynamic model's kernels that run as a
    smaller batch's kernel, slice by slice) with how."""
    sliced = sliced or {}
    host = f", {len(prepared.host_nodes)} on the host" if prepared.host_nodes else ""
    records = f", {len(tuned)} tuned" if tuned else ", none tuned"
    slices = f", {len(sliced)} run as a smaller batch's kernels (no compile)" if sliced else ""
    computations = len({kernel.scop.fingerprint() for kernel in prepared.kernels})
    distinct = f" ({computations} distinct: the others run the code of an identical one)" if computations < len(prepared.kernels) else ""
    stdout.print(f"{model}: {len(prepared.graph.nodes)} nodes, {len(prepared.kernels)} kernels{distinct}{records}{slices}{host}")
    stdout.print(f"  graph passes: {summary(prepared.passes)} (per pass: --passes)")
    kernels = iter(prepared.kernels)
    for group in prepared.groups:
        if group.on_host:
            node = prepared.graph.nodes[group.nodes[0]]
            stdout.print(f"  {group.name}: {node.name} ({node.op}) on the host")
        else:
            kernel = next(kernels)
            mark = " [tuned]" if kernel.scop.name in tuned else f" [{sliced[kernel.scop.name]}]" if kernel.scop.name in sliced else ""
            stdout.print(f"  {kernel.scop.name}{mark}: {' + '.join(f'{n} ({op})' for n, op in kernel.scop.ops)}", markup=False, highlight=False)
    print_host_nodes(prepared.host_nodes)
    stdout.print("show one with --kernel NAME")


def show_kernel(arguments: argparse.Namespace, prepared: PreparedModel, options: BuildOptions) -> None:
    """One kernel's Scop, recipe, schedule tree, loop AST, launches and code (module docstring).

    Raises:
        SystemExit: no kernel of that name.
    """
    matches = [k for k in prepared.kernels if k.scop.name == arguments.kernel]
    if not matches:
        raise SystemExit(f"error: no kernel {arguments.kernel!r}; kernels: {', '.join(k.scop.name for k in prepared.kernels)}")
    kernel = matches[0]
    recipe, emitted, target = emitted_kernel(arguments, kernel, options)
    scheduled = emitted.scheduled
    sections = [("scop", str(kernel.scop)), ("recipe", recipe.to_json())]
    if scheduled.scop is not kernel.scop:
        sections.append(("scop after data-layout transformations (packing, padding, im2col)", str(scheduled.scop)))
    sections += [
        ("schedule tree", str(scheduled.schedule)),
        ("loop AST", emitted.ast.to_C_str()),
    ]
    if scheduled.launch is not None:
        launches = [*scheduled.launch.prologue, scheduled.launch]
        sections.append(
            (
                "launches",
                "\n".join(
                    f"{'copy' if i < len(launches) - 1 else 'kernel'}: grid {list(launch.grid)}, block {list(launch.block)}, "
                    f"{launch.shared_memory_bytes} bytes of shared memory ({', '.join(launch.shared_arrays) or 'none'}), "
                    f"registers: {', '.join(name for name, _ in launch.private_arrays) or 'none'}"
                    for i, launch in enumerate(launches)
                ),
            )
        )
    if arguments.llvm:
        sections.append(("LLVM IR", str(target.optimise(emitted.code, kernel.scop.name))))
    if arguments.assembly:
        sections.append(("assembly", target.assembly_of(emitted.code, kernel.scop.name)))
    for title, text in sections:
        stdout.rule(title)
        stdout.print(text, markup=False, highlight=False)


def shown_target(arguments: argparse.Namespace, options: BuildOptions) -> tuple[CpuTarget | CudaTarget, int]:
    """The target ``--target`` names and its thread count: this CPU and ``--threads``, or a
    CUDA GPU (``--arch``, else sm_80 without a GPU: code only, no device needed)."""
    if options.target == "cuda":
        return (CudaTarget(compute_capability=arguments.arch) if arguments.arch else CudaTarget()), CUDA_THREADS
    return CpuTarget(), options.thread_count()


def emitted_kernel(arguments: argparse.Namespace, kernel: LoweredKernel, options: BuildOptions) -> tuple[ScheduleRecipe, EmittedKernel, CpuTarget | CudaTarget]:
    """The kernel's recipe (``--recipe``, else its record's, else its default) and the kernel
    scheduled and emitted with it (once, for every section), for the target of ``--target``:
    with ``cuda`` code only, no device needed (PTX for ``--arch``, else sm_80 without a GPU)."""
    target, threads = shown_target(arguments, options)
    if arguments.recipe:
        recipe = ScheduleRecipe.from_json(Path(arguments.recipe).read_text())
        return recipe, emit_kernel(kernel.scop, recipe, target, constant_arrays(kernel)), target
    with reading_records(options, "read a tuning record from") as records:
        cached = recorded_recipe(records, cache_key(kernel, target, threads, CodegenConfig()))
    compilation = compile_with_record(kernel, cached, target, threads, lambda scop, recipe, constants: emit_kernel(scop, recipe, target, constants))
    return compilation.recipe, compilation.code, target


def show_profile(arguments: argparse.Namespace, source: ModelSource, options: BuildOptions) -> int:
    """``polytf show MODEL --profile`` (module docstring; on the CPU whatever ``--target`` says)."""
    model = load_model(source, replace(options, target="cpu"))
    inputs = sample_inputs(model.input_types, seed=0)
    check_machine_load(model.threads, "profiling")
    peak = measure_fp32_peak(model.threads)
    profile = profile_model(model, inputs, repeats=arguments.repeats, peak_gflops=peak.gflops)
    tuned = len(getattr(model, "tuned_kernels", ()))
    stdout.print(f"{arguments.model}: {len(model.kernels)} kernels ({tuned} from tuning records), {model.threads} threads", highlight=False)
    stdout.print(
        f"float32 peak: {peak.gflops:.1f} GFLOP/s on {peak.threads} threads (FMA loop on <{peak.vector_lanes} x float>, LLVM CPU {peak.cpu_name})",
        highlight=False,
    )
    stdout.print(f"memory bandwidth: {measure_memory_bandwidth(model.threads).describe()}", highlight=False)
    stdout.print(profile.table())
    stdout.print(profile.totals(), highlight=False)
    for line in profile.impossible():
        stdout.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


def print_pass_reports(model: str, reports) -> None:
    """One table row per graph pass run (node and edge counts before and after), then the totals."""
    table = Table(title=f"graph passes of {model}")
    for column in ("round", "pass", "nodes before", "nodes after", "edges before", "edges after", "rewrites"):
        table.add_column(column, justify="left" if column in ("pass", "rewrites") else "right")
    for report in reports:
        table.add_row(
            str(report.round),
            report.name,
            str(report.nodes_before),
            str(report.nodes_after),
            str(report.edges_before),
            str(report.edges_after),
            report.detail or ("-" if not report.changed else str(report.rewrites)),
        )
    total = summary(tuple(reports))
    table.add_section()
    table.add_row("", "total", str(total.nodes_before), str(total.nodes_after), str(total.edges_before), str(total.edges_after), f"{total.rewrites} rewrites")
    stdout.print(table)
    removed = total.nodes_before - total.nodes_after
    share = removed / total.nodes_before if total.nodes_before else 0.0
    stdout.print(
        f"total: {total.nodes_before} -> {total.nodes_after} nodes ({removed} removed, {share:.0%}), "
        f"{total.edges_before} -> {total.edges_after} edges, {len(reports)} pass runs in {total.round} round{'s' if total.round > 1 else ''}",
        markup=False,
        highlight=False,
    )
