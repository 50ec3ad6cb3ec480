"""The routers of a cluster of engines (kvplan.sim.cluster routes by them): their names and
one router's settings, apart from the router so the command line reads them for its help
without loading the engine."""

from __future__ import annotations

from dataclasses import dataclass

ROUTERS = ("round-robin", "least-loaded", "sticky", "prefix-hash", "kv-aware")


@dataclass(frozen=True)
class RouterConfig:
    name: str = ROUTERS[0]
    w_hit: float = 0.8  # llm-d's default weight for the prefix-cache scorer
    w_load: float = 0.2  # and for the load (queue) scorer

    def __post_init__(self) -> None:
        if self.name not in ROUTERS:
            raise ValueError(f"unknown router '{self.name}'; use one of: {', '.join(ROUTERS)}")
