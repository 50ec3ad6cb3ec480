from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (a fresh clone has none)")
    return SHARED_DATA


def require_in_ci(available: bool, what: str, install: str) -> None:
    """Skip a test whose tool is missing on a user's machine, but fail it in CI (CI=true),
    where .ci/run installs the tool: a broken install must not pass as a skip."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is missing in CI; {install}")
    pytest.skip(f"{what} is not installed ({install})")


def triton_interpreter_for_module():
    """Turn Triton's interpreter on (unless TRITON_INTERPRET is set) before triton is first
    imported (its standard library is jitted at import); returns a module-scoped autouse
    fixture that puts the variable back afterwards, so it does not leak into later modules.
    Call at the top of a test module: `_interpreter = triton_interpreter_for_module()`."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ.setdefault("TRITON_INTERPRET", "1")

    @pytest.fixture(scope="module", autouse=True)
    def restore_interpret_flag():
        yield
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous

    return restore_interpret_flag
