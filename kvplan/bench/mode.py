"""A run's mode, light enough for any command's help text: no engine, no numpy."""

from __future__ import annotations

from enum import StrEnum

from kvplan.spec.setting_error import SettingError


class Mode(StrEnum):
    """How a run executes: kvplan's engine on modeled time, or KV in torch block pools with a
    transformers model on measured time. Behaviour is chosen by member, never by its text;
    the text is what records and the command line carry."""

    SIMULATED = "simulated"
    REAL = "real"


MODES = tuple(mode.value for mode in Mode)


def record_mode(text: str | None) -> Mode:
    """The mode a result record or a sweep point names (records from before modes were
    recorded are simulated runs)."""
    return parse_mode(text or Mode.SIMULATED)


def parse_mode(text: str | Mode) -> Mode:
    """The mode a setting names; anything else is refused by its setting's name."""
    if text not in MODES:
        raise SettingError("{mode} must be simulated or real, got '{got}'", got=text)
    return Mode(text)
