"""A refused value of a named setting, for every layer to raise and every front end to word.

Library code names a setting by its config field (`max_num_seqs`, `kv_budget`): the name a
sweep file, a results file and a caller of the library use. A front end shows the setting
as its user typed it: the command line as its flag (`--max-num-seqs`, kvplan/cli/common.py).
So the library never spells a flag, and a sweep point's error names the key of its file.

    raise SettingError("{max_num_seqs} must be at least 1, got {got}", got=value)

The message is a str.format template. A field that a keyword fills is a value (user text
goes in this way, so its braces are never read as fields); every other field is a setting,
written by its name in str(err) and as `named(spell)` spells it.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any


class SettingError(ValueError):
    def __init__(self, template: str, **values: Any) -> None:
        self.template = template
        self.values = values
        fields = (name for _, name, _, _ in string.Formatter().parse(template) if name is not None)
        self.settings: tuple[str, ...] = tuple(
            dict.fromkeys(name for name in fields if name not in values)
        )
        if not self.settings or "" in self.settings:
            raise TypeError(
                f"a SettingError names its settings as {{field}} and fills values by keyword: "
                f"{template!r}"
            )
        super().__init__(self.named(str))

    @property
    def setting(self) -> str:
        """The setting the message is about (the first it names)."""
        return self.settings[0]

    def named(self, spell: Callable[[str], str]) -> str:
        """The message with each setting written as spell(setting), e.g. as a flag."""
        return self.template.format_map(_Spelled(self.values, spell))

    def within(self, context: str) -> SettingError:
        """The same error after a prefix that says where it happened (a file, a run)."""
        return SettingError("{_where}" + self.template, _where=context, **self.values)

    def __reduce__(
        self,
    ) -> tuple[Any, ...]:  # pickled by template and values, not by the worded message
        return _rebuild, (self.template, self.values)


def _rebuild(template: str, values: dict[str, Any]) -> SettingError:
    return SettingError(template, **values)


class _Spelled(dict[str, Any]):
    """The values, and any other field (a setting) spelled on lookup."""

    def __init__(self, values: dict[str, Any], spell: Callable[[str], str]) -> None:
        super().__init__(values)
        self.spell = spell

    def __missing__(self, setting: str) -> str:
        return self.spell(setting)
