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
