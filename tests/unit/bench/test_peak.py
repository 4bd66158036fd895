"""The measured float32 peak: the generated FMA loop uses the target's vector lanes, and the
figure is positive and plausible on AVX-512 and on AVX2 code."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
import pytest

from polytf.bench.peak import accumulator_count, fma_peak_ir, measure_fp32_peak
from polytf.errors import PolytfError
from polytf.targets.cpu import CpuTarget

#: Short runs: the test checks plausibility, not the last percent.
QUICK = {"duration_s": 0.02, "repeats": 2}


@pytest.mark.parametrize("lanes, registers", [(16, 32), (8, 16), (4, 16)])
def test_the_loop_uses_the_lanes_and_three_quarters_of_the_registers(lanes, registers):
    accumulators = accumulator_count(registers)
    assert accumulators == registers * 3 // 4
    text = str(fma_peak_ir(lanes, accumulators))
    assert f"<{lanes} x float>" in text and f"llvm.fma.v{lanes}f32" in text
    assert len(re.findall(rf'call <{lanes} x float> @"?llvm\.fma\.v{lanes}f32', text)) == accumulators
    assert "store" in text  # the sum leaves the function: nothing is optimised away


def test_host_peak_is_positive_and_plausible():
    target = CpuTarget()
    peak = measure_fp32_peak(1, target, **QUICK)
    assert peak.vector_lanes == target.vector_lanes and peak.cpu_name == target.cpu_name
    assert peak.accumulators == target.vector_registers * 3 // 4 and peak.threads == 1
    assert peak.seconds > 0 and peak.iterations > 0
    assert peak.gflops == pytest.approx(peak.vector_lanes * 2 * peak.accumulators * peak.iterations / peak.seconds / 1e9)
    assert peak.gflops >= 1.0  # any FMA machine of the last decade does tens per core
    assert set(peak.to_dict()) >= {"gflops", "threads", "vector_lanes", "cpu_name", "seconds"}


def test_avx2_code_has_eight_lanes_and_runs_on_two_threads():
    features = llvm.get_host_cpu_features()
    if not (features.get("avx2") and features.get("fma")):
        pytest.skip("the host has no AVX2 with FMA")
    for name in list(features):
        if name.startswith(("avx512", "avx10", "amx")):
            features[name] = False
    target = CpuTarget(cpu_name="haswell", features=features.flatten())
    assert (target.vector_lanes, target.vector_registers) == (8, 16)
    peak = measure_fp32_peak(2, target, **QUICK)
    assert peak.vector_lanes == 8 and peak.accumulators == 12 and peak.threads == 2
    assert peak.gflops_per_thread >= 1.0


@pytest.mark.parametrize("arguments", [{"threads": 0}, {"threads": 1, "repeats": 0}, {"threads": 1, "duration_s": 0.0}])
def test_bad_settings_are_refused(arguments):
    with pytest.raises(PolytfError):
        measure_fp32_peak(**arguments)
