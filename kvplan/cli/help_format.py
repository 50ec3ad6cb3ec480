"""Help screens without typer's type placeholders.

Typer prints a type for every parameter that names no metavar: `<bool>` beside flags that
take no value (its own --help and --version included), `<int>`, `<str>`, `<list[Path]>`
beside the rest. Commands give their options word metavars (N, TOKENS, FILE); these
command classes (typer's documented `cls=` hook) make sure nothing else shows: flags get
none, an option without one gets VALUE, and arguments show their name only.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand, TyperGroup


def _no_type(ctx: Any) -> None:
    return None


def _word_metavars(params: list[Any]) -> list[Any]:
    for param in params:
        if param.param_type_name == "argument":
            param.display_type_rich = _no_type  # the name column already says what it is
        elif param.is_flag:
            param.metavar = ""
        elif param.metavar is None:
            param.metavar = "VALUE"
    return params


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _word_metavars(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _word_metavars(super().get_params(ctx))
