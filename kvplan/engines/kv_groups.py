"""vLLM v1's KV cache groups for a model on one GPU: steps 1-6 of hybrid_kv.py's account (each
layer's spec and page size, the block size a Mamba state raises, the hybrid manager switched off,
page unification and the bucketing of layers into padded groups).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan import cdiv
from kvplan.engines.pool_sizing import GPU_BLOCK_SIZE
from kvplan.spec.attention_group import (
    AttentionGroup,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    HeadedAttentionSpec,
    LatentSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    WindowedAttentionSpec,
)
from kvplan.spec.kv_format import KVFormat
from kvplan.spec.model import ModelSpec


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """One vLLM KV cache group: layers sharing one block table.

    `num_layers` are the model's layers in the group, `group_size` the layers every group is
    padded to; `page_size_bytes` is one layer's page after unification (what num_blocks is
    counted in), `real_page_size_bytes` what the layer's data needs of it.
    """

    # the layers' spec class (a windowed layer without the hybrid manager is full attention)
    spec: type[AttentionGroup]
    num_layers: int
    group_size: int
    block_size: int
    page_size_bytes: int
    real_page_size_bytes: int
    window: int | None = None
    # a single all-layers group with per-layer page sizes (UniformTypeKVCacheSpecs): a block
    # then costs the sum of the layers' pages
    uniform_type_pages: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def is_state(self) -> bool:
        return issubclass(self.spec, MambaSpec)

    @property
    def padding_layers(self) -> int:
        return self.group_size - self.num_layers if not self.uniform_type_pages else 0

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of this group across the shared tensors (padding included)."""
        if self.uniform_type_pages:
            return sum(self.uniform_type_pages)
        return self.page_size_bytes * self.group_size

    @property
    def wasted_bytes_per_block(self) -> int:
        """Bytes of one block that hold no data: padding layers and padded (Mamba) pages."""
        if self.uniform_type_pages:
            return 0
        return self.padding_layers * self.page_size_bytes + self.num_layers * (
            self.page_size_bytes - self.real_page_size_bytes
        )

    @property
    def span(self) -> int:
        """A sliding or chunked group's window, in tokens."""
        if self.window is None:
            raise ValueError(f"a {self.kind} KV group needs its window")
        return self.window

    def blocks_per_request(
        self, max_model_len: int, max_num_batched_tokens: int, state_blocks: int = 1
    ) -> int:
        """Blocks vLLM reserves per max_model_len request (the spec's max_memory_usage_bytes /
        page)."""
        if issubclass(self.spec, SlidingWindowSpec):
            return (
                cdiv(min(self.span - 1 + max_num_batched_tokens, max_model_len), self.block_size)
                + 1
            )
        if issubclass(self.spec, ChunkedLocalAttentionSpec):
            return cdiv(min(self.span + max_num_batched_tokens, max_model_len), self.block_size)
        if self.is_state:
            return state_blocks
        return cdiv(max_model_len, self.block_size)

    def blocks_held(self, max_model_len: int, state_blocks: int = 1) -> int:
        """Blocks a max_model_len request still holds after its prefill (windows respected)."""
        full = cdiv(max_model_len, self.block_size)
        if issubclass(self.spec, SlidingWindowSpec):
            return min(full, cdiv(self.span - 1, self.block_size) + 1)
        if issubclass(self.spec, ChunkedLocalAttentionSpec):
            return min(full, cdiv(self.span, self.block_size))
        if self.is_state:
            return state_blocks
        return full


@dataclass(frozen=True)
class _LayerType:
    spec: type[AttentionGroup]
    num_layers: int
    bytes_per_token: int  # per layer; 0 for state
    state_bytes: int  # per layer, state kinds only
    window: int | None


def _layer_types(
    model: ModelSpec, fmt: KVFormat, tp: int, hybrid_manager: bool, draft_layers: int = 0
) -> list[_LayerType]:
    types = []
    for g in model.groups:
        if isinstance(g, MambaSpec):
            types.append(
                _LayerType(MambaSpec, g.num_layers, 0, g.state_bytes_per_layer // tp, None)
            )
            continue
        spec: type[AttentionGroup] = type(g)
        window = g.window
        if not hybrid_manager and isinstance(g, WindowedAttentionSpec):
            spec, window = FullAttentionSpec, None  # a FullAttentionSpec that remembers its window
        per_token = int(math.ceil(g.bytes_per_token_layer(fmt, tp)))
        types.append(_LayerType(spec, g.num_layers, per_token, 0, window))
    if draft_layers:
        # an MTP / EAGLE drafter's layers: full attention with the model's full-attention shape
        base = next(t for t in types if t.spec is FullAttentionSpec)
        types.append(_LayerType(FullAttentionSpec, draft_layers, base.bytes_per_token, 0, None))
    # the same spec in two ModelSpec groups is one vLLM bucket
    merged: dict[tuple, _LayerType] = {}
    for t in types:
        key = (t.spec, t.bytes_per_token, t.state_bytes, t.window)
        if key in merged:
            old = merged[key]
            merged[key] = _LayerType(
                t.spec, old.num_layers + t.num_layers, t.bytes_per_token, t.state_bytes, t.window
            )
        else:
            merged[key] = t
    return list(merged.values())


# tokens: the attention kernels' block multiple, to which a hybrid model's raised block is aligned
KERNEL_BLOCK_ALIGNMENT = 16


def mamba_block_size(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    block_size: int = GPU_BLOCK_SIZE,
    alignment: int = KERNEL_BLOCK_ALIGNMENT,
) -> int:
    """The attention block size vLLM uses for an attention + Mamba/linear-attention model.

    The smallest multiple of `alignment` tokens whose attention page (the full-attention layer's
    bytes per token) holds one layer's state; kept if the user's block size is already larger
    (HybridAttentionMambaModelConfig.verify_and_update_config). Other models: block_size.
    """
    states = [g for g in model.groups if isinstance(g, MambaSpec)]
    attention = [g for g in model.groups if isinstance(g, (HeadedAttentionSpec, MLAAttentionSpec))]
    if not states or not attention:
        return block_size
    page_of = next((g for g in attention if isinstance(g, FullAttentionSpec)), attention[0])
    per_token = int(math.ceil(page_of.bytes_per_token_layer(fmt, tp)))
    state = max(g.state_bytes_per_layer // tp for g in states)
    needed = alignment * cdiv(state, alignment * per_token)
    return max(block_size, needed)


def kv_cache_groups(
    model: ModelSpec,
    fmt: KVFormat,
    tp: int,
    block_size: int = GPU_BLOCK_SIZE,
    *,
    hybrid_manager: bool = True,
    mamba_alignment: int = KERNEL_BLOCK_ALIGNMENT,
    draft_layers: int = 0,
) -> tuple[KVCacheGroupSpec, ...]:
    """vLLM's KV cache groups for a model on one GPU (kv_cache_utils.get_kv_cache_groups).

    One group per layer type (or several per type, each padded to the common group size), every
    group's page unified to the largest page. draft_layers adds an MTP / EAGLE drafter's
    full-attention layers (they join the target model's groups).
    """
    if tp <= 0 or block_size <= 0:
        raise ValueError("tp and block_size must be positive")
    types = _layer_types(model, fmt, tp, hybrid_manager, draft_layers)
    if any(t.spec is MambaSpec for t in types) and not hybrid_manager:
        raise ValueError(
            "vLLM cannot disable the hybrid KV cache manager for a model with "
            "linear-attention / Mamba state layers"
        )
    attn_block = mamba_block_size(model, fmt, tp, block_size, mamba_alignment)
    pages = {
        id(t): (t.bytes_per_token * attn_block if t.spec is not MambaSpec else t.state_bytes)
        for t in types
    }

    if len(types) == 1 or (
        all(t.spec is FullAttentionSpec or issubclass(t.spec, LatentSpec) for t in types)
        and len({pages[id(t)] for t in types}) > 1
    ):
        # One group: a uniform spec, or full-length layers with per-layer page sizes.
        total = sum(t.num_layers for t in types)
        spec = types[0].spec if len({t.spec for t in types}) == 1 else FullAttentionSpec
        if len(types) == 1:
            t = types[0]
            return (
                KVCacheGroupSpec(
                    spec, total, total, attn_block, pages[id(t)], pages[id(t)], t.window
                ),
            )
        per_layer = tuple(pages[id(t)] for t in types for _ in range(t.num_layers))
        return (
            KVCacheGroupSpec(
                spec, total, total, attn_block, max(per_layer), max(per_layer), None, per_layer
            ),
        )

    # unify_kv_cache_spec_page_size: the largest page wins.
    max_page = max(pages.values())
    unified = []
    for t in types:
        page = pages[id(t)]
        block = attn_block
        if t.spec is not MambaSpec and page != max_page:
            if max_page % page:
                raise ValueError(
                    f"{t.spec.kind} layers' page ({page:,} B) does not divide the largest page "
                    f"({max_page:,} B): vLLM cannot unify them by block size"
                )
            block = attn_block * (max_page // page)
            page = max_page  # a larger block fills the page: nothing is padded
        unified.append((t, block, page))

    sizes = [t.num_layers for t, _, _ in unified]
    group_size = min(sizes)
    if max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    groups = []
    for t, block, page in unified:
        count = cdiv(t.num_layers, group_size)
        for i in range(count):  # layers[i::count], as vLLM assigns them
            members = len(range(i, t.num_layers, count))
            groups.append(
                KVCacheGroupSpec(t.spec, members, group_size, block, max_page, page, t.window)
            )
    return tuple(groups)
