"""A GPU's datasheet figures."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuSpec:
    """Dense (non-sparsity) datasheet figures for one GPU, with the datasheet named."""

    name: str
    display_name: str
    memory_gib: float
    hbm_tbps: float
    bf16_tflops: float
    source: str
    fp8_tflops: float | None = None  # None: no FP8 tensor cores
    host_link_gbps: float = 64.0
    nvme_gbps: float = 7.0
    price_per_hour: float | None = None
    # GPU-to-GPU link for tensor-parallel all-reduce (issue 15 step model; see profiles/gpus.toml).
    family: str = "other"
    interconnect: str = "pcie-gen4"
    interconnect_gbps: float = 32.0  # per GPU, per direction
    interconnect_latency_us: float = 15.0  # one small all-reduce (a kvplan assumption, not a datasheet figure)
    interconnect_source: str = "kvplan default: PCIe Gen4 x16"
    aliases: tuple[str, ...] = field(default_factory=tuple)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def fp8_support(self) -> bool:
        return self.fp8_tflops is not None

    def peak_flops(self, fp8: bool = False) -> float:
        tflops = self.fp8_tflops if (fp8 and self.fp8_tflops) else self.bf16_tflops
        return tflops * 1e12
