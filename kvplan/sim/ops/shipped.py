"""The operator step model's shipped fit (profiles/step_overheads.toml): each engine era's
per-step overheads, fitted on published serving runs, and the error bands printed beside the
figures it models.

`benchmarks/fit_step_overheads.py` writes the file. A band is the held-out error of a group of
runs: each model's runs predicted by a fit made without that model (leave one model out),
grouped by the model's kind (dense, MoE, MLA, hybrid) and the GPU's family. A run takes the
band of its kind on its GPU family; where no group of that pair holds enough runs, the band of
its kind on every family, marked unvalidated; where no kind either, none.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kvplan.sim.ops.overhead import ERAS, EngineOverhead, engine_era, for_era
from kvplan.spec.attention_group import MLAAttentionSpec
from kvplan.spec.model import ModelSpec

FILE_FORMAT = "kvplan-step-overheads/1"
ANY_FAMILY = "*"
KINDS = ("dense", "moe", "mla", "hybrid")
BAND_FIGURES = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "latency_avg_s")


def step_kind(model: ModelSpec) -> str:
    """The kind a model's band is taken by: hybrid (a state or linear-attention layer), MLA,
    MoE, else dense; the first that applies."""
    if model.has_state:
        return "hybrid"
    if model.has_group(MLAAttentionSpec):
        return "mla"
    return "moe" if model.params.is_moe else "dense"


@dataclass(frozen=True)
class Band:
    kind: str
    gpu_family: str  # ANY_FAMILY: every family
    errors: dict[str, float]  # per figure: the quantile of the held-out absolute errors
    runs: dict[str, int]  # per figure: the held-out runs behind it


@dataclass(frozen=True)
class ShippedFit:
    overheads: dict[str, EngineOverhead]  # by era key (Era.fitted_as)
    bands: tuple[Band, ...]
    basis: str  # how the bands were made, in words
    source: str  # the runs the overheads were fitted on, in words

    def overhead(self, engine: str | None, version: str | None) -> EngineOverhead:
        """The overhead a run on this engine release is timed with (overlapped as its era is);
        an era with no fit runs none, so named."""
        return for_era(self.overheads, engine_era(engine, version))

    def band(self, kind: str, gpu_family: str) -> dict[str, Any] | None:
        """The time_error_band of a run of this kind on this GPU family (None: none tested)."""
        for family, unvalidated in ((gpu_family, False), (ANY_FAMILY, True)):
            found = next((b for b in self.bands if b.kind == kind and b.gpu_family == family), None)
            if found is None:
                continue
            out: dict[str, Any] = {"basis": self.basis, "kind": kind, "gpu_family": gpu_family}
            if unvalidated:
                out["unvalidated"] = True
            for figure, error in found.errors.items():
                out[f"{figure}_error"] = error
                out[f"{figure}_runs"] = found.runs[figure]
            return out
        return None


def _overhead(key: str, table: dict[str, Any]) -> EngineOverhead:
    era = ERAS[key]
    return EngineOverhead(
        float(table["base_s"]),
        float(table["per_seq_s"]),
        era.overlapped,
        float(table.get("gpu_factor", 1.0)),
        str(table["source"]),
    )


def _band(table: dict[str, Any]) -> Band:
    errors = {f: float(table[f"{f}_error"]) for f in BAND_FIGURES if f"{f}_error" in table}
    runs = {f: int(table[f"{f}_runs"]) for f in errors}
    return Band(str(table["kind"]), str(table["gpu_family"]), errors, runs)


def parse_shipped(data: dict[str, Any]) -> ShippedFit:
    if data.get("format") != FILE_FORMAT:
        raise ValueError(f"step overheads file: format must be {FILE_FORMAT}")
    return ShippedFit(
        {key: _overhead(key, table) for key, table in data["eras"].items()},
        tuple(_band(table) for table in data.get("bands", [])),
        str(data["band_basis"]),
        str(data["source"]),
    )


@cache
def shipped_fit() -> ShippedFit:
    """The shipped file, read once per process."""
    text = resources.files("kvplan.profiles_data").joinpath("step_overheads.toml").read_text()
    return parse_shipped(tomllib.loads(text))
