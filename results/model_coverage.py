"""Which models polytf compiles, and whether they match TensorFlow: writes results/model_coverage.md.

For each zoo model (batch 1, random weights from the zoo's seeded procedure): the node count of
the frozen GraphDef and after the graph passes, the number of kernels and of host nodes, the
seconds polytf.load took (default recipes, no fallback), and the largest difference from
TensorFlow running the same GraphDef relative to the output's largest magnitude, checked
against the end-to-end tolerance (rtol 1e-4, atol 1e-5 * max|reference| + 1e-6). The models
of ``TUNED_MODELS`` are then tuned for ``--tune-seconds`` (a time budget per model, fresh cache,
no fallback) and checked against TensorFlow again with their tuned kernels. Also: a SavedModel
export of the U-Net against its frozen GraphDef (bit for bit).

The report has one section per group of models (``GROUPS``), each with its own machine line:
``--group NAME`` reruns that group only and keeps the other sections of the existing report.

    python results/model_coverage.py [--group NAME] [--tune-seconds S] [MODEL ...]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

import polytf
from polytf.compiler.preparation import prepare_model
from polytf.model_zoo import run_graphdef_with_tensorflow, write_model
from polytf.model_zoo.language_models import zoo_inputs
from polytf.model_zoo.saved_models import SIGNATURE_OUTPUT, write_saved_model

MODELS = [
    "gpt2_block",
    "bert_encoder",
    "unet",
    "transformer_encoder",
    "mobilenet_v2",
    "resnet50",
    "inception_v3",
    "densenet121",
    "efficientnet_b0",
    "xception",
    "nasnet_mobile",
]
#: Models of layers Keras writes as function calls, space-to-batch convolutions and while loops.
NEXT_MODELS = ["regnetx_200mf", "convnext_tiny", "temporal_conv_net", "lstm20", "lstm200", "gru20", "bilstm20"]
#: Report sections: group name -> (heading, models).
GROUPS = {
    "applications": ("Keras applications, language models, U-Net", MODELS),
    "next": ("Grouped and dilated convolutions, function calls, recurrent loops", NEXT_MODELS),
}
#: Models tuned by this report (the Keras applications are tuned by ``polytf bench --suite models``).
TUNED_MODELS = {"gpt2_block", "bert_encoder", "unet", "transformer_encoder"}


def _error(model: polytf.CompiledModel, path: Path) -> tuple[float, bool]:
    """Largest difference from TensorFlow relative to the output's largest magnitude, and
    whether it is within the end-to-end tolerance."""
    feeds = zoo_inputs(model.input_types, seed=7)
    (output,) = model.output_names
    got = model(**feeds)[output]
    reference = run_graphdef_with_tensorflow(path, feeds, [output])[output]
    scale = float(np.max(np.abs(reference)))
    ok = np.allclose(got, reference, rtol=1e-4, atol=1e-5 * scale + 1e-6)
    return float(np.max(np.abs(got - reference))) / scale, bool(ok)


def row(name: str, directory: Path, tune_seconds: float) -> str:
    path = write_model(name, directory / f"{name}.pb")
    prepared = prepare_model(path, fallback=False)
    before, after = prepared.passes[0].nodes_before, prepared.passes[-1].nodes_after
    start = time.perf_counter()
    cache = directory / f"cache_{name}"
    model = polytf.load(path, cache_dir=cache, fallback=False)
    load_s = time.perf_counter() - start
    error, ok = _error(model, path)
    tuned = "not tuned here"
    if tune_seconds and name in TUNED_MODELS:
        report = polytf.tune(path, cache_dir=cache, time_budget_s=tune_seconds, fallback=False)
        tuned_model = polytf.load(path, cache_dir=cache, fallback=False)
        tuned_error, tuned_ok = _error(tuned_model, path)
        tuned = f"{tuned_error:.2e} ({len(tuned_model.tuned_kernels)} of {len(tuned_model.kernels)} kernels tuned, {report.new_trials} trials) {'yes' if tuned_ok else '**no**'}"
        ok = ok and tuned_ok
    return f"| {name} | {before} | {after} | {len(prepared.kernels)} | {len(prepared.host_nodes)} | {load_s:.1f} | {error:.2e} | {tuned} | {'yes' if ok else '**no**'} |"


def saved_model_row(directory: Path) -> str:
    frozen = write_model("unet", directory / "unet_frozen.pb")
    saved = write_saved_model("unet", directory / "unet_saved")
    from_frozen = polytf.load(frozen, cache_dir=directory / "cache", fallback=False)
    feeds = zoo_inputs(from_frozen.input_types, seed=3)
    a = from_frozen(**feeds)["Identity"]
    b = polytf.load(saved, cache_dir=directory / "cache", fallback=False)(**feeds)[SIGNATURE_OUTPUT]
    return f"- U-Net SavedModel (signature serving_default, output `{SIGNATURE_OUTPUT}`) vs its frozen GraphDef: bit-for-bit equal: {np.array_equal(a, b)}."


def _sections(text: str) -> dict[str, str]:
    """The existing report's sections by heading (``## ...`` up to the next one)."""
    sections: dict[str, str] = {}
    heading = None
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            heading = line[3:].strip()
            sections[heading] = ""
        if heading is not None:
            sections[heading] += line
    return sections


def section(group: str, names: list[str], tune_seconds: float) -> str:
    """One group's table, measured now."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    heading, _ = GROUPS[group]
    tuned = f"the models of `TUNED_MODELS` then tuned for {tune_seconds:g} s each" if tune_seconds else "no tuning"
    lines = [
        f"## {heading}",
        "",
        f"Machine: LLVM CPU `{llvm.get_host_cpu_name()}`, {platform.machine()}, Python {platform.python_version()}; "
        f"polytf {polytf.__version__}; default recipes, {tuned}; `fallback=False`, batch 1, random weights.",
        f"Written by `python results/model_coverage.py --group {group}{f' --tune-seconds {tune_seconds:g}' if tune_seconds else ''}`.",
        "",
        "| model | nodes in the GraphDef | nodes after the passes | kernels | host nodes | load s | untuned: max abs err / max abs ref vs TF "
        "| tuned: max abs err / max abs ref vs TF, within tolerance | within e2e tolerance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name in names:
            try:
                lines.append(row(name, directory, tune_seconds))
            except Exception as error:  # a report row, not a crash: say what failed
                lines.append(f"| {name} | failed: {type(error).__name__}: {str(error)[:200]} | | | | | | | |")
            print(lines[-1], flush=True)
        if "unet" in names:
            lines += ["", saved_model_row(directory)]
    return "\n".join(lines) + "\n\n"


def main(group: str, names: list[str], tune_seconds: float) -> None:
    out = Path(__file__).with_suffix(".md")
    sections = _sections(out.read_text()) if out.exists() else {}
    sections[GROUPS[group][0]] = section(group, names, tune_seconds)
    ordered = [sections.pop(heading) for heading, _ in GROUPS.values() if heading in sections] + list(sections.values())
    out.write_text("# Model coverage\n\n" + "\n".join(part.rstrip("\n") + "\n" for part in ordered))
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="zoo model names (default: all of the group's)")
    parser.add_argument(
        "--group", choices=sorted(GROUPS), default="applications", help="the report section to rewrite (default applications)"
    )
    parser.add_argument("--tune-seconds", type=float, default=0.0, help="time budget per model of TUNED_MODELS (0: no tuning)")
    arguments = parser.parse_args()
    main(arguments.group, arguments.models or GROUPS[arguments.group][1], arguments.tune_seconds)
