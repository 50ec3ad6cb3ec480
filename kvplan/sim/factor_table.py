"""The shipped step-model defaults: hardware factors per GPU family, overheads per engine.

The step-model factors (kvplan/sim/step_model.py) describe different things, so they are
fitted and shipped apart:

- how much of the datasheet a GPU family achieves (bandwidth_factor,
  attention_bandwidth_factor, flops_factor): a property of the hardware and its kernels;
- what the serving engine costs per step outside the GPU's work (overhead_s,
  overhead_per_seq_s): a property of the engine generation. vLLM's V0 engine (before 0.8)
  prepares every step in Python on the critical path; V1 overlaps scheduling with the GPU.

A run on an H100 under vLLM 0.6 and one under vLLM 0.11 then share the H100's efficiency
but not the engine's overhead, which a single factor set per GPU family cannot express.
SGLang is an engine generation of its own ('sglang'): its overheads are fitted on its runs
where at least three sweeps inform them, else it takes the pooled 'all' overheads.

A third kind holds one factor, moe_flops_factor: the fused-MoE grouped GEMM's share of the
dense GEMMs' FLOP/s. It is fitted on every MoE run pooled (few published runs are MoE, so
one factor for all families; a named simplification) and is 1.0 where nothing was fitted.

One GEMM path gets hardware factors of its own: per-channel FP8 weights (Meta's fbgemm_fp8
checkpoints) on ROCm. torch._scaled_mm on ROCm took only per-tensor scales, so vLLM ran
these through its unfused fallback (the GEMM at unit scales with an fp32 output, then both
scales applied elementwise) until the rowwise path of vLLM PR #12501, which the AMD authors
measured at least 2x faster and which needs torch >= 2.7 (vLLM 0.9.0 is the first release
built on it). Such runs use the factors keyed '<family>/fp8-unfused' when the table has them,
else their family's.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kvplan.plan.engine_releases import engine_generation, parse_version  # noqa: F401 (engine_generation re-exported)

HARDWARE_FACTORS: tuple[str, ...] = (
    "bandwidth_factor",
    "attention_bandwidth_factor",
    "flops_factor",
)
ENGINE_FACTORS: tuple[str, ...] = ("overhead_s", "overhead_per_seq_s")
MOE_FACTORS: tuple[str, ...] = ("moe_flops_factor",)
MOE_KEY = "moe"
DEFAULT_GENERATION = "vllm-v1"
POOLED = (
    "all"  # the entry fitted on every run: GPU families and engine generations without their own
)
UNSEEN_FAMILY = (
    "unseen-family"  # the band of a GPU family no measured run covers (leave one family out)
)
ROCM_FAMILIES = ("cdna3",)
PER_CHANNEL_FP8 = ("fp8-meta",)  # kvplan.spec.weight_quant recipes with per-channel FP8 scales
ROCM_ROWWISE_FP8_FROM = (0, 9, 0)
UNFUSED_FP8 = "fp8-unfused"


def factor_key(family: str, weight_dtype: str | None, engine: str, version: str) -> str:
    """The hardware-factor key of a run: its GPU family, or '<family>/fp8-unfused' for
    per-channel FP8 weights on ROCm under a vLLM without the rowwise GEMM (module docstring)."""
    parsed = parse_version(version)
    if (
        family in ROCM_FAMILIES
        and (weight_dtype or "").lower() in PER_CHANNEL_FP8
        and engine == "vllm"
        and parsed is not None
        and parsed < ROCM_ROWWISE_FP8_FROM
    ):
        return f"{family}/{UNFUSED_FP8}"
    return family


@dataclass(frozen=True)
class FactorTable:
    """Hardware factors per GPU family ('all' = every family pooled) and overheads per engine."""

    families: dict[str, dict[str, float]]
    engines: dict[str, dict[str, float]]
    notes: dict[str, str] = field(default_factory=dict)  # where each entry was fitted
    moe: dict[str, float] = field(default_factory=dict)

    def factors(self, family: str, generation: str) -> dict[str, float]:
        hardware = (
            self.families.get(family)
            or self.families.get(family.split("/")[0])
            or self.families.get("all")
            or {}
        )
        engine = (
            self.engines.get(generation)
            or self.engines.get(POOLED)
            or self.engines.get(DEFAULT_GENERATION)
            or {}
        )
        return {
            **{n: hardware.get(n, 1.0) for n in HARDWARE_FACTORS},
            **{n: engine.get(n, 0.0) for n in ENGINE_FACTORS},
            **{n: self.moe.get(n, 1.0) for n in MOE_FACTORS},
        }

    def describe(self, family: str, generation: str) -> str:
        base = family.split("/")[0]
        pooled = (
            ""
            if family in self.families
            else f" (the '{base}' factors: no runs of this GEMM path)"
            if base in self.families
            else " (all-family fit: no runs of this family)"
        )
        return f"default for GPU family '{family}'{pooled} and engine {generation}"

    def to_toml(self, header: list[str], residuals: dict[str, list[str]]) -> str:
        sections = [
            (f'{kind}."{key}"', key, table[key], names)
            for kind, table, names in (
                ("family", self.families, HARDWARE_FACTORS),
                ("engine", self.engines, ENGINE_FACTORS),
            )
            for key in sorted(table, key=lambda k: (k == "all", k))
        ]
        if self.moe:
            sections.append((MOE_KEY, MOE_KEY, self.moe, MOE_FACTORS))
        lines = [*header, ""]
        for title, key, values, names in sections:
            lines.append(f"[{title}]")
            lines += [f"{name} = {values[name]:.6g}" for name in names]
            if key in self.notes:
                lines.append(f'fitted_on = "{self.notes[key]}"')
            lines += residuals.get(key, [])
            lines.append("")
        return "\n".join(lines)

    @classmethod
    def from_toml(cls, data: dict[str, Any]) -> FactorTable:
        families = {
            k: {n: float(v[n]) for n in HARDWARE_FACTORS} for k, v in data.get("family", {}).items()
        }
        engines = {
            k: {n: float(v[n]) for n in ENGINE_FACTORS} for k, v in data.get("engine", {}).items()
        }
        notes = {
            k: str(v["fitted_on"])
            for part in ("family", "engine")
            for k, v in data.get(part, {}).items()
            if "fitted_on" in v
        }
        moe_part = data.get(MOE_KEY, {})
        moe = {n: float(moe_part[n]) for n in MOE_FACTORS if n in moe_part}
        if "fitted_on" in moe_part:
            notes[MOE_KEY] = str(moe_part["fitted_on"])
        return cls(families, engines, notes, moe)


@cache
def _shipped_data() -> dict[str, Any]:
    from kvplan.spec.profiles import profiles_dir

    path = profiles_dir() / "step_model_defaults.toml"
    return tomllib.loads(path.read_text()) if path.is_file() else {}


def held_out_band(gpu_family: str, generation: str) -> dict[str, float] | None:
    """The shipped factors' held-out errors for runs on this GPU family under this engine
    generation (benchmarks/serving_fidelity.py, leave one sweep out): median absolute error per
    time figure and the runs behind it; None where no held-out run covers them (unvalidated)."""
    band = _shipped_data().get("band", {}).get(f"{gpu_family}/{generation}")
    return {k: float(v) for k, v in band.items()} if band else None


@cache
def shipped_table() -> FactorTable:
    data = _shipped_data()
    return FactorTable.from_toml(data) if data else FactorTable({}, {})
