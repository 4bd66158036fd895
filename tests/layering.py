"""The import contracts of polytf, checked on the package as it is installed.

``schedules/``, ``autotune/`` and ``targets/`` live at the top of the repository but install
as ``polytf.schedules``, ``polytf.autotune`` and ``polytf.targets`` (pyproject's
``package-dir``). import-linter (through grimp) finds a package by walking its folder, so it
would not see them; :func:`installed_view` copies the sources into the layout a wheel has,
and :func:`check_contracts` runs import-linter there with the contracts of
``pyproject.toml`` (``[tool.importlinter]``: one layers contract over every subpackage of
``polytf`` and an acyclic-siblings contract: no import circle at any level).

Used by ``tests/test_import_layers.py`` and ``results/structure_metrics.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: the repository root
REPOSITORY = Path(__file__).resolve().parents[1]


def package_directories(root: Path = REPOSITORY) -> dict[str, Path]:
    """Package name -> the folder it installs from, from ``pyproject.toml``'s ``package-dir``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    settings = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {package: root / folder for package, folder in settings["package-dir"].items()}


def installed_view(root: Path, destination: Path) -> Path:
    """Copy the Python sources of the tree at ``root`` into ``destination`` in their installed
    layout (``destination/polytf/schedules/...``) with the tree's ``pyproject.toml``; returns
    ``destination``."""
    for package, folder in package_directories(root).items():
        target = destination.joinpath(*package.split("."))
        for source in folder.rglob("*.py"):
            relative = source.relative_to(folder)
            if "__pycache__" in relative.parts:
                continue
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, path)
    shutil.copyfile(root / "pyproject.toml", destination / "pyproject.toml")
    return destination


@dataclass(frozen=True)
class ContractReport:
    """What import-linter said about a tree.

    Attributes:
        kept: every contract holds.
        output: import-linter's report (the broken contracts name each offending import chain).
    """

    kept: bool
    output: str


def check_contracts(view: Path) -> ContractReport:
    """Run import-linter's ``lint-imports`` on an :func:`installed_view` (in a child process
    whose ``sys.path`` starts with the view, so that the installed polytf is not the one read)."""
    environment = {**os.environ, "PYTHONPATH": str(view)}
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]
    result = subprocess.run(
        [*command, str(view / "pyproject.toml"), "--no-cache"], cwd=view, env=environment, capture_output=True, text=True, timeout=600
    )
    return ContractReport(result.returncode == 0, result.stdout + result.stderr)


def import_graph(view: Path):
    """grimp's graph of ``polytf`` in an :func:`installed_view` (imports under
    ``if TYPE_CHECKING:`` left out, as the contracts leave them out)."""
    import grimp

    def polytf_modules() -> dict:
        return {name: module for name, module in sys.modules.items() if name == "polytf" or name.startswith("polytf.")}

    # grimp finds the package through the import system: the view's polytf stands in for the
    # installed one while it reads, then the installed modules come back, the same objects (a
    # second copy of a module would give the rest of the process a second copy of its classes)
    installed = polytf_modules()
    sys.path.insert(0, str(view))
    try:
        for name in installed:
            sys.modules.pop(name)
        return grimp.build_graph("polytf", exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(view))
        for name in polytf_modules():
            sys.modules.pop(name)
        sys.modules.update(installed)


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module of ``graph`` (every import
    circle, each once; Tarjan, iterative)."""
    modules = sorted(graph.modules)
    successors = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(successors[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components
