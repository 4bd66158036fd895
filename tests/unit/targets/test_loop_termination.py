"""Generated loops end: Softmax's row maximum (``M = max(M, x)``, ``llvm.maxnum``) under
reduction tiles and vector widths that give its innermost loop fewer iterations than the
vector width, or a count that is not a multiple of it.

LLVM 22 folded the tail of such a loop (fewer than 16 iterations) into masked vectors and
gave its ``maxnum`` reduction, which leaves the vector loop early on a NaN, a vector trip
count of zero: the vector loop then left only on a NaN and never returned (llvm-project
issue 209159); without a width hint LLVM aborted instead. :mod:`polytf.targets.llvm_codegen`
asks for vectorisation explicitly on these loops, which keeps a scalar remainder loop.

The recipes run in a child process with a time limit, so that a kernel that never returns
(or an abort inside LLVM) fails this test instead of hanging or killing the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

#: (rows, columns) of the Softmax input: 9 columns give constant trip counts of 3 and 9
#: (tiles 3 and 9), 45 columns constant trip counts of 3, 5 and 9 and a partial tile of 17.
SHAPES = ((5, 9), (3, 45))
REDUCTION_TILES = (3, 5, 9, 17)
#: 0 lets LLVM choose the width (no width hint).
VECTOR_WIDTHS = (0, 4, 8, 16)
#: Seconds for the whole grid (it takes about 5 s on a loaded two-core machine).
TIME_LIMIT_S = 60

_UNIT_TESTS = Path(__file__).resolve().parent.parent


def _run_grid() -> None:
    """Child process: compile and run every recipe of the grid, printing one JSON line per
    recipe before (``started``) and after (``done``) it."""
    sys.path[:0] = [str(_UNIT_TESTS), str(_UNIT_TESTS / "schedules")]
    from hand_built_graphs import graph_softmax, kernels_of
    from roundtrip import CHECK, INVALID, TARGET, roundtrip

    from polytf.errors import ScheduleError
    from polytf.poly.expression import Binary
    from polytf.runtime.cpu.kernel_bench import KernelBench
    from polytf.schedules.recipe import CpuRecipe

    for rows, columns in SHAPES:
        kernel = kernels_of(graph_softmax(rows, columns))[0]
        (maximum,) = [s.write.array for s in kernel.scop.statements if isinstance(s.value, Binary) and s.value.op == "max"]
        for tile in REDUCTION_TILES:
            for width in VECTOR_WIDTHS:
                case = {"rows": rows, "columns": columns, "tile": tile, "width": width}
                print(json.dumps({"started": case}), flush=True)
                recipe = CpuRecipe(
                    tile_sizes=(0,),
                    reduction_tile_sizes=(tile,),
                    point_order=("r0", "d0"),
                    unroll=1,
                    tile_order=(0,),
                    vector_width=width,
                )
                result = roundtrip(kernel, recipe, threads=2)
                outcome = {"verdict": result.verdict, "message": result.message, "error": result.error, "maximum_error": None}
                if result.verdict != INVALID:
                    try:
                        bench = KernelBench(kernel, seed=3)
                        bench.verify(TARGET.compile(kernel.scop, recipe), 1, CHECK)
                    except ScheduleError as error:
                        outcome["error"] = str(error)
                    else:
                        (logits,) = bench.inputs.values()
                        got = bench.arrays[bench.index[maximum]]
                        outcome["maximum_error"] = float(np.max(np.abs(got - logits.max(axis=-1))))
                print(json.dumps({"done": case, **outcome}), flush=True)


def test_softmax_row_maximum_loops_end_and_are_correct():
    try:
        child = subprocess.run(
            [sys.executable, __file__], capture_output=True, text=True, timeout=TIME_LIMIT_S, cwd=_UNIT_TESTS, check=False
        )
        output, returncode = child.stdout, child.returncode
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
        returncode = None
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    started = [line["started"] for line in lines if "started" in line]
    done = [line for line in lines if "done" in line]
    if returncode is None:
        raise AssertionError(
            f"no result after {TIME_LIMIT_S} s; the kernel of {started[-1] if started else 'the first recipe'} never returned"
        )
    assert returncode == 0, (
        f"the child process failed (exit status {returncode}) while running {started[-1] if started else '?'}:\n{child.stderr[-3000:]}"
    )
    assert len(done) == len(SHAPES) * len(REDUCTION_TILES) * len(VECTOR_WIDTHS)
    for line in done:
        case = line["done"]
        if line["verdict"] == "invalid":
            # The validator refuses only a reduction tile larger than the row.
            assert case["tile"] > case["columns"], f"{case}: {line['message']}"
            continue
        assert line["verdict"] == "legal", f"{case}: {line['message']}"
        assert line["error"] is None, f"{case}: {line['error']}"
        assert line["maximum_error"] == 0.0, f"{case}: row maximum off by {line['maximum_error']}"


if __name__ == "__main__":
    _run_grid()
