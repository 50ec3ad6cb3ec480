"""A test's missing tool: skipped on a user's machine, a failure in CI."""

from __future__ import annotations

import os

import pytest


def require_in_ci(available: bool, what: str, install: str) -> None:
    """Skip a test whose tool is missing on a user's machine, but fail it in CI (CI=true),
    where .ci/run installs the tool: a broken install must not pass as a skip."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is missing in CI; {install}")
    pytest.skip(f"{what} is not installed ({install})")
