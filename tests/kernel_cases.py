"""Kernel test inputs: paged K/V caches with shuffled block tables, attention variants,
decode and prefill cases, and write_kv's cases with a bitwise comparison
(test_kernels.py, test_kernels_variants.py, test_kernels_write.py, test_kernels_gpu.py,
test_varlen_plan.py).

Imports torch and kvplan.kernels, hence triton: a kernel test module imports this only after
turning Triton's interpreter on (triton_helpers.triton_interpreter_for_module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from kvplan.kernels.cache_ops import write_kv
from kvplan.kernels.paged_attention import paged_attention
from kvplan.kernels.quant import PagedKVCache, allocate_kv_cache, tensor_scale
from kvplan.kernels.reference import paged_attention_reference
from kvplan.kernels.variant import AttentionVariant

# -- paged caches and attention variants -----------------------------------------------


class PagedCase(NamedTuple):
    cache: Any  # PagedKVCache in the format asked for
    tables: torch.Tensor
    lens: torch.Tensor
    gen: torch.Generator  # continues the case's random stream (queries, sinks)
    key: torch.Tensor  # the fp32 K/V written to every slot, before quantization
    value: torch.Tensor


def paged_case(
    fmt: str,
    seq_lens: list[int],
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    seed: int = 0,
) -> PagedCase:
    """A cache holding random K/V for every slot and shuffled block tables (-1 past each sequence,
    so a kernel that reads them fails); three spare blocks hold other sequences' data."""
    gen = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-n // block_size) for n in seq_lens)
    num_blocks = sum(-(-n // block_size) for n in seq_lens) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    for i, n in enumerate(seq_lens):
        for b in range(-(-n // block_size)):
            tables[i, b] = order.pop()
    slots = torch.arange(num_blocks * block_size)
    key = torch.randn(len(slots), num_kv_heads, head_dim, generator=gen)
    value = torch.randn(len(slots), num_kv_heads, head_dim, generator=gen)
    cache = allocate_kv_cache(fmt, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
    if cache.fmt.scale == "tensor":
        cache.k_scale.copy_(tensor_scale(key, cache.fmt))
        cache.v_scale.copy_(tensor_scale(value, cache.fmt))
    write_kv(
        key.to(dtype),
        value.to(dtype),
        cache.key_cache,
        cache.value_cache,
        slots,
        cache.fmt,
        cache.k_scale,
        cache.v_scale,
        backend="torch",
    )
    return PagedCase(cache, tables, torch.tensor(seq_lens, dtype=torch.int32), gen, key, value)


VARIANTS = {
    "plain": {},
    "window": {"sliding_window": 5},
    "chunk": {"chunk_size": 8},
    "softcap": {"softcap": 2.0},
    "sinks": {"sinks": True},
    "all": {"sliding_window": 11, "chunk_size": 8, "softcap": 3.0, "sinks": True},
}


def make_variant(name: str, num_heads: int, gen: torch.Generator) -> AttentionVariant:
    spec = dict(VARIANTS[name])
    if spec.pop("sinks", False):
        spec["sinks"] = torch.randn(num_heads, generator=gen) * 2
    return AttentionVariant(**spec)


def prefill_case(
    fmt: str,
    dtype: torch.dtype,
    q_lens: list[int],
    seq_lens: list[int],
    block_size: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    seed: int = 0,
):
    cache, tables, lens, gen, _, _ = paged_case(
        fmt, seq_lens, block_size, num_heads, num_kv_heads, head_dim, dtype, seed
    )
    query_start = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    query = torch.randn(sum(q_lens), num_heads, head_dim, generator=gen).to(dtype)
    return query, cache, tables, query_start, lens, gen


# -- paged attention -------------------------------------------------------------------


@dataclass
class AttentionCase:
    query: torch.Tensor
    cache: PagedKVCache
    exact_cache: PagedKVCache  # the same K/V, unquantized fp32: the loose yardstick
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    scale: float

    def run(self, backend: str, exact: bool = False) -> torch.Tensor:
        c = self.exact_cache if exact else self.cache
        return paged_attention(
            self.query,
            c.key_cache,
            c.value_cache,
            self.block_tables,
            self.seq_lens,
            self.scale,
            c.fmt,
            c.k_scale,
            c.v_scale,
            backend=backend,
        )

    def reference(self) -> torch.Tensor:
        c = self.cache
        return paged_attention_reference(
            self.query,
            c.key_cache,
            c.value_cache,
            self.block_tables,
            self.seq_lens,
            self.scale,
            c.fmt,
            c.k_scale,
            c.v_scale,
        )


def attention_case(
    fmt: str,
    head_dim: int,
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    dtype: torch.dtype,
    seq_lens: list[int] | None = None,
    seed: int = 0,
) -> AttentionCase:
    """Sequences of length 1, exactly two blocks, and a partial tail; a shuffled block table.

    Table entries past a sequence's last block are -1, so a kernel that reads them fails.
    """
    seq_lens = seq_lens or [1, 2 * block_size, block_size + 3, 5]
    cache, tables, lens, gen, key, value = paged_case(
        fmt, seq_lens, block_size, num_heads, num_kv_heads, head_dim, dtype, seed
    )
    exact = allocate_kv_cache("fp32", *cache.key_cache.shape[:3], head_dim)
    write_kv(
        key,
        value,
        exact.key_cache,
        exact.value_cache,
        torch.arange(len(key)),
        "fp32",
        backend="torch",
    )
    query = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen).to(dtype)
    return AttentionCase(query, cache, exact, tables, lens, head_dim**-0.5)


# -- write_kv --------------------------------------------------------------------------


def bits(t: torch.Tensor) -> torch.Tensor:
    """View as same-width ints so equality is bitwise (NaN == NaN, -0.0 != 0.0)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def write_case(
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    num_tokens: int = 6,
    num_kv_heads: int = 2,
    num_blocks: int = 5,
    seed: int = 0,
):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = max(num_blocks, -(-(num_tokens + 2) // block_size))  # room for unwritten slots
    key = (torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen) * 2).to(dtype)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    # Never the last slot: a kernel that stored the padding token at slot -1 would wrap there.
    slots = torch.randperm(num_blocks * block_size - 1, generator=gen)[:num_tokens]
    slots[1] = -1  # a padding token
    return key, value, slots, num_blocks, num_kv_heads


def fresh_cache(
    fmt: str,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    key: torch.Tensor,
    value: torch.Tensor,
) -> PagedKVCache:
    cache = allocate_kv_cache(fmt, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
    # Sentinel bytes everywhere, so a skipped or misplaced store is visible.
    for t in (cache.key_cache, cache.value_cache):
        t.view(torch.uint8).fill_(0x55)
    if cache.fmt.per_token_scales:
        cache.k_scale.fill_(-1.0)
        cache.v_scale.fill_(-1.0)
    elif cache.fmt.scale == "tensor":
        cache.k_scale.copy_(tensor_scale(key, cache.fmt))
        cache.v_scale.copy_(tensor_scale(value, cache.fmt))
    return cache
