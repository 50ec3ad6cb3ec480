"""Eviction policies are registered objects: names, help, composition rules and the memory
model come from each policy's class, and a new policy is one subclass (here defined in the
test) that the parser, the simulator and the quality evaluator pick up unchanged."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kvplan.bench.optimizations import names_help, parse_optimization
from kvplan.core.policies import PolicySpec, held_blocks, held_tokens, policies, policy_names
from kvplan.core.policies import registry as registry_module


def test_the_registry_lists_every_policy_once_in_its_order() -> None:
    assert policy_names() == (
        "sliding-window",
        "streaming",
        "streaming-abspos",
        "h2o",
        "h2o-holes",
        "snapkv",
        "paged-eviction",
        "entropy-budget",
    )
    assert all(policy.help and policy.name in names_help() for policy in policies().values())


def test_unknown_names_list_the_registry() -> None:
    with pytest.raises(
        ValueError, match="unknown policy 'lru'; use one of: full, sliding-window, streaming,"
    ):
        PolicySpec("lru", 64)


def test_policy_traits_come_from_the_class() -> None:
    known = policies()
    assert [name for name, p in known.items() if p.positional] == ["sliding-window"]
    assert [name for name, p in known.items() if p.sinks] == ["streaming", "streaming-abspos"]
    assert [name for name, p in known.items() if p.selects_after_prompt] == ["snapkv"]
    assert [name for name, p in known.items() if p.splits_layers] == ["entropy-budget"]
    assert [name for name, p in known.items() if p.real_refusal] == ["h2o-holes"]
    assert not PolicySpec("full").evicts and PolicySpec("h2o", 8).evicts


KEEP_OLDEST = '''
import numpy as np

from kvplan.core.policies.base import EvictionPolicy


class KeepOldest(EvictionPolicy):
    """Each head keeps the oldest `budget` tokens, compacted (a test-only policy)."""

    name = "keep-oldest"
    help = "the oldest budget tokens (test only)"
    order = 99
    scores_attention = False
    prefix_conflict = "test policy"

    def keep(self, spec, scores, positions, budget):
        return np.tile(np.arange(min(budget, len(positions[0]))), (len(positions), 1))
'''


@pytest.fixture
def keep_oldest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A new policy as one file, found where the package's modules are."""
    import kvplan.core.policies as package

    (tmp_path / "keep_oldest.py").write_text(KEEP_OLDEST)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    registry_module.policies.cache_clear()
    yield
    monkeypatch.undo()
    sys.modules.pop("kvplan.core.policies.keep_oldest", None)
    registry_module.policies.cache_clear()


def test_a_new_policy_is_one_file(keep_oldest: None) -> None:
    assert policy_names()[-1] == "keep-oldest"
    assert "keep-oldest" in names_help()
    assert parse_optimization("paged+keep-oldest").policy == "keep-oldest"
    spec = PolicySpec("keep-oldest", 64)
    # The base memory model: at most the budget, compacted into ceil(held / block) blocks.
    assert held_tokens(spec, 10, 100) == 64 and held_blocks(spec, 10, 100, 16) == 4
    kept = spec.policy.keep(spec, np.zeros((2, 70)), np.tile(np.arange(70), (2, 1)), 64)
    assert kept.shape == (2, 64) and kept[0, -1] == 63


def test_a_new_policy_runs_from_the_cli(keep_oldest: None, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kvplan.cli.app import app

    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--optimizations",
            "paged,paged+keep-oldest",
            "--kv-budget",
            "256",
            "--num-requests",
            "20",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["optimization"] for r in records] == ["paged", "paged+keep-oldest"]
    assert records[1]["metrics"]["tokens_dropped"] > 0
    refused = CliRunner().invoke(
        app,
        [
            "bench",
            "--optimizations",
            "prefix+keep-oldest",
            "--kv-budget",
            "256",
            "--num-requests",
            "5",
            "--out",
            str(tmp_path / "x.jsonl"),
        ],
        env={"COLUMNS": "200"},
    )
    assert refused.exit_code == 2 and "test policy" in refused.output


def test_the_file_policy_is_gone_once_its_folder_is() -> None:
    registry_module.policies.cache_clear()
    assert "keep-oldest" not in policy_names()
