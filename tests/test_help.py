"""Issue 18: --help a user can read: panels, valid names, brackets shown, no type metavars on flags."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvplan.cli import app

runner = CliRunner()


def _help(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "120", "TERMINAL_WIDTH": "120"})
    assert result.exit_code == 0, result.output
    return result.output


def test_bench_help_groups_options_in_panels_and_lists_the_names() -> None:
    text = _help("bench")
    for panel in ("Model and hardware", "Workload", "Engine", "KV formats and policies", "Cluster",
                  "Offload tiers", "Real mode", "Output"):
        assert f"─ {panel} ─" in text, panel
    for name in ("contiguous-oracle", "offload-disk", "sliding-window", "entropy-budget", "kivi-int4"):
        assert name in text
    assert "…" not in text  # no truncated defaults


@pytest.mark.parametrize("command", [("bench",), ("estimate",), ("sweep",), ("report",)])
def test_flags_show_no_bool_metavar(command: tuple[str, ...]) -> None:
    lines = [line for line in _help(*command).splitlines() if "<bool>" in line]
    assert all("--help" in line for line in lines), lines  # typer's own --help keeps its metavar


def test_square_brackets_survive_rich_markup() -> None:
    text = _help("sweep")
    assert "[fixed], [axes], optional [slo] and [prices]" in text
    assert "pip install 'kvplan[ray]'" in text
    assert "fp8[-e4m3|-e5m2]" in _help("estimate")
