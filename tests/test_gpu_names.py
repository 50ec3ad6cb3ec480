"""GPU catalog (profiles/gpus.toml) and reading GPU names as logs and pages write them."""

from __future__ import annotations

import tomllib

import pytest

from kvplan.spec.gpu_names import match_gpu_name, read_gpu_name
from kvplan.spec.profiles import gpu_profiles, profiles_dir
from kvplan.spec.resolve import load_gpu

# Names as startup logs, nvidia-smi, torch.cuda.get_device_name() and benchmark pages write them.
EXAMPLES = {
    "NVIDIA A100-SXM4-40GB": "a100-40gb",
    "NVIDIA A100-SXM4-80GB": "a100-80gb",
    "A100 80GB PCIe": "a100-80gb-pcie",
    "NVIDIA A100 80G": "a100-80gb",
    "NVIDIA A100 SXM 80GB": "a100-80gb",
    "NVIDIA A100": "a100-80gb",
    "H100 NVL (94GB)": "h100-nvl",
    "NVIDIA H100 80GB HBM3": "h100-80gb",
    "NVIDIA H100 80GB HBM3 (H100 SXM5)": "h100-80gb",
    "NVIDIA H100 PCIe": "h100-pcie",
    "H100": "h100-80gb",
    "8xH100": "h100-80gb",
    "GH200 96GB": "gh200",
    "NVIDIA GH200 480GB": "gh200",
    "NVIDIA H200": "h200",
    "H20": "h20",
    "NVIDIA L4 (24 GB)": "l4",
    "NVIDIA L40S": "l40s",
    "L20": "l20",
    "Tesla T4": "t4",
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "V100S": "v100s-pcie",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "RTX 3090": "rtx-3090",
    "3090": "rtx-3090",
    "RTX4060": "rtx-4060",
    "GeForce RTX 4090": "rtx-4090",
    "RTX 5090": "rtx-5090",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
    "NVIDIA A10": "a10",
    "A10G": "a10g",
    "AMD Instinct MI300X (192 GB)": "mi300x",
    "AMD Instinct MI300X (192GiB, 750W)": "mi300x",
    "MI355X": "mi355x",
    "NVIDIA B200": "b200",
    "MIG 1g.10gb on A100-80GB": "a100-80gb-mig-1g.10gb",
    "NVIDIA A100-SXM4-80GB MIG 1g.10gb": "a100-80gb-mig-1g.10gb",
    "H100 MIG 3g.40gb": "h100-mig-3g.40gb",
    "NVIDIA H200 MIG 1g.18gb": "h200-mig-1g.18gb",
    # more of the same mechanism: form words, units, counts, glued sizes, series prefixes
    "NVIDIA H100 SXM": "h100-80gb",
    "NVIDIA A100 SXM": "a100-80gb",
    "NVIDIA A100 (memory variant not stated)": "a100-80gb",
    "NVIDIA H100 (Modal)": "h100-80gb",
    "A100-80": "a100-80gb",
    "A10040GB": "a100-40gb",
    "2x 3090": "rtx-3090",
    "RTX 3090 Ti": "rtx-3090-ti",
    "NVIDIA RTX A6000": "rtx-a6000",
    "RTX 6000 Ada Generation": "rtx-6000-ada",
    "NVIDIA H200 NVL": "h200-nvl",
    "GH200 144GB HBM3e": "gh200-144gb",
    "H100 on GH200 96GB": "gh200",
    "MI250X 128GB": "mi250x-module",
    "AMD Instinct MI250X": "mi250x",
    "NVIDIA GB200": "gb200",
    "NVIDIA L40": "l40",
}


@pytest.mark.parametrize("text,expected", sorted(EXAMPLES.items()))
def test_reads_gpu_names(text: str, expected: str) -> None:
    assert read_gpu_name(text).name == expected


def test_every_profile_name_and_alias_still_reads_exactly() -> None:
    for name, spec in gpu_profiles().items():
        assert read_gpu_name(name) is spec
        assert load_gpu(name) is spec
        for alias in spec.aliases:
            assert read_gpu_name(alias) is spec, alias
            assert read_gpu_name(alias.upper()) is spec, alias


@pytest.mark.parametrize(
    "text",
    ["NVIDIA A100", "H100", "8xH100", "NVIDIA H200", "NVIDIA A100 80G", "NVIDIA GH200 480GB"],
)
def test_names_that_leave_a_choice_say_what_was_assumed(text: str) -> None:
    match = match_gpu_name(text)
    assert match.defaulted
    assert "default" in match.note


@pytest.mark.parametrize(
    "text",
    ["NVIDIA A100-SXM4-40GB", "H100 NVL (94GB)", "NVIDIA H100 PCIe", "NVIDIA L40S", "a100-80gb"],
)
def test_names_that_settle_the_variant_are_not_defaulted(text: str) -> None:
    assert not match_gpu_name(text).defaulted


def test_superchip_memory_is_not_gpu_memory() -> None:
    match = match_gpu_name("NVIDIA GH200 480GB")
    assert match.spec.memory_gib == 96
    assert "480 GB" in match.note


@pytest.mark.parametrize(
    "text,expected,not_expected",
    [
        ("NVIDIA L40S", "l40s", "l4"),
        ("NVIDIA L40", "l40", "l4"),
        ("NVIDIA A100", "a100-80gb", "a10"),
        ("A10G", "a10g", "a10"),
        ("NVIDIA H200", "h200", "h20"),
        ("NVIDIA GB200", "gb200", "b200"),
        ("V100S", "v100s-pcie", "v100-sxm2-16gb"),
        ("RTX 3090 Ti", "rtx-3090-ti", "rtx-3090"),
    ],
)
def test_products_match_on_token_boundaries(text: str, expected: str, not_expected: str) -> None:
    name = read_gpu_name(text).name
    assert name == expected and name != not_expected


@pytest.mark.parametrize(
    "text", ["Intel Gaudi 2", "NVIDIA RTX 6000", "Quadro RTX 8000", "TPU v5e", "", "   "]
)
def test_unknown_names_raise_with_the_fix(text: str) -> None:
    with pytest.raises(ValueError, match="kvplan profiles gpus.*gpu_memory_gib"):
        read_gpu_name(text)


def test_unknown_mig_profile_raises_rather_than_reading_the_whole_card() -> None:
    # a slice has far less memory than its card: falling back to the card would overstate it
    with pytest.raises(ValueError, match="MIG 2g.10gb"):
        read_gpu_name("NVIDIA A100 MIG 2g.10gb")


# ---- the catalog ----


def _entries() -> list[dict]:
    return tomllib.loads((profiles_dir() / "gpus.toml").read_text())["gpu"]


def test_catalog_has_at_least_32_gpus_besides_mig_slices() -> None:
    assert sum(1 for spec in gpu_profiles().values() if spec.mig is None) >= 32


def test_every_entry_names_its_source_and_product() -> None:
    for spec in gpu_profiles().values():
        assert spec.source and spec.interconnect_source, spec.name
        assert spec.product and spec.form, spec.name
        assert (spec.driver_memory_gib is None) == (spec.driver_memory_source is None), spec.name
        if spec.driver_memory_gib is not None:  # CUDA reports a little less than the datasheet
            assert 0.9 * spec.memory_gib < spec.driver_memory_gib <= spec.memory_gib, spec.name


def test_names_and_aliases_are_unique() -> None:
    seen: set[str] = set()
    for entry in _entries():
        for name in [entry["name"], *entry.get("aliases", [])]:
            assert name.lower() not in seen, name
            seen.add(name.lower())


def test_each_product_with_variants_has_one_default() -> None:
    products: dict[str, list] = {}
    for spec in gpu_profiles().values():
        if spec.mig is None:
            products.setdefault(spec.product, []).append(spec)
    for product, variants in products.items():
        defaults = [s for s in variants if s.product_default]
        assert len(defaults) == (1 if len(variants) > 1 else 0), product
        if len(variants) > 1:  # a name with the bare product reads as the default
            assert read_gpu_name(f"NVIDIA {product.upper()}") is defaults[0], product


def test_exact_aliases_win_over_the_default_variant() -> None:
    # the profile alias 'a100' has always meant the 40GB card; a logged "NVIDIA A100" means the 80GB
    assert read_gpu_name("a100").name == "a100-40gb"
    assert read_gpu_name("NVIDIA A100").name == "a100-80gb"
    assert read_gpu_name("h100").name == read_gpu_name("NVIDIA H100").name == "h100-80gb"


def test_mig_slices_are_shares_of_their_parent() -> None:
    catalog = gpu_profiles()
    slices = [s for s in catalog.values() if s.mig]
    wanted = {"a100-80gb-mig-1g.10gb", "h100-mig-1g.10gb", "h200-mig-1g.18gb", "gh200-mig-1g.12gb"}
    assert wanted <= {s.name for s in slices}
    for spec in slices:
        parent = catalog[spec.mig_parent]
        assert spec.product == parent.product and spec.family == parent.family
        assert spec.memory_gib == float(spec.mig.split(".")[1].removesuffix("gb"))
        assert spec.memory_gib < parent.memory_gib and spec.hbm_tbps < parent.hbm_tbps
        assert spec.bf16_tflops < parent.bf16_tflops
        assert "MIG User Guide" in spec.source
    one_g = catalog["h100-mig-1g.10gb"]  # 1/7 of the SMs, 1/8 of the memory slices
    assert one_g.bf16_tflops == pytest.approx(989.4 / 7, rel=1e-3)
    assert one_g.hbm_tbps == pytest.approx(3.35 / 8, rel=1e-3)


def test_the_shipped_bands_name_gpu_families_the_catalog_has() -> None:
    bands = tomllib.loads((profiles_dir() / "step_overheads.toml").read_text())["bands"]
    families = {spec.family for spec in gpu_profiles().values()}
    assert {band["gpu_family"] for band in bands} - {"*"} <= families


# Figures checked against the datasheet each source names (dense, no sparsity).
@pytest.mark.parametrize(
    "name,field,value",
    [
        ("h100-80gb", "hbm_tbps", 3.35),  # NVIDIA H100 datasheet, SXM: 3.35 TB/s
        ("h100-80gb", "bf16_tflops", 989.4),  # 1,979* BF16 with sparsity / 2
        ("a100-80gb-pcie", "hbm_tbps", 1.935),  # NVIDIA A100 datasheet, 80GB PCIe: 1,935 GB/s
        ("a100-80gb-pcie", "bf16_tflops", 312),
        ("h100-nvl", "memory_gib", 94),  # NVIDIA H100 datasheet, NVL: 94 GB, 3.9 TB/s
        ("h100-nvl", "hbm_tbps", 3.9),
        ("l40", "bf16_tflops", 181.05),  # NVIDIA L40 datasheet: BF16 181.05 | 362.1*
        ("rtx-4090", "bf16_tflops", 165.2),  # Ada whitepaper: BF16 FP32-accumulate 165.2 | 330.4*
        ("rtx-4090", "hbm_tbps", 1.008),
        ("v100s-pcie", "hbm_tbps", 1.134),  # NVIDIA V100S datasheet: 1,134 GB/s, 130 TFLOPS tensor
        ("a40", "hbm_tbps", 0.696),  # NVIDIA A40 datasheet: 696 GB/s, BF16 149.7 | 299.4*
        ("mi355x", "memory_gib", 288),  # AMD MI355X data sheet: 288 GB HBM3E, 8 TB/s
    ],
)
def test_datasheet_figures(name: str, field: str, value: float) -> None:
    assert getattr(gpu_profiles()[name], field) == pytest.approx(value)


def test_driver_memory_comes_from_the_logged_records() -> None:
    # startup logs in shared/data/serving/vllm_startup_logs.jsonl
    catalog = gpu_profiles()
    assert (
        catalog["rtx-3090"].driver_memory_gib == 23.58
        and "rec001" in catalog["rtx-3090"].driver_memory_source
    )
    assert (
        catalog["rtx-5090"].driver_memory_gib == 31.4
        and "rec049" in catalog["rtx-5090"].driver_memory_source
    )
    assert (
        catalog["rtx-4060"].driver_memory_gib == 8.0
        and "rec013" in catalog["rtx-4060"].driver_memory_source
    )
