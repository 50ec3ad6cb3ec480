"""Eviction policies with prefix caching: refused, one line per policy saying why."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.core.kv.paged import PREFIX_CONFLICTS
from kvplan.core.policies import POLICIES


def test_every_policy_has_a_reason() -> None:
    assert set(PREFIX_CONFLICTS) == set(POLICIES)


@pytest.mark.parametrize(("name", "why"), [("h2o", "never computes the cached prefix's attention"),
                                           ("snapkv", "compresses each prompt in place"),
                                           ("streaming", "writes its sinks into the window's first slots")])
def test_prefix_with_a_policy_is_refused_with_its_reason(tmp_path, name: str, why: str) -> None:
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["bench", "--optimizations", f"prefix+{name}", "--kv-budget", "1024",
                                      "--num-requests", "5", "--out", str(out)], env={"COLUMNS": "400"})
    assert result.exit_code == 2
    assert f"prefix caching cannot be combined with '{name}'" in result.output and why in result.output
    assert "Traceback" not in result.output and not out.exists()
