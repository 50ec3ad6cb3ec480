"""The package layout holds: one folder per layer, imports point down only, no cycles, the
pure layers never import the heavy stack, and no file grows past 400 lines.

The graph is read from the source (every `import`, module level or inside a function), so
a lazy import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"kvplan": ROOT / "kvplan", "kvplan.kernels": ROOT / "kernels" / "kvplan_kernels"}

# Lowest first. sim and real are siblings: neither may import the other.
LAYER_RANK = {
    "results": 0,
    "samples": 0,  # shipped data files and the code that locates them; imports nothing
    "spec": 1,
    "engines": 2,
    # where independent runs execute: a process pool or Ray; knows no run
    "execution": 2,
    # siblings: the estimator and explain both build on the engines, never on each other
    "sizing": 3,
    "logs": 3,
    "workload": 3,
    "core": 4,
    "kernels": 5,
    "quality": 6,
    "sim": 7,
    "real": 7,
    "bench": 8,
    # siblings: fitting the step model to measured runs, and running benches, never each other
    "fit": 8,
    # siblings: the plan search and the sweep (each runs bench's engine), never each other
    "deploy": 9,
    "sweep": 9,
    # the report draws bench, sweep and plan records
    "report": 10,
    "cli": 11,
}
PURE_LAYERS = (
    "results",
    "samples",
    "spec",
    "engines",
    "sizing",
    "logs",
    "workload",
    "core",
    "sim",
)
HEAVY = ("torch", "triton", "transformers", "pandas", "matplotlib")
# A module past SOFT_MAX_LINES is worth a look for a second noun (a warning in the test report,
# not a failure: a module is split by concept, never by count); past HARD_MAX_LINES it has one.
SOFT_MAX_LINES = 400
HARD_MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module: str, runtime_only: bool) -> set[str]:
    """Modules named by every import statement in the file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if runtime_only and isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1]
                        + ([base] if base else [])
                    )
                # `from pkg import module` depends on that module; `from pkg import name`, on pkg.
                for alias in child.names:
                    names.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
            visit(child)

    visit(tree)
    return names


def _internal(names: set[str]) -> set[str]:
    return {name for name in names if name in MODULES and name != "kvplan"}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYER_RANK else None


def test_every_package_folder_has_an_init() -> None:
    """setup.py discovers packages by their __init__.py: a folder without one is left out of the
    wheel."""
    for folder in PACKAGE_DIRS.values():
        for sub in folder.rglob("*"):
            if sub.is_dir() and sub.name != "__pycache__" and any(sub.glob("*.py")):
                assert (sub / "__init__.py").is_file(), f"{sub} has Python files but no __init__.py"


def test_every_module_belongs_to_a_layer() -> None:
    loose = [
        m
        for m in MODULES
        if m.count(".") >= 1 and _layer(m) is None and m not in ("kvplan.__main__",)
    ]
    assert not loose, f"modules outside the layer folders: {loose}"


def test_imports_point_down_only() -> None:
    upward = []
    for module, path in MODULES.items():
        source = _layer(module)
        if source is None:
            continue
        for target in _internal(_imports(path, module, runtime_only=False)):
            goal = _layer(target)
            if goal is None or goal == source:
                continue
            if LAYER_RANK[goal] >= LAYER_RANK[source]:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that point up or sideways:\n" + "\n".join(sorted(upward))


def test_no_import_cycles() -> None:
    """Type-only imports count: two modules that need each other's types are one noun split
    in two, or want a Protocol on the lower side."""
    graph = {
        module: _internal(_imports(path, module, runtime_only=False))
        for module, path in MODULES.items()
    }
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node] - {node}):
            if state.get(target) == 1:
                cycles.append(
                    " -> ".join(path[path.index(target) :] + [node, target])
                    if target in path
                    else f"{node} -> {target}"
                )
            elif target not in state:
                walk(target, path + [node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_pure_layers_never_import_the_heavy_stack() -> None:
    offenders = []
    for module, path in MODULES.items():
        if _layer(module) in PURE_LAYERS:
            heavy = {
                name.split(".")[0] for name in _imports(path, module, runtime_only=False)
            } & set(HEAVY)
            offenders += [f"{module} imports {name}" for name in sorted(heavy)]
    assert not offenders, "\n".join(offenders)


SIMULATED_BENCH_PROBE = """
import sys
from typer.testing import CliRunner
from kvplan.cli.app import app
import tempfile, os
out = os.path.join(tempfile.mkdtemp(), "r.jsonl")
result = CliRunner().invoke(
    app,
    ["bench", "--num-requests", "40", "--optimizations", "paged,prefix,contiguous-max",
     "--out", out],
)
assert result.exit_code == 0, result.output
print(",".join(name for name in {heavy!r} if name in sys.modules))
"""


def test_simulated_bench_loads_no_heavy_modules() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SIMULATED_BENCH_PROBE.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_no_module_holds_two_nouns_by_its_size() -> None:
    sizes = {str(path.relative_to(ROOT)): path.read_text().count("\n") for path in MODULES.values()}
    long = [f"{name}: {lines} lines" for name, lines in sizes.items() if lines > SOFT_MAX_LINES]
    if long:
        warnings.warn(
            "modules past the soft size, worth a look for a second noun:\n" + "\n".join(long),
            stacklevel=1,
        )
    too_long = [f"{name}: {lines} lines" for name, lines in sizes.items() if lines > HARD_MAX_LINES]
    assert not too_long, "split these by concept:\n" + "\n".join(too_long)


def test_memory_units_are_declared_once() -> None:
    """GIB and MIB live in kvplan/__init__.py; a module that declares its own is a second home."""
    import re

    again = [
        str(path.relative_to(ROOT))
        for module, path in MODULES.items()
        if module != "kvplan" and re.search(r"^(GIB|MIB) = ", path.read_text(), flags=re.M)
    ]
    assert not again, again
