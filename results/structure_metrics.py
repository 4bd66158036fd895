"""How polytf's code is structured, measured the same way on any checkout: prints a Markdown table.

    python results/structure_metrics.py                       # this checkout
    python results/structure_metrics.py --root OLD --python OLD/.venv/bin/python --layers 61c8331 --json old.json
    python results/structure_metrics.py --baseline old.json   # this checkout beside the other

For the tree at ``--root`` (its sources copied into their installed layout, as
``tests/layering.py`` does for the import contracts):

* **import circles**: strongly connected components of more than one module in grimp's import
  graph of ``polytf`` (function-local imports included, ``if TYPE_CHECKING:`` imports left out);
* **imports up a layer**: direct imports from a module to one of a higher layer. The layers
  are those of ``pyproject.toml``'s import-linter contract, or with ``--layers 61c8331`` the
  layer table of shared/DESIGN.md as the tree at 61c8331 could follow it (one ``runtime``
  layer above the targets);
* **op-name literals outside ops/**: string constants (docstrings aside) equal to a
  TensorFlow op type of polytf's op table, in package modules outside ``polytf/ops/``;
* **the path from ``polytf.load`` to machine code**: ``polytf.load`` of the zoo MLP (batch 1,
  empty cache) run under a profiler hook in ``--python``'s interpreter (import-time code,
  comprehensions and lambdas left out). Read as a newcomer reads it: every polytf function
  once, in the order first called (a depth-first read of the call tree); a *reading move*
  is a step from a function to the next one in another folder (and, a module at a time,
  from a file to the next file opened). Also every distinct call edge between two polytf
  functions: a *call between folders* has caller and callee in different folders, a *call
  into a higher layer* a callee in a higher layer than its caller;
* module sizes (lines) and function-local ``import`` statements.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from layering import REPOSITORY, import_cycles, import_graph, installed_view  # noqa: E402

#: The layers of shared/DESIGN.md as a tree at 61c8331 could follow them, lowest first.
LAYERS_61C8331 = (
    ("errors", "config", "durations"),
    ("graph",),
    ("frontend",),
    ("poly",),
    ("ops",),
    ("graph.passes",),
    ("schedules",),
    ("targets",),
    ("runtime",),
    ("autotune",),
    ("export",),
    ("model_zoo",),
    ("bench",),
    ("cli",),
)


def contract_layers(root: Path) -> tuple[tuple[str, ...], ...]:
    """The layers of ``root``'s import-linter layers contract, lowest first."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    settings = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in settings["contracts"] if c["type"] == "layers")
    return tuple(tuple(part.strip() for part in layer.replace(":", "|").split("|")) for layer in reversed(contract["layers"]))


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The rank of the layer holding ``module`` (longest matching package), None for the facade."""
    best, rank = "", None
    for index, layer in enumerate(layers):
        for name in layer:
            full = f"polytf.{name}"
            if (module == full or module.startswith(full + ".")) and len(full) > len(best):
                best, rank = full, index
    return rank


def upward_imports(graph, layers) -> list[tuple[str, str]]:
    result = []
    for importer in sorted(graph.modules):
        low = layer_of(importer, layers)
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            high = layer_of(imported, layers)
            if low is not None and high is not None and high > low:
                result.append((importer, imported))
    return result


def op_names(python: str) -> set[str]:
    code = (
        "import json\ntry:\n    from polytf.ops import supported_ops\nexcept ImportError:  # before the op table\n"
        "    from polytf.ops.registry import supported_ops\nprint(json.dumps(list(supported_ops())))"
    )
    return set(json.loads(subprocess.check_output([python, "-c", code], text=True, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir())))


def source_facts(view: Path, ops: set[str]) -> dict:
    """Op-name literals outside ops/, module sizes and function-local imports of the view."""
    literals: dict[str, int] = {}
    sizes: dict[str, int] = {}
    local_imports = 0
    for path in sorted((view / "polytf").rglob("*.py")):
        relative = path.relative_to(view).as_posix()
        text = path.read_text()
        sizes[relative] = text.count("\n")
        tree = ast.parse(text)
        documentation = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local_imports += sum(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(function))
        if relative.startswith("polytf/ops/"):
            continue
        count = sum(
            isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ops and id(node) not in documentation
            for node in ast.walk(tree)
        )
        if count:
            literals[relative] = count
    return {"literals": literals, "sizes": sizes, "local_imports": local_imports}


TRACE = r"""
import json, os, sys, tempfile, threading
from pathlib import Path
import polytf
from polytf.model_zoo import write_model
view = sys.argv[1]
directory = tempfile.mkdtemp()
path = write_model("mlp", Path(directory) / "mlp.pb")
roots = [os.path.dirname(polytf.__file__)]
import polytf.schedules, polytf.autotune, polytf.targets
roots += [os.path.dirname(m.__file__) for m in (polytf.schedules, polytf.autotune, polytf.targets)]
names = {"polytf": roots[0], "polytf/schedules": roots[1], "polytf/autotune": roots[2], "polytf/targets": roots[3]}
def module_of(filename):
    for prefix, root in sorted(names.items(), key=lambda item: -len(item[1])):
        if filename.startswith(root + os.sep):
            return prefix + "/" + os.path.relpath(filename, root)
    return None
edges = {}
first_calls = {}
def profile(frame, event, argument):
    if event != "call":
        return
    callee = module_of(frame.f_code.co_filename)
    if callee is None or frame.f_code.co_name == "<module>":
        return
    caller = frame.f_back
    while caller is not None and module_of(caller.f_code.co_filename) is None:
        caller = caller.f_back
    if caller is None or caller.f_code.co_name == "<module>":
        return  # import-time code (class bodies, registrations) is not the path
    if not frame.f_code.co_name.startswith("<"):  # comprehensions and lambdas are read with their function
        first_calls.setdefault((callee, frame.f_code.co_name), len(first_calls))
    key = (module_of(caller.f_code.co_filename), caller.f_code.co_name, callee, frame.f_code.co_name)
    edges.setdefault(key, len(edges))
os.environ["POLYTF_CACHE_DIR"] = tempfile.mkdtemp()
threading.setprofile(profile)
sys.setprofile(profile)
polytf.load(str(path))
sys.setprofile(None)
threading.setprofile(None)
print(json.dumps([sorted(edges, key=edges.get), sorted(first_calls, key=first_calls.get)]))
"""


def path_moves(python: str, layers) -> dict:
    """The call edges of ``polytf.load`` (see the module docstring), run in ``python``."""
    # run outside any checkout: ``python -c`` puts the working directory first on sys.path
    output = subprocess.check_output([python, "-c", TRACE, "."], text=True, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    edges, first_calls = json.loads(output.strip().splitlines()[-1])

    def module(file: str) -> str:
        return file[: -len(".py")].replace("/__init__", "").replace("/", ".")

    moves = up = 0
    examples = []
    for caller_file, caller, callee_file, callee in edges:
        caller_folder, callee_folder = caller_file.rsplit("/", 1)[0], callee_file.rsplit("/", 1)[0]
        if caller_folder == callee_folder:
            continue
        moves += 1
        low, high = layer_of(module(caller_file), layers), layer_of(module(callee_file), layers)
        if low is not None and high is not None and high > low:
            up += 1
            examples.append(f"{caller_file}:{caller} -> {callee_file}:{callee}")
    # reading order: each function once, in the order first called (a depth-first read of the call tree)
    folders = [file.rsplit("/", 1)[0] for file, _ in first_calls]
    reading = [(a, b) for a, b in zip(folders, folders[1:]) if a != b]
    reading_up = sum(
        1 for (a_file, _), (b_file, _) in zip(first_calls, first_calls[1:])
        if a_file.rsplit("/", 1)[0] != b_file.rsplit("/", 1)[0]
        and (layer_of(module(b_file), layers) or 0) > (layer_of(module(a_file), layers) or 0)
    )
    # the same reading, a module at a time: each file opened once, in the order first entered
    files = list(dict.fromkeys(file for file, _ in first_calls))
    file_folders = [file.rsplit("/", 1)[0] for file in files]
    file_moves = sum(1 for a, b in zip(file_folders, file_folders[1:]) if a != b)
    return {
        "edges": len(edges), "moves": moves, "up": up, "up_examples": examples, "functions": len(first_calls),
        "reading_moves": len(reading), "reading_up": reading_up, "modules": len(files), "module_moves": file_moves,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPOSITORY, help="the checkout to measure (default: this one)")
    parser.add_argument("--python", default=sys.executable, help="an interpreter where that checkout's polytf is installed")
    parser.add_argument("--layers", choices=("contract", "61c8331"), default="contract", help="the layer table to measure against")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--baseline", type=Path, help="the --json of another run, printed beside this one")
    args = parser.parse_args(argv)
    layers = LAYERS_61C8331 if args.layers == "61c8331" else contract_layers(args.root)
    with tempfile.TemporaryDirectory() as directory:
        view = installed_view(args.root.resolve(), Path(directory))
        graph = import_graph(view)
        cycles = import_cycles(graph)
        upward = upward_imports(graph, layers)
        facts = source_facts(view, op_names(args.python))
    moves = path_moves(args.python, layers)
    largest = sorted(facts["sizes"].items(), key=lambda item: -item[1])[:3]
    figures = {
        "modules": len(graph.modules),
        "import_circles": len(cycles),
        "modules_in_circles": sum(len(c) for c in cycles),
        "imports_up_a_layer": len(upward),
        "op_name_literals_outside_ops": sum(facts["literals"].values()),
        "files_with_op_name_literals": len(facts["literals"]),
        "load_path_functions": moves["functions"],
        "load_path_reading_moves_between_folders": moves["reading_moves"],
        "load_path_reading_moves_to_a_higher_layer": moves["reading_up"],
        "load_path_modules": moves["modules"],
        "load_path_module_reading_moves_between_folders": moves["module_moves"],
        "load_path_call_edges": moves["edges"],
        "load_path_call_edges_between_folders": moves["moves"],
        "load_path_calls_into_a_higher_layer": moves["up"],
        "modules_over_600_lines": sum(size > 600 for size in facts["sizes"].values()),
        "largest_modules": ", ".join(f"{name} ({size})" for name, size in largest),
        "function_local_imports": facts["local_imports"],
    }
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    if baseline is None:
        print(f"| figure (layers: {args.layers}) | value |\n|---|---|")
    else:
        print(f"| figure | {args.baseline.stem} | this tree (layers: {args.layers}) |\n|---|---|---|")
    for name, value in figures.items():
        before = "" if baseline is None else f" {baseline.get(name, '-')} |"
        print(f"| {name.replace('_', ' ')} |{before} {value} |")
    details = {"cycles": cycles, "upward_imports": upward, "literals": facts["literals"], "upward_moves": moves["up_examples"]}
    for name, value in details.items():
        if value:
            print(f"\n{name.replace('_', ' ')}:")
            for item in value:
                print(f"- {item}" if not isinstance(value, dict) else f"- {item}: {value[item]}")
    if args.json:
        args.json.write_text(json.dumps({**figures, **details}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
