"""Which models polytf compiles, and whether they match TensorFlow: writes results/model_coverage.md.

For each zoo model (batch 1, random weights from the zoo's seeded procedure): the node count of
the frozen GraphDef and after the graph passes, the number of kernels and of host nodes, the
seconds polytf.load took (default recipes, no fallback), and the largest difference from
TensorFlow running the same GraphDef relative to the output's largest magnitude, checked
against the end-to-end tolerance (rtol 1e-4, atol 1e-5 * max|reference| + 1e-6). Also: a
SavedModel export of the U-Net against its frozen GraphDef (bit for bit).

    python results/model_coverage.py [MODEL ...]
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import polytf
from polytf.model_zoo import run_graphdef_with_tensorflow, write_model
from polytf.model_zoo.language_models import zoo_inputs
from polytf.model_zoo.saved_models import SIGNATURE_OUTPUT, write_saved_model
from polytf.runtime.model_builder import prepare_model

MODELS = ["gpt2_block", "bert_encoder", "unet", "transformer_encoder", "mobilenet_v2", "resnet50", "inception_v3",
          "densenet121", "efficientnet_b0", "xception", "nasnet_mobile"]


def row(name: str, directory: Path) -> str:
    path = write_model(name, directory / f"{name}.pb")
    prepared = prepare_model(path, fallback=False)
    before, after = prepared.passes[0].nodes_before, prepared.passes[-1].nodes_after
    start = time.perf_counter()
    model = polytf.load(path, cache_dir=directory / "cache", fallback=False)
    load_s = time.perf_counter() - start
    feeds = zoo_inputs(model.input_types, seed=7)
    (output,) = model.output_names
    got = model(**feeds)[output]
    reference = run_graphdef_with_tensorflow(path, feeds, [output])[output]
    scale = float(np.max(np.abs(reference)))
    error = float(np.max(np.abs(got - reference)))
    ok = np.allclose(got, reference, rtol=1e-4, atol=1e-5 * scale + 1e-6)
    return f"| {name} | {before} | {after} | {len(prepared.kernels)} | {len(prepared.host_nodes)} | {load_s:.1f} | {error / scale:.2e} | {'yes' if ok else '**no**'} |"


def saved_model_row(directory: Path) -> str:
    frozen = write_model("unet", directory / "unet_frozen.pb")
    saved = write_saved_model("unet", directory / "unet_saved")
    from_frozen = polytf.load(frozen, cache_dir=directory / "cache", fallback=False)
    feeds = zoo_inputs(from_frozen.input_types, seed=3)
    a = from_frozen(**feeds)["Identity"]
    b = polytf.load(saved, cache_dir=directory / "cache", fallback=False)(**feeds)[SIGNATURE_OUTPUT]
    return f"- U-Net SavedModel (signature serving_default, output `{SIGNATURE_OUTPUT}`) vs its frozen GraphDef: bit-for-bit equal: {np.array_equal(a, b)}."


def main(names: list[str]) -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    lines = [
        "# Model coverage",
        "",
        f"Machine: LLVM CPU `{llvm.get_host_cpu_name()}`, {platform.machine()}, Python {platform.python_version()}; "
        f"polytf {polytf.__version__}; default recipes (no tuning), `fallback=False`, batch 1, random weights.",
        "Written by `python results/model_coverage.py`.",
        "",
        "| model | nodes in the GraphDef | nodes after the passes | kernels | host nodes | load s | max abs err / max abs ref vs TF | within e2e tolerance |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name in names:
            try:
                lines.append(row(name, directory))
            except Exception as error:  # a report row, not a crash: say what failed
                lines.append(f"| {name} | failed: {type(error).__name__}: {str(error)[:200]} | | | | | | |")
            print(lines[-1], flush=True)
        lines += ["", saved_model_row(directory)]
    out = Path(__file__).with_suffix(".md")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:] or MODELS)
