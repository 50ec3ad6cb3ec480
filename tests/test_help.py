"""--help a user can read: panels, valid names, brackets shown, no type placeholders
(`<bool>`, `<int>`), nothing cut at 80 or 120 columns, for every command."""

from __future__ import annotations

import re

import pytest
import typer
import typer.core
import typer.main
from typer.testing import CliRunner

from kvplan.cli.app import app

runner = CliRunner()


def _help(*command: str, width: int = 120) -> str:
    result = runner.invoke(
        app, [*command, "--help"], env={"COLUMNS": str(width)}
    )  # typer reads TERMINAL_WIDTH once
    assert result.exit_code == 0, result.output
    return result.output


def _commands(
    group: typer.core.TyperGroup | None = None, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    """Every command path of the app, groups included, found from the app itself."""
    group = group or typer.main.get_command(app)
    found = [prefix]
    for name, command in group.commands.items():
        found += (
            _commands(command, (*prefix, name))
            if isinstance(command, typer.core.TyperGroup)
            else [(*prefix, name)]
        )
    return found


COMMANDS = _commands()


def test_every_command_is_checked() -> None:
    assert {"estimate", "explain", "bench", "calibrate", "report", "sweep"} <= {
        c[0] for c in COMMANDS if c
    }
    assert ("profiles", "show") in COMMANDS and () in COMMANDS


def test_bench_help_groups_options_in_panels_and_lists_the_names() -> None:
    text = _help("bench")
    for panel in (
        "Model and hardware",
        "Workload",
        "Engine",
        "KV formats and policies",
        "Cluster",
        "Offload tiers",
        "Real mode",
        "Output",
    ):
        assert f"─ {panel} ─" in text, panel
    for name in (
        "contiguous-oracle",
        "offload-disk",
        "sliding-window",
        "entropy-budget",
        "kivi-int4",
    ):
        assert name in text
    assert "contiguous-max, contiguous-pow2, contiguous-oracle, paged, prefix" in " ".join(
        line.strip("│ ") for line in text.splitlines()
    )  # the default list, spelled out


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "kvplan")
def test_help_shows_no_type_placeholders_and_cuts_nothing(
    command: tuple[str, ...], width: int
) -> None:
    text = _help(*command, width=width)
    assert not re.findall(r"<[a-z][\w\[\], |]*>", text), (
        text
    )  # typer's <bool>, <int>, <list[Path]>, ...
    assert "VALUE " not in text.replace(
        "NAME=VALUE", ""
    )  # help_format's fallback: every option names its own
    assert "…" not in text, text  # no option name, default or help word cut
    assert max(len(line) for line in text.splitlines()) <= width


def test_square_brackets_survive_rich_markup() -> None:
    text = _help("sweep")
    assert "[fixed], [axes], optional [slo] and [prices]" in text
    assert "pip install 'kvplan[ray]'" in text
    assert "fp8[-e4m3|-e5m2]" in _help("estimate")
    assert "[L(1-r), L(1+r)]" in _help("bench")
