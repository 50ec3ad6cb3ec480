"""`kvplan bench`'s options, one module per help panel (Model and hardware, KV formats and
policies, Workload, Cluster, Engine, Output, Real mode, Offload tiers).

A panel is a frozen dataclass whose fields are its options: typer's annotation and, as the
field's default, the default of the config field the option sets (SizingConfig,
SchedulerConfig, WorkloadSpec, ...), read from the config, never written again. The panel's
methods turn the parsed values into settings under the names sweep files and results files
use (`settings()`, read by BenchConfig.from_flat) or into the config object they make.

`with_panels` lays the panels' options out as the command's parameters, in the order the
command names its panels (typer reads the signature; the help lists panels in that order),
and calls the command with one panel object per panel parameter.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def with_panels(command: F) -> F:
    """The command with each parameter annotated by a panel class replaced by that panel's
    options; a call gathers them back into the panel object the command receives."""
    hints = typing.get_type_hints(command, include_extras=True)
    panels: dict[str, type] = {}
    parameters: list[inspect.Parameter] = []
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints.get(parameter.name)
        if not (isinstance(annotation, type) and dataclasses.is_dataclass(annotation)):
            parameters.append(parameter.replace(annotation=annotation))
            continue
        panels[parameter.name] = annotation
        options = typing.get_type_hints(annotation, include_extras=True)
        parameters += [
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=field.default,
                annotation=options[field.name],
            )
            for field in dataclasses.fields(annotation)
        ]
    names = [parameter.name for parameter in parameters]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise TypeError(f"{command.__name__}: options named twice: {', '.join(duplicates)}")

    @functools.wraps(command)
    def run(**values: Any) -> Any:
        grouped = {
            name: panel(
                **{field.name: values.pop(field.name) for field in dataclasses.fields(panel)}
            )
            for name, panel in panels.items()
        }
        return command(**values, **grouped)

    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return run  # type: ignore[return-value]
