"""`kvplan samples`: the small public inputs shipped inside kvplan, and where they are."""

from __future__ import annotations

import textwrap
from typing import Annotated, Any

import typer

from kvplan.cli.common import JsonOpt, cli_errors, console, escape, fmt_bytes
from kvplan.cli.help_format import Command, Group
from kvplan.results.atomic import strict_json
from kvplan.samples import SAMPLES, sample_bytes, sample_path, samples_dir

app = typer.Typer(
    cls=Group,
    help="The small inputs shipped with kvplan (a model, a trace, a log...), "
    "so every README example runs without other data.",
)


@app.callback(invoke_without_command=True)
@cli_errors()
def samples(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the shipped samples: name, what each is for, size, licence and path."""
    if ctx.invoked_subcommand is not None:
        return
    records: list[dict[str, Any]] = [
        {
            "name": sample.name,
            "what": sample.what,
            "bytes": sample_bytes(sample),
            "licence": sample.licence,
            "source": sample.source,
            "path": str(sample_path(sample.name)),
        }
        for sample in SAMPLES
    ]
    if as_json:
        print(strict_json(records, indent=2))
        return
    console.print(
        "[bold]Samples shipped with kvplan[/]; their sources and licences:\n  "
        f"{escape(str(samples_dir() / 'SOURCES.md'))}",
        soft_wrap=True,
        highlight=False,
    )
    for record in records:
        # One block per sample: the path stays on one line, whole, to be copied.
        console.print(
            f"\n[bold cyan]{escape(record['name'])}[/]  {fmt_bytes(record['bytes'])}, "
            f"licence: {escape(record['licence'])}",
            highlight=False,
        )
        what = textwrap.fill(
            record["what"],
            max(console.width, 40),
            initial_indent="  ",
            subsequent_indent="  ",
            break_on_hyphens=False,  # keeps a flag like --stats-path whole
            break_long_words=False,
        )
        console.print(escape(what), soft_wrap=True, highlight=False)
        console.print(f"  {escape(record['path'])}", soft_wrap=True, highlight=False)
    console.print(
        '\n[dim]in a shell: --model-path "$(kvplan samples path stories260k)"[/]',
        soft_wrap=True,
        highlight=False,
    )


@app.command("path", cls=Command)
@cli_errors()
def path(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A sample's name.")],
) -> None:
    """Print one sample's absolute path, and nothing else (for $(...) in a shell)."""
    print(sample_path(name))
