"""vLLM's hybrid KV cache manager arithmetic (and SGLang's pools), from a ModelSpec.

What vLLM v1 prints at startup for a model whose layers keep different amounts of KV
(sliding-window + full attention, linear attention / Mamba state + full attention) is not
"available bytes / bytes per token". It is the outcome of these steps (sources, vLLM
repository, in kvplan's own words; steps 1-6, the groups, are kv_groups.py's):

1. Each layer gets a spec with a page size: bytes of one block of `block_size` tokens of
   that layer (vllm/v1/kv_cache_interface.py: FullAttentionSpec / SlidingWindowSpec /
   ChunkedLocalAttentionSpec / MLAAttentionSpec `page_size_bytes`; a MambaSpec page is the
   whole per-sequence state, whatever the block size).
2. Hybrid attention + Mamba models first raise the attention block size until one attention
   page holds at least one Mamba state, rounded up to a kernel alignment (16 tokens; newer
   builds also 64), then pad the Mamba page up to the attention page
   (vllm/model_executor/models/config.py: HybridAttentionMambaModelConfig
   .verify_and_update_config; later moved to the platform interface).
3. `--disable-hybrid-kv-cache-manager` (and vLLM before the hybrid allocator, ~v0.9.2 /
   mid-2025) turn sliding-window and chunked layers into full-attention specs
   (kv_cache_utils.py: unify_hybrid_kv_cache_specs): every layer in one block table.
4. If every layer is full-length but page sizes differ, one group holds all layers and a
   block costs the sum of their pages (UniformTypeKVCacheSpecs).
5. Otherwise page sizes are unified to the largest: smaller attention pages get a larger
   block size (ratio must divide), Mamba pages are padded (unify_kv_cache_spec_page_size).
6. Layers are bucketed by spec; the group size is the smallest bucket, or the largest when
   the largest is under 1.5x the smallest; each bucket is split into ceil(n / size)
   groups, short groups padded (_get_kv_cache_groups_uniform_page_size).
7. num_blocks = available // page // group_size: group_size tensors, each shared by one
   layer of every group (get_kv_cache_config_from_groups, get_num_blocks).
8. A max_model_len request needs, per group, ceil(bytes / page) blocks: full ceil(L / bs);
   sliding ceil(min(W - 1 + T, L) / bs) + 1; chunked ceil(min(W + T, L) / bs), where T is
   the tokens in flight: max_num_batched_tokens, and from 0.26 (PR #47728) that many per
   concurrent batch, two under async scheduling (VllmConfig.max_in_flight_tokens); Mamba 1 (+1 with
   prefix caching's
   "align" mode, + the speculative tokens); concurrency = num_blocks / their sum
   (get_max_concurrency_for_kv_cache_config, `max_memory_usage_bytes` of each spec).
9. "GPU KV cache size: N tokens" was num_blocks // num_groups * min block size up to
   v0.19 (_report_kv_cache_config); from ~v0.20 (vLLM PR #40694 / #38364, issue #40691)
   it is int(concurrency * max_model_len) (get_kv_cache_capacity).

`true_concurrency` is kvplan's figure, not vLLM's: what a request at max_model_len holds once
its prefill is done (sliding layers keep their window, not window + a prefill chunk).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan import cdiv
from kvplan.engines.engine_releases import in_flight_batches, parse_version
from kvplan.engines.kv_groups import KERNEL_BLOCK_ALIGNMENT, KVCacheGroupSpec, kv_cache_groups
from kvplan.engines.pool_sizing import GPU_BLOCK_SIZE
from kvplan.engines.versions import Version
from kvplan.spec.attention_group import MambaSpec
from kvplan.spec.kv_format import KVFormat
from kvplan.spec.model import ModelSpec

# vLLM's CacheConfig.mamba_cache_mode: with prefix caching on, a model whose recurrent layers
# support it caches a state at every block ("all"; vLLM's SupportsMambaPrefixCaching models,
# the Mamba-2 families), any other only the state at each step's last block boundary ("align")
MAMBA_CACHE_MODES_SINCE = (0, 15, 0)
TOKENS_FROM_CONCURRENCY_SINCE = (0, 20)  # after v0.19.0 (issue #40691 shows the old formula there)
HYBRID_ALLOCATOR_SINCE = (0, 9, 2)  # before it, windowed layers were sized at full length


@dataclass(frozen=True)
class VllmKVCache:
    """What vLLM sizes and prints for one model, GPU budget and max_model_len."""

    groups: tuple[KVCacheGroupSpec, ...]
    available_bytes: float
    max_model_len: int
    max_num_batched_tokens: int  # the tokens in flight a windowed group reserves for (see step 8)
    state_blocks: int  # blocks per request of each Mamba group
    tokens_from_concurrency: bool

    @property
    def block_size(self) -> int:
        """Tokens per block of the full-attention groups (after any Mamba-driven raise)."""
        return min(g.block_size for g in self.groups if not g.is_state)

    @property
    def page_size_bytes(self) -> int:
        return self.groups[0].page_size_bytes

    @property
    def block_bytes(self) -> int:
        """What one block id costs across the shared tensors."""
        return self.groups[0].block_bytes

    @property
    def num_blocks(self) -> int:
        g = self.groups[0]
        if g.uniform_type_pages:
            return max(0, int(self.available_bytes // g.block_bytes))
        return max(0, int(self.available_bytes // g.page_size_bytes // g.group_size))

    @property
    def pool_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def blocks_per_request(self) -> int:
        return sum(
            g.blocks_per_request(self.max_model_len, self.max_num_batched_tokens, self.state_blocks)
            for g in self.groups
        )

    @property
    def reported_concurrency(self) -> float:
        """'Maximum concurrency for M tokens per request: X' (printed to 2 decimals)."""
        return self.num_blocks / self.blocks_per_request

    @property
    def reported_tokens(self) -> int:
        """'GPU KV cache size: N tokens'."""
        if self.tokens_from_concurrency:
            return int(self.reported_concurrency * self.max_model_len)
        return self.num_blocks // len(self.groups) * min(g.block_size for g in self.groups)

    @property
    def true_concurrency(self) -> float:
        """max_model_len requests that fit once prefilled (sliding layers hold their window
        only)."""
        held = sum(g.blocks_held(self.max_model_len, self.state_blocks) for g in self.groups)
        return self.num_blocks / held

    @property
    def fits_one_request(self) -> bool:
        """vLLM refuses to start when one max_model_len request's blocks exceed the memory
        (kv_cache_utils._check_enough_kv_cache_memory)."""
        return (
            self.available_bytes > 0
            and self._needed_bytes(self.max_model_len) <= self.available_bytes
        )

    @property
    def estimated_max_model_len(self) -> int:
        """The length vLLM's refusal suggests: the longest request whose blocks fit (binary
        search)."""
        lo, hi, best = 1, self.max_model_len, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            if self._needed_bytes(mid) <= self.available_bytes:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best

    def _needed_bytes(self, length: int) -> int:
        blocks = sum(
            g.blocks_per_request(length, self.max_num_batched_tokens, self.state_blocks)
            for g in self.groups
        )
        return blocks * self.block_bytes

    @property
    def padding_bytes(self) -> float:
        """Pool bytes that hold no data when it is filled with max_model_len requests: padding
        layers of short groups and Mamba pages padded up to the attention page."""
        blocks = [
            (
                g.blocks_per_request(
                    self.max_model_len, self.max_num_batched_tokens, self.state_blocks
                ),
                g,
            )
            for g in self.groups
        ]
        per_request = sum(n * g.block_bytes for n, g in blocks)
        wasted = sum(n * g.wasted_bytes_per_block for n, g in blocks)
        return self.pool_bytes * wasted / per_request if per_request else 0.0


def vllm_kv_cache(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    available_bytes_per_gpu: float,
    max_model_len: int,
    block_size: int = GPU_BLOCK_SIZE,
    hybrid_manager: bool = True,
    *,
    max_num_batched_tokens: int = 2048,
    vllm_version: str | Version | None = None,
    mamba_cache_mode: str = "none",
    num_speculative_tokens: int = 0,
    mamba_alignment: int = KERNEL_BLOCK_ALIGNMENT,
    draft_layers: int = 0,
    concurrent_batches: int | None = None,
) -> VllmKVCache:
    """vLLM v1's KV cache sizing for a model on one GPU, given the "Available KV cache memory".

    max_num_batched_tokens: the scheduler's token budget (vLLM's API-server default is 2048,
    8192 on >= 70 GiB GPUs other than A100); sliding-window groups reserve window - 1 + it
    (from 0.26, + it per batch in flight).
    vllm_version: None means the newest behaviour; before ~0.9.2 windowed layers are sized at
    full length, up to 0.19 the token figure is num_blocks // groups * block size.
    mamba_cache_mode: "none" (1 state block per request), "align" (prefix caching on a hybrid
    model: 2), "all" (one per block of tokens); num_speculative_tokens adds blocks to Mamba
    groups. mamba_alignment: the token multiple the attention block is raised to (16; some
    newer builds 64). draft_layers: an MTP / EAGLE drafter's full-attention layers.
    concurrent_batches: the batches in flight a windowed group reserves for; None: the
    release's (two under async scheduling from 0.26; vLLM's CPU backend runs one).
    """
    if max_model_len <= 0:
        raise ValueError("max_model_len must be positive")
    version = (
        vllm_version
        if isinstance(vllm_version, tuple) or vllm_version is None
        else parse_version(vllm_version)
    )
    if version is not None and version < HYBRID_ALLOCATOR_SINCE and not model.has_state:
        hybrid_manager = False
    groups = kv_cache_groups(
        model,
        fmt,
        tp,
        block_size,
        hybrid_manager=hybrid_manager,
        mamba_alignment=mamba_alignment,
        draft_layers=draft_layers,
    )
    mode = mamba_cache_mode.lower()
    if mode not in ("none", "align", "all"):
        raise ValueError(f"mamba_cache_mode must be none, align or all, got {mamba_cache_mode!r}")
    state_block_size = min(g.block_size for g in groups)
    state_blocks = (
        cdiv(max_model_len, state_block_size) if mode == "all" else (2 if mode == "align" else 1)
    ) + num_speculative_tokens
    from_concurrency = version is None or version >= TOKENS_FROM_CONCURRENCY_SINCE
    batches = in_flight_batches(version) if concurrent_batches is None else concurrent_batches
    in_flight = max_num_batched_tokens * batches
    return VllmKVCache(
        groups,
        float(available_bytes_per_gpu),
        max_model_len,
        in_flight,
        state_blocks,
        from_concurrency,
    )


def prefix_caching_mamba_mode(
    model: ModelSpec, version: Version | None, prefix_caching: bool
) -> str:
    """The mamba_cache_mode vLLM sets for a hybrid model (its model-config hook): "none" without
    prefix caching, state layers or a release that has the modes (before 0.15 kvplan counts one
    state block per request, a named simplification), else "all" where every recurrent layer
    is Mamba-2 and "align" otherwise (Gated DeltaNet: Qwen3-Next, Qwen3.5)."""
    states = [g for g in model.groups if isinstance(g, MambaSpec)]
    if (
        not prefix_caching
        or not states
        or (version is not None and version < MAMBA_CACHE_MODES_SINCE)
    ):
        return "none"
    return "all" if all(g.mixer == "mamba2" for g in states) else "align"


def state_block_alignment(model: ModelSpec, mode: str) -> int:
    """The multiple the attention block is raised to for a hybrid model: the kernels' 16
    tokens, or in "all" mode lcm(the recurrent scan's chunk, 16), so that a block boundary is a
    chunk boundary (vLLM's hybrid block-size alignment)."""
    if mode == "all" and model.state_chunk_size:
        return math.lcm(model.state_chunk_size, KERNEL_BLOCK_ALIGNMENT)
    return KERNEL_BLOCK_ALIGNMENT
