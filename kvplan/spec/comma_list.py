"""Every comma-separated list a user types (`--router`, `--optimizations`, `kvplan plan`'s
`--tp`, `--kv-dtype`, `--gpu`, an estimate sweep's listed values) is read here.

An empty list (`--router ,`, `--router ""`) or an empty entry (`a,,b`, a trailing comma) is
refused, never dropped: dropping it would run fewer things than the user named, or none,
with nothing said. The refusal names the setting (a SettingError: the command line words it
as its flag) and what the list takes.
"""

from __future__ import annotations

from kvplan.spec.setting_error import SettingError


def comma_list(text: str, setting: str, takes: str, shown: str | None = None) -> list[str]:
    """The entries of `text`, stripped, in order. `setting` is the setting's config name
    (`routers`, `tp`); `takes` says what the list holds, worded after the refusal, e.g.
    "one or more of round-robin, kv-aware, separated by commas"; `shown` is the text the
    refusal quotes, where the list is part of a longer value (`kv-dtype=fp16,,fp8`)."""
    entries = [entry.strip() for entry in text.split(",")]
    named = "{" + setting + "} {got}"  # the setting is a field; the user's text a value
    got = repr(text if shown is None else shown)
    if not any(entries):
        raise SettingError(named + " names nothing; give {takes}", got=got, takes=takes)
    if "" in entries:
        raise SettingError(
            named + " has an empty entry (two commas in a row, or one at an end); give {takes}",
            got=got,
            takes=takes,
        )
    return entries
