"""The kvplan command line: one module per command group, wired here."""

from __future__ import annotations

import typer

from kvplan import __version__
from kvplan.cli import profiles
from kvplan.cli.bench import bench
from kvplan.cli.calibrate import calibrate
from kvplan.cli.estimate import estimate
from kvplan.cli.explain import explain
from kvplan.cli.help_format import Command, Group
from kvplan.cli.plan import plan
from kvplan.cli.report import report
from kvplan.cli.sweep import sweep

app = typer.Typer(
    name="kvplan",
    cls=Group,
    help="KV-cache capacity planning and benchmarking for LLM inference.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("estimate", cls=Command)(estimate)
app.command("explain", cls=Command)(explain)
app.command("bench", cls=Command)(bench)
app.command("plan", cls=Command)(plan)
app.command("calibrate", cls=Command)(calibrate)
app.command("report", cls=Command)(report)
app.command("sweep", cls=Command)(sweep)
app.add_typer(profiles.app, name="profiles")


def _version(value: bool) -> None:
    if value:
        print(f"kvplan {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """KV-cache capacity planning and benchmarking for LLM inference."""
