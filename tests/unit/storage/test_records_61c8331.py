"""Tuning records written by polytf at commit 61c8331 still load.

``records_61c8331/`` holds record files exactly as that version wrote them (only the
``model`` path was replaced by a relative one):

* ``cpu/``: ``polytf tune mlp.pb --trials 3`` and ``polytf tune conv_bias_relu.pb --trials 4``
  (zoo models, batch 1) on a 2-core ``znver4`` machine, 2 threads: flat recipes with
  ``"gpu": false``, register tiles, packing, zero-padding and im2col;
* ``cuda/``: ``POLYTF_CUDA_EMULATION=1 polytf tune mlp.pb --target cuda --trials 3``: flat
  recipes with ``"gpu": true``, thread tiles and shared memory, keyed by the offline CUDA
  device.

A record is only used for the exact key it was tuned under, and a CPU record's key names the
CPU it was tuned on. So that the CPU records load on any machine, the test gives them this
machine's target fingerprint and this polytf's versions (and so a new digest and file name),
as if 61c8331 had written them here; everything else — the Scop fingerprint, the thread
count, the code knobs, the recipe and every other field — is as written then. Loading a
model must then find every kernel's record (``model.tuned_kernels``) without a warning, which
also shows that the restructuring kept Scop fingerprints and code knobs. One knob changed on
purpose since: ``codegen.fast_math`` became opt-in (TensorFlow's NaN and infinity semantics by
default), so the records are re-keyed under today's default too, as if tuned with it; and a
Relu's ``max(x, 0)`` became the NaN-propagating ``maximum``, a new Scop fingerprint, so the
kernels holding a Relu are no longer found: every other kernel must be (:func:`_unchanged`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import polytf
from polytf.config import CodegenConfig
from polytf.errors import CacheWarning
from polytf.storage.cache_key import CacheKey, current_versions, stored_key_problem
from polytf.storage.tuning_record import parse_record_text
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import DEFAULT_COMPUTE_CAPABILITY, CudaTarget

RECORDS = Path(__file__).with_name("records_61c8331")
#: kernels per model in the records (identical kernels would share one record)
MLP_KERNELS = 4


def _records(kind: str) -> list[Path]:
    return sorted((RECORDS / kind).glob("*.json"))


def _unchanged(model) -> int:
    """Kernels of ``model`` whose statements are as at 61c8331: those without a Relu."""
    return sum(1 for kernel in model.kernels if all(op != "Relu" for _, op in kernel.scop.ops))


def _rekeyed(source: Path, destination: Path, target: dict) -> str:
    """Write ``source`` under ``destination/records`` with its key's target and versions
    replaced; returns the new digest."""
    record = json.loads(source.read_text())
    stored = record["key"]
    knobs = {**stored["knobs"], "codegen": {**stored["knobs"]["codegen"], "fast_math": CodegenConfig().fast_math}}
    key = CacheKey(stored["scop_fingerprint"], target, stored["threads"], knobs, current_versions())
    record["key"] = key.as_dict()
    folder = destination / "records"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key.digest()}.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    return key.digest()


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_every_record_of_61c8331_parses_with_a_consistent_key(kind):
    files = _records(kind)
    assert len(files) == (MLP_KERNELS + 1 if kind == "cpu" else MLP_KERNELS)
    for path in files:
        record = parse_record_text(path.read_bytes())
        assert stored_key_problem(record.key, path.stem) is None
        recipe = record.schedule_recipe
        assert json.loads(path.read_text())["recipe"]["gpu"] is (kind == "cuda")
        assert list(recipe.tile_sizes) == json.loads(path.read_text())["recipe"]["tile_sizes"]


def test_cpu_records_of_61c8331_load_for_every_kernel(frozen_model, tmp_path):
    mlp, conv = frozen_model("mlp"), frozen_model("conv_bias_relu")
    target = CpuTarget().fingerprint()
    for path in _records("cpu"):
        _rekeyed(path, tmp_path, target)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        tuned = polytf.load(mlp, cache_dir=tmp_path, threads=2)
        tuned_conv = polytf.load(conv, cache_dir=tmp_path, threads=2)
    assert len(tuned.kernels) == MLP_KERNELS and 0 < _unchanged(tuned) < MLP_KERNELS
    assert len(tuned.tuned_kernels) == _unchanged(tuned)
    assert len(tuned_conv.tuned_kernels) == _unchanged(tuned_conv)
    empty = tmp_path / "empty"
    for model, path in ((tuned, mlp), (tuned_conv, conv)):
        (name, shape), *_ = ((name, tuple(t.shape)) for name, t in model.input_types.items())
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        untuned = polytf.load(path, cache_dir=empty, threads=2)
        assert untuned.tuned_kernels == ()
        (output,) = model(**{name: x}).values()
        (expected,) = untuned(**{name: x}).values()
        np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


def test_cuda_records_of_61c8331_load_on_the_emulated_device(frozen_model, tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTF_CUDA_EMULATION", "1")
    mlp = frozen_model("mlp")
    target = CudaTarget(compute_capability=DEFAULT_COMPUTE_CAPABILITY).fingerprint()
    for path in _records("cuda"):
        _rekeyed(path, tmp_path, target)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        model = polytf.load(mlp, cache_dir=tmp_path, target="cuda")
    assert len(model.tuned_kernels) == _unchanged(model) > 0
    x = np.random.default_rng(1).standard_normal((1, 784)).astype(np.float32)
    reference = polytf.load(mlp, cache_dir=tmp_path / "empty", threads=1)
    (output,) = model(input=x).values()
    (expected,) = reference(input=x).values()
    np.testing.assert_allclose(np.asarray(output), expected, rtol=1e-4, atol=1e-6)
