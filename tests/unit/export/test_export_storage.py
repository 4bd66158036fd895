"""``polytf compile --storage``: records tuned into a PostgreSQL database reach an exported
object built on a machine whose cache directory is empty."""

from __future__ import annotations

from graphdef_builders import write_matmul_graphdef

import polytf


def test_compile_uses_the_records_of_a_database(postgresql_url, tmp_path):
    model = tmp_path / "dense.pb"
    write_matmul_graphdef(model, 24, 40, 16)
    polytf.tune(model, trials=2, cache_dir=tmp_path / "tuning machine", threads=1, storage=postgresql_url)
    fresh = tmp_path / "another machine"
    exported = polytf.compile(model, tmp_path / "out", threads=1, cache_dir=fresh, storage=postgresql_url, shared_library=False)
    assert exported.tuned_kernels == exported.kernels == ("k0_mm",)
    assert not fresh.exists()  # nothing was read from or written to a cache directory
    untuned = polytf.compile(model, tmp_path / "out", threads=1, cache_dir=fresh, storage="", shared_library=False)
    assert untuned.tuned_kernels == ()
