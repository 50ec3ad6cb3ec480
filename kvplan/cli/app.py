"""The kvplan command line: one module per command group, wired here.

A command named on the command line is the only one imported and registered (`run`, the
console entry point): `kvplan estimate` never imports the bench, plan or report modules nor
builds their options. Anything else (`kvplan`, `kvplan --help`, an unknown word) gets the
whole app, which is also what `from kvplan.cli.app import app` returns.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any

import typer

from kvplan import __version__
from kvplan.cli.help_format import Command, Group

# name -> (module, function), in the order `kvplan --help` lists them
COMMANDS = {
    "estimate": ("kvplan.cli.estimate", "estimate"),
    "explain": ("kvplan.cli.explain", "explain"),
    "bench": ("kvplan.cli.bench", "bench"),
    "plan": ("kvplan.cli.plan", "plan"),
    "calibrate": ("kvplan.cli.calibrate", "calibrate"),
    "profile": ("kvplan.cli.profile", "profile"),
    "report": ("kvplan.cli.report", "report"),
    "sweep": ("kvplan.cli.sweep", "sweep"),
}
GROUPS = {  # name -> module with a typer `app`
    "profiles": "kvplan.cli.profiles",
    "samples": "kvplan.cli.samples",
}


def _version(value: bool) -> None:
    if value:
        print(f"kvplan {__version__}")
        raise typer.Exit()


def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """KV-cache capacity planning and benchmarking for LLM inference."""


def build(only: str | None = None) -> typer.Typer:
    """The app with every command, or with just `only` (still a group: `kvplan NAME ...`)."""
    app = typer.Typer(
        name="kvplan",
        cls=Group,
        help="KV-cache capacity planning and benchmarking for LLM inference.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    for name, (module, function) in COMMANDS.items():
        if only in (None, name):
            app.command(name, cls=Command)(getattr(import_module(module), function))
    for name, module in GROUPS.items():
        if only in (None, name):
            app.add_typer(import_module(module).app, name=name)
    app.callback()(main)
    return app


def run() -> None:
    """The console entry point."""
    named = next((word for word in sys.argv[1:] if not word.startswith("-")), None)
    build(named if named in COMMANDS or named in GROUPS else None)(prog_name="kvplan")


_full: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    global _full
    if name == "app":
        if _full is None:
            _full = build()
        return _full
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
