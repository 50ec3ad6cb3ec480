"""A GPU's datasheet figures."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan import GIB

# Driver/datasheet share for HBM GPUs observed in real logs (A100-40GB 39.50/40 = 0.988,
# H100 79.22/80 = 0.990). GDDR cards with ECC on lose more (L4: 22.49/24) and need their own
# figure; GeForce cards without ECC report about 0.98 (RTX 3090 23.58/24; profiles/gpus.toml).
DRIVER_SHARE_UNOBSERVED = 0.99
GDDR_ECC_SHARE = (
    15 / 16
)  # inline ECC on data-center GDDR6 boards keeps one part in 16 for check bits


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
    # GPU-to-GPU link for tensor-parallel all-reduce (the step model; see profiles/gpus.toml).
    family: str = "other"
    interconnect: str = "pcie-gen4"
    interconnect_gbps: float = 32.0  # per GPU, per direction
    interconnect_latency_us: float = (
        15.0  # one small all-reduce (a kvplan assumption, not a datasheet figure)
    )
    interconnect_source: str = "kvplan default: PCIe Gen4 x16"
    aliases: tuple[str, ...] = field(default_factory=tuple)
    # What CUDA reports as total memory (torch.cuda.mem_get_info, vLLM's total_gpu_memory):
    # less than the datasheet's capacity (ECC, driver reservations). None: not observed.
    driver_memory_gib: float | None = None
    driver_memory_source: str | None = None
    gddr_ecc: bool = False  # a GDDR board that ships with inline ECC on (profiles/gpus.toml header)
    # How names are read (kvplan/spec/gpu_names.py): the product as vendors write it ("a100",
    # "rtx 4090"), the package ("sxm", "pcie", "nvl", ...), whether this is the variant assumed
    # when a name gives no size or form, and for a MIG slice its profile ("1g.10gb") and parent.
    product: str | None = None
    form: str | None = None
    product_default: bool = False
    mig: str | None = None
    mig_parent: str | None = None
    # The system whose measured kernel tables NVIDIA's aiconfigurator ships for this GPU
    # (kvplan.sim.ops.aic_source); None: it has none, and the roofline times it.
    measured_system: str | None = None

    @property
    def usable_memory_bytes(self) -> float:
        """Total memory as the CUDA driver exposes it; when unobserved, the datasheet figure x 0.99,
        or x 15/16 on a GDDR board with inline ECC."""
        share = GDDR_ECC_SHARE if self.gddr_ecc else DRIVER_SHARE_UNOBSERVED
        return (self.driver_memory_gib or self.memory_gib * share) * GIB

    @property
    def fp8_support(self) -> bool:
        return self.fp8_tflops is not None

    def peak_flops(self, fp8: bool = False) -> float:
        tflops = self.fp8_tflops if (fp8 and self.fp8_tflops) else self.bf16_tflops
        return tflops * 1e12
