"""The routers of a cluster of engines (kvplan.sim.cluster routes by them): their names and
one router's settings, apart from the router so the command line reads them for its help
without loading the engine."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec.comma_list import comma_list
from kvplan.spec.setting_error import SettingError

ROUTERS = ("round-robin", "least-loaded", "sticky", "prefix-hash", "kv-aware")


@dataclass(frozen=True)
class RouterConfig:
    name: str = ROUTERS[0]
    w_hit: float = 0.8  # llm-d's default weight for the prefix-cache scorer
    w_load: float = 0.2  # and for the load (queue) scorer

    def __post_init__(self) -> None:
        if self.name not in ROUTERS:
            raise ValueError(f"unknown router '{self.name}'; use one of: {', '.join(ROUTERS)}")


def parse_routers(text: str) -> tuple[str, ...]:
    """The routers of a comma-separated list (--router), each known and named once: an empty
    list or entry, an unknown name or one named twice (two runs under one row name) is refused."""
    names = comma_list(text, "routers", f"one or more of {', '.join(ROUTERS)}, separated by commas")
    for name in names:
        if name not in ROUTERS:
            raise SettingError(
                "{routers} names unknown router {name}; use one or more of {known}",
                name=repr(name),
                known=", ".join(ROUTERS),
            )
        if names.count(name) > 1:
            raise SettingError(
                "{routers} names {name} twice; list each router once", name=repr(name)
            )
    return tuple(names)
