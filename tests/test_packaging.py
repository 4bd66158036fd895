"""The package-dir mapping stays honest: the wheel holds every subpackage of the tree
under ``polytf.``, and no module imports the top-level folders by their bare names."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"polytf": "polytf", "schedules": "polytf/schedules", "autotune": "polytf/autotune", "targets": "polytf/targets"}


def tree_packages() -> set[str]:
    packages = set()
    for folder, installed in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            packages.add(installed if str(relative) == "." else f"{installed}/{relative.as_posix()}")
    return packages


def test_wheel_contains_every_subpackage(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("polytf-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in sorted(tree_packages()):
        assert f"{package}/__init__.py" in names, f"{package} missing from the wheel"
    assert not any(n.startswith(("schedules/", "autotune/", "targets/")) for n in names), "top-level folders leaked into the wheel"


def test_no_bare_imports_of_the_mapped_folders():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff not installed (pip install 'polytf[test]')")
    result = subprocess.run([ruff, "check", "--select", "TID251", "--no-cache", str(ROOT / "polytf"), str(ROOT / "schedules"), str(ROOT / "autotune"), str(ROOT / "targets"), str(ROOT / "tests")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_polytf_needs_no_tensorflow():
    code = "import sys, polytf; polytf.load; assert 'tensorflow' not in sys.modules and 'cupy' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
