"""Optional dependencies (pyproject.toml's extras): which packages a feature needs, checked
before the first heavy import.

A plain `pip install kvplan` brings the estimator and the simulated engine only. Reports need
pandas and matplotlib, real mode torch and transformers, the Ray executor ray. A command that
needs an extra calls `require_extra` before it imports any of them, so a missing package is
one line naming the packages and the pip command that brings them (exit 2 at the command
line), never an import traceback from deep inside the feature.

The check finds the packages without importing them (importlib.util.find_spec), so asking
costs nothing and loads nothing heavy.
"""

from __future__ import annotations

import importlib.util

# extra -> the top-level modules a feature imports from it (tests/test_extras.py checks each
# against pyproject.toml's [project.optional-dependencies]). triton is left out of `real`:
# the kernels fall back to torch where it is absent (kvplan.kernels).
EXTRAS: dict[str, tuple[str, ...]] = {
    "report": ("matplotlib", "pandas"),
    "real": ("torch", "transformers"),
    "ray": ("ray",),
}


class MissingExtra(ValueError):
    """A feature's optional packages are not installed; the message says how to install them."""

    def __init__(self, purpose: str, extra: str, missing: list[str]) -> None:
        self.extra = extra
        self.missing = missing
        super().__init__(f"{purpose} needs {_and(missing)}: pip install 'kvplan[{extra}]'")


def missing_modules(extra: str) -> list[str]:
    """The extra's modules that cannot be imported here, in EXTRAS's order."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def require_extra(extra: str, purpose: str) -> None:
    """Raise MissingExtra when any module of `extra` is missing; `purpose` names what needs
    it as the user asked for it (`kvplan report`, `kvplan bench --mode real`)."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtra(purpose, extra, missing)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or without a spec
        return False


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
