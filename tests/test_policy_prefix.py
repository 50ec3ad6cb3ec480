"""Eviction policies with prefix caching: sliding-window composes (vLLM's SlidingWindowManager,
tests/test_window_prefix.py); every other policy is refused, one line per policy saying why."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.core.policies import policies


def test_every_policy_but_the_sliding_window_has_a_reason() -> None:
    conflicting = {name for name, policy in policies().items() if policy.prefix_conflict}
    assert conflicting == set(policies()) - {"sliding-window"}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("h2o", "never computes the cached prefix's attention"),
        ("snapkv", "compresses each prompt in place"),
        ("streaming", "writes the 4 sinks over the first slots of each query's"),
    ],
)
def test_prefix_with_a_policy_is_refused_with_its_reason(tmp_path, name: str, why: str) -> None:
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--optimizations",
            f"prefix+{name}",
            "--kv-budget",
            "1024",
            "--num-requests",
            "5",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 2
    assert (
        f"prefix caching cannot be combined with '{name}'" in result.output and why in result.output
    )
    assert "Traceback" not in result.output and not out.exists()


def test_prefix_with_the_sliding_window_runs(tmp_path) -> None:
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--optimizations",
            "paged+prefix+sliding-window",
            "--kv-budget",
            "512",
            "--workload",
            "system-prompt",
            "--num-requests",
            "20",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text().splitlines()[0])
    assert record["metrics"]["prefix_hit_rate"] > 0.5


def test_offload_with_the_sliding_window_is_refused(tmp_path) -> None:
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--optimizations",
            "prefix+offload-cpu+sliding-window",
            "--kv-budget",
            "512",
            "--num-requests",
            "5",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "400"},
    )
    assert (
        result.exit_code == 2
        and "offload tiers cannot be combined with 'sliding-window'" in result.output
    )
    assert "Traceback" not in result.output and not out.exists()
