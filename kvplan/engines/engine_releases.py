"""What changed in vLLM's startup memory profile, release by release.

Each behaviour below was read in vLLM's own released sources (the sdists on PyPI, compared on
both sides of the change) and is named by the pull request that made it. A log that shows a
version gets that release's behaviour; a log that shows only a date gets the last release on
or before it (profiles/engine_releases.toml, PyPI upload dates); a plan that names no version
gets the newest behaviour.

The V1 engine's profiling run ends with a dummy sampler pass over `max_num_seqs` rows of the
full vocabulary (PR #13594, 0.8.0). What that pass holds at its peak depends on which top-k /
top-p implementation runs, so it is counted per path in bytes per (row x vocab) element, from
the tensors each path allocates (vllm/v1/sample/ops/topk_topp_sampler.py, sampler.py):

- "sort" (PyTorch sort): bf16 logits 2 + fp32 copy 4 + sorted values 4 + int64 indices 8 +
  softmax of the sorted values 4 + the scattered result 4 + two bool masks 2 = 28;
  "sort-copy" adds the out-of-place cumsum of 0.8.0-0.8.2 (4 more): 32.
- "flashinfer" (FlashInfer's fused top-k/top-p from logits): bf16 2 + fp32 4 + its softmax 4 = 10.
- "triton" (in-place Triton top-k/top-p, PR #33538, then softmax and exponential noise):
  bf16 2 + fp32 4 + probs 4 + noise 4 = 14.
- "v2" (Model Runner V2's dummy batch needs no logits processing and samples with a Gumbel
  kernel on the logits as they are): bf16 logits 2.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache

from kvplan.engines.versions import Version, on_or_after, parse_version
from kvplan.spec import ModelSpec
from kvplan.spec.profiles import profiles_dir
from kvplan.spec.setting_error import SettingError

SAMPLER_BYTES_PER_LOGIT = {
    "sort-copy": 32.0,
    "sort": 28.0,
    "flashinfer": 10.0,
    "triton": 14.0,
    "v2": 2.0,
}
SAMPLER_PATH_NAMES = {
    "sort-copy": "PyTorch sort top-k/top-p, 32 B per logit",
    "sort": "PyTorch sort top-k/top-p, 28 B per logit",
    "flashinfer": "FlashInfer top-k/top-p, 10 B per logit",
    "triton": "Triton top-k/top-p, 14 B per logit",
    "v2": "Model Runner V2, 2 B per logit",
}
# The V1 model runner's default path from each release on (the dummy run's metadata asks for
# top_k = vocab - 1 and top_p = 0.9 in every release, so top-k/top-p always runs).
V1_SAMPLER_PATHS: tuple[tuple[Version, str, str], ...] = (
    ((0, 8, 0), "sort-copy", "PR #13594 profiles the sampler; PyTorch sort, out-of-place cumsum"),
    ((0, 8, 3), "sort", "cumsum written in place"),
    (
        (0, 9, 0),
        "flashinfer",
        "PR #15777: FlashInfer >= 0.2.3 samples when installed (vLLM's Docker image has it; "
        "a pip install without it logs 'Falling back to the PyTorch-native implementation')",
    ),
    ((0, 11, 1), "sort", "PR #26859: FlashInfer sampling off by default"),
    ((0, 17, 0), "triton", "PR #33538: Triton top-k/top-p kernels"),
)
# Model Runner V2 became the default runner in steps (vllm/config/vllm.py use_v2_model_runner).
V2_RUNNER_FIRST_MODELS = (0, 23, 0)  # Llama, Mistral and Qwen3 dense, unquantized checkpoints
V2_RUNNER_FIRST_MODEL_TYPES = frozenset({"llama", "mistral", "qwen3"})
V2_RUNNER_DENSE = (0, 25, 0)  # every model without MoE or Mamba / linear-attention state layers
V2_RUNNER_ALL = (0, 29, 0)  # every model
# PR #38284 (0.20.0): the CUDA-graph memory estimate enters the KV budget by default and the
# default gpu_memory_utilization rises from 0.9 to 0.92. (The env var's comment says 0.21.0; the
# 0.20.0 sources already carry both.)
CUDA_GRAPHS_IN_BUDGET = (0, 20, 0)
UTILIZATION_092 = (0, 20, 0)
# PR #47728 (0.26.0): sliding-window and chunked layers reserve for every batch in flight,
# max_concurrent_batches x max_num_batched_tokens; async scheduling (on by default) keeps two.
IN_FLIGHT_BATCHES = (0, 26, 0)
# The scheduler's batch limits when none is given (EngineArgs._set_default_args /
# get_batch_defaults), V1: 1024 sequences and, by device name, 8192 tokens for `vllm serve`
# (16384 for the offline LLM class) on H100/H200, else 2048 (8192); 0.8.4 gave the other GPUs
# 256 sequences (PR #16158); 0.8.5 chose by memory, >= 70 GiB (PR #17073); 0.9.0 left A100s
# out (PR #17885); 0.28.0 gives >= 160 GiB GPUs (B200, MI300X) 16384 tokens in both.
V1_SEQS_BY_DEVICE = (0, 8, 4)
V1_DEFAULTS_BY_MEMORY = (0, 8, 5)
V1_DEFAULTS_NOT_A100 = (0, 9, 0)
LARGEST_BATCH_DEFAULTS = (0, 28, 0)
HIGH_END_GIB, LARGEST_GIB = 70, 160
# V0: chunked prefill became the default above 32K tokens in 0.5.4 (PR #6666), with a 512-token
# budget; otherwise a step takes one whole prompt of up to max(max_model_len, 2048) tokens.
LONG_CONTEXT = 32768
V0_LONG_CONTEXT_CHUNKED = (0, 5, 4)
V0_CHUNK_BUDGET = 512


@dataclass(frozen=True)
class BatchDefaults:
    """The scheduler limits vLLM starts with when the command line sets none."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool


# `vllm bench`'s --random-range-ratio read as a floor (lengths in [len x r, len], 1.0 = fixed)
# until 0.8.4 (benchmarks/benchmark_dataset.py), symmetric [len x (1 - r), len x (1 + r)] since.
RANGE_RATIO_SYMMETRIC = (0, 8, 4)


ENGINE_NAMES = ("vllm", "sglang")
GENERATIONS = ("vllm-v0", "vllm-v1", "sglang")
V1_DEFAULT_FROM = (0, 8, 0)  # vLLM 0.8 made the V1 engine the default
# the engine every command models unless told otherwise (its generation by the release)
DEFAULT_ENGINE_NAME = "vllm"


def engine_generation(engine: str | None, version: str | None = None) -> str:
    """Which engine generation runs: 'vllm-v0' for vLLM before 0.8, 'vllm-v1' after (and when
    no version is given), 'sglang'. A generation name is accepted as the engine itself."""
    name = (engine or DEFAULT_ENGINE_NAME).strip().lower()
    if name in GENERATIONS:
        return name
    if name not in ENGINE_NAMES:
        raise SettingError("{engine} must be vllm or sglang, got '{got}'", got=engine)
    if name == "sglang":
        return "sglang"
    release = parse_version(version)
    return "vllm-v0" if release is not None and release < V1_DEFAULT_FROM else "vllm-v1"


@cache
def vllm_releases() -> tuple[tuple[str, Version], ...]:
    """(date, version) of every release in profiles/engine_releases.toml, oldest first."""
    data = tomllib.loads((profiles_dir() / "engine_releases.toml").read_text())
    rows = []
    for text, released in data["vllm"]["releases"].items():
        version = parse_version(text)
        if version is not None:
            rows.append((str(released), version))
    return tuple(sorted(rows, key=lambda row: (row[0], row[1])))


def version_on(date: str | None) -> Version | None:
    """The last vLLM release on or before `date` (YYYY-MM-DD): the newest a log of that day can
    show; None without a date or when the date is before every listed release."""
    if not date:
        return None
    released = [version for day, version in vllm_releases() if day <= date[:10]]
    return max(released) if released else None


def uses_v2_runner(model: ModelSpec, version: Version | None) -> bool:
    """Whether vLLM runs `model` on Model Runner V2 by default in this release."""
    if on_or_after(version, V2_RUNNER_ALL):
        return True
    has_state = model.has_state
    if on_or_after(version, V2_RUNNER_DENSE):
        return not model.params.is_moe and not has_state
    if on_or_after(version, V2_RUNNER_FIRST_MODELS):
        quantized = model.checkpoint_quant is not None or model.weight_dtype not in (
            "bf16",
            "fp16",
            "fp32",
        )
        return (
            model.model_type in V2_RUNNER_FIRST_MODEL_TYPES
            and not model.params.is_moe
            and not quantized
        )
    return False


def v1_sampler_path(model: ModelSpec, version: Version | None) -> str | None:
    """The top-k/top-p path the V1 engine's dummy sampler run takes by default; None before
    the sampler was profiled (0.8.0)."""
    if uses_v2_runner(model, version):
        return "v2"
    chosen = None
    for release, path, _ in V1_SAMPLER_PATHS:
        if on_or_after(version, release):
            chosen = path
    return chosen


def in_flight_batches(version: Version | None) -> int:
    """Batches of max_num_batched_tokens a sliding-window group reserves for."""
    return 2 if on_or_after(version, IN_FLIGHT_BATCHES) else 1
