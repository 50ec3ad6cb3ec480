"""The repository root shadows no installed package: Python puts the working folder on
sys.path when it runs from the root (`python -m pytest`, `python -m kvplan`), so a folder
there that Python can import by a name PyPI also uses would win over the installed package.
transformers imports the PyPI package `kernels`, and kvplan's `kernels/` folder is such a
name: it holds no __init__.py, so the installed package is found instead."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = (
    "import importlib.util, json; spec = importlib.util.find_spec({name!r}); "
    "print(json.dumps(None if spec is None else spec.origin))"
)


def test_nothing_at_the_root_is_importable_as_an_installed_package() -> None:
    from importlib.metadata import packages_distributions

    installed = set(packages_distributions()) - {"kvplan"}  # kvplan is this tree's own
    importable = {path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()}
    importable |= {path.stem for path in ROOT.glob("*.py")}
    assert "kernels" not in importable  # the name transformers imports from PyPI
    assert not importable & installed, sorted(importable & installed)


def test_kvplan_kernels_is_the_folder_one_level_down() -> None:
    import kvplan.kernels.paged_attention as module

    assert Path(module.__file__).parent == ROOT / "kernels" / "kvplan_kernels"


def test_an_installed_kernels_package_wins_from_the_root() -> None:
    """Run from the root as `python -m` runs: the root first on sys.path."""
    installed = importlib.util.find_spec("kernels")
    if installed is None or installed.origin is None:
        pytest.skip("the PyPI package 'kernels' (a transformers dependency) is not installed")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(name="kernels")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    origin = proc.stdout.strip().strip('"')
    assert not Path(origin).resolve().is_relative_to(ROOT), origin
