"""Latency targets a deployment must meet: `ttft_p90=2s,tpot_p90=60ms`.

Each target names a figure (time to first token, time per output token, end-to-end latency),
a percentile (p50, p90 or p99) and a limit; a run meets the SLO when every named percentile
of its requests is at or under its limit. The figures are the ones `kvplan bench` records
(`ttft_s_p90`, ...), so a plan and a bench run judge the same numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvplan.spec.comma_list import comma_list
from kvplan.spec.setting_error import SettingError

FIGURES = ("ttft", "tpot", "e2e")
PERCENTILES = ("p50", "p90", "p99")
_UNITS = {"ms": 1e-3, "s": 1.0, "": 1.0}
_TARGET = re.compile(
    r"^(ttft|tpot|e2e)_(p50|p90|p99)\s*=\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s|)$"
)


@dataclass(frozen=True)
class Target:
    figure: str  # ttft, tpot or e2e
    percentile: str  # p50, p90 or p99
    limit_s: float

    @property
    def metric(self) -> str:
        """The result-record metric this target reads."""
        return f"{self.figure}_s_{self.percentile}"

    def __str__(self) -> str:
        shown = f"{self.limit_s * 1000:g}ms" if self.limit_s < 1 else f"{self.limit_s:g}s"
        return f"{self.figure}_{self.percentile}={shown}"


@dataclass(frozen=True)
class Slo:
    targets: tuple[Target, ...]

    def misses(self, metrics: Mapping[str, Any]) -> list[str]:
        """The targets a run's metrics miss, each as 'ttft_p90 3.1 s > 2 s'; [] when it meets them
        all.
        A figure the run could not measure (no request finished) is a miss."""
        missed = []
        for target in self.targets:
            value = metrics.get(target.metric)
            if not isinstance(value, (int, float)) or math.isnan(value) or value > target.limit_s:
                shown = (
                    "not measured"
                    if not isinstance(value, (int, float)) or math.isnan(value)
                    else f"{value:.3g} s"
                )
                missed.append(f"{target.figure}_{target.percentile} {shown} > {target.limit_s:g} s")
        return missed

    def meets(self, metrics: Mapping[str, Any]) -> bool:
        return not self.misses(metrics)

    @property
    def queue_limit_s(self) -> float:
        """The longest queue wait the SLO's TTFT / E2E targets could hide (0 when it names only
        TPOT, which sees the batch, not the queue)."""
        return max((t.limit_s for t in self.targets if t.figure in ("ttft", "e2e")), default=0.0)

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.targets)


def parse_slo(text: str) -> Slo:
    """'ttft_p90=2s,tpot_p90=60ms' -> Slo; a bare number is seconds."""
    targets = []
    takes = "targets separated by commas, e.g. ttft_p90=2s,tpot_p90=60ms"
    for part in comma_list(text, "slo", takes):
        match = _TARGET.match(part.lower())
        if not match:
            raise SettingError(
                "{slo}: cannot read '{part}'; write FIGURE_PCT=LIMIT with FIGURE one of {figures}, "
                "PCT one of {percentiles}, e.g. ttft_p90=2s,tpot_p90=60ms",
                part=part,
                figures=", ".join(FIGURES),
                percentiles=", ".join(PERCENTILES),
            )
        figure, percentile, number, unit = match.groups()
        limit = float(number) * _UNITS[unit]
        if not math.isfinite(limit) or limit <= 0:
            raise SettingError(
                "{slo}: the limit of '{part}' must be a positive time, e.g. 2s or 60ms", part=part
            )
        targets.append(Target(figure, percentile, limit))
    if len({(t.figure, t.percentile) for t in targets}) < len(targets):
        raise SettingError("{slo} names the same figure and percentile twice; give each once")
    return Slo(tuple(targets))
