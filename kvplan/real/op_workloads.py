"""The operators `kvplan profile` times, built on the device in the measured dtype, each timed by
op_timer.Timer over its points:

- a GEMM: F.linear of M x k activations by one n x k weight (what vLLM's unquantized linear
  layers call, on CUDA and as its CPU backend's fallback);
- a routed-expert layer: the serving engine's grouped GEMM where it imports, else a loop over
  the experts the tokens touch (expert_kernels.py);
- decode and prefill attention: kvplan's own paged kernels (kvplan.kernels: Triton on CUDA,
  the vectorized torch path on CPU) over a paged KV cache in the KV format, the sliding
  window or chunk of the attention kind as its variant;
- memory: a copy of bytes / 2 into bytes / 2 (every elementwise operator of a step is one
  pass reading and writing its tensors).

A decode point whose KV would exceed the device's memory cap (`kv_cap_bytes`) is measured at
the largest batch that fits and scaled by batch, as a decode's reads are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from kvplan.kernels.paged_attention import paged_attention
from kvplan.kernels.paged_prefill import paged_prefill
from kvplan.kernels.quant import PagedKVCache, allocate_kv_cache, get_format
from kvplan.kernels.variant import AttentionVariant
from kvplan.real.expert_kernels import ExpertKernel, expert_kernel
from kvplan.real.op_timer import Timer
from kvplan.sizing.operators.attention import OPS_BY_NAME, ChunkedAttention, SlidingAttention
from kvplan.sizing.operators.profile_table import AttentionShape, ExpertsShape

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
Tick = Callable[[], None]
Call = Callable[[], object]


def variant_of(shape: AttentionShape) -> AttentionVariant:
    """The kernel variant of a table's attention shape: its window, as its operator keeps it."""
    op = OPS_BY_NAME.get(shape.kind)
    if op is None or not shape.window:
        return AttentionVariant()
    # a chunked layer is a sliding one that restarts its window at every chunk
    if issubclass(op, ChunkedAttention):
        return AttentionVariant(chunk_size=shape.window)
    if issubclass(op, SlidingAttention):
        return AttentionVariant(sliding_window=shape.window)
    return AttentionVariant()


def kv_bytes_per_token(shape: AttentionShape) -> int:
    """The paged cache's bytes per token for one layer's K and V in the shape's KV format."""
    fmt = get_format(shape.kv_format, torch.bfloat16)
    return 2 * shape.kv_heads_per_gpu * fmt.packed_dim(shape.head_dim) * fmt.storage.itemsize


@dataclass(frozen=True)
class Workbench:
    timer: Timer
    device: str  # cpu or cuda
    dtype: str  # bf16, fp16 or fp32
    backend: str  # attention: triton or torch
    block_size: int
    kv_cap_bytes: int

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype]

    @property
    def element_bytes(self) -> int:
        return torch.finfo(self.torch_dtype).bits // 8

    def _uniform(self, *shape: int) -> torch.Tensor:
        # small values: no overflow, no denormals (which slow a CPU down), no NaN
        tensor = torch.empty(shape, dtype=self.torch_dtype, device=self.device)
        return tensor.uniform_(-0.05, 0.05)

    def gemm(self, n: int, k: int, ms: Sequence[int], tick: Tick) -> list[float]:
        copies = self.timer.copies(n * k * self.element_bytes)
        weights = [self._uniform(n, k) for _ in range(copies)]
        seconds = []
        for m in ms:
            x = self._uniform(m, k)
            seconds.append(self.timer.seconds([partial(F.linear, x, w) for w in weights]))
            tick()
        return seconds

    def experts(self, shape: ExpertsShape, tokens: Sequence[int], tick: Tick) -> list[float]:
        e, h, inter = shape.experts, shape.hidden, shape.inter
        kernel = self.expert_kernel(h)
        copies = self.timer.copies(e * 3 * h * inter * self.element_bytes, most=4)
        layers = [
            kernel.prepare(self._uniform(e, 2 * inter, h), self._uniform(e, h, inter))
            for _ in range(copies)
        ]
        x = self._uniform(max(tokens) * shape.topk, h)
        seconds = []
        for count in tokens:
            seconds.append(
                self.timer.seconds([kernel.call(w, x, count, shape.topk) for w in layers])
            )
            tick()
        return seconds

    def expert_kernel(self, hidden: int) -> ExpertKernel:
        return expert_kernel(self.device, self.torch_dtype, hidden)

    def decode(
        self, shape: AttentionShape, batches: Sequence[int], contexts: Sequence[int], tick: Tick
    ) -> list[list[float]]:
        per_token = kv_bytes_per_token(shape)
        rows = []
        for batch in batches:
            row = []
            for context in contexts:
                fits = max(1, min(batch, self.kv_cap_bytes // max(1, per_token * context)))
                calls = self._decode_calls(shape, fits, context, per_token)
                row.append(self.timer.seconds(calls) * batch / fits)
                tick()
            rows.append(row)
        return rows

    def _decode_calls(
        self, shape: AttentionShape, batch: int, context: int, per_token: int
    ) -> list[Call]:
        heads = int(shape.heads_per_gpu)
        blocks = math.ceil(context / self.block_size)
        tables = torch.arange(batch * blocks, device=self.device, dtype=torch.int32)
        tables = tables.view(batch, blocks)
        lens = torch.full((batch,), context, dtype=torch.int32, device=self.device)
        query = self._uniform(batch, heads, shape.head_dim)
        calls: list[Call] = []
        for _ in range(self.timer.copies(per_token * context * batch, most=16)):
            cache = self._cache(shape, batch * blocks)
            calls.append(
                partial(
                    paged_attention,
                    query,
                    cache.key_cache,
                    cache.value_cache,
                    tables,
                    lens,
                    shape.head_dim**-0.5,
                    cache.fmt,
                    cache.k_scale,
                    cache.v_scale,
                    variant=variant_of(shape),
                    backend=self.backend,
                    max_seq_len=context,
                    plan_cache={},
                )  # fmt: skip
            )
        return calls

    def prefill(
        self, shape: AttentionShape, news: Sequence[int], befores: Sequence[int], tick: Tick
    ) -> list[list[float]]:
        per_token = kv_bytes_per_token(shape)
        rows = []
        for new in news:
            row = []
            query = self._uniform(new, int(shape.heads_per_gpu), shape.head_dim)
            starts = torch.tensor([0, new], dtype=torch.int32, device=self.device)
            for before in befores:
                total = before + new
                blocks = math.ceil(total / self.block_size)
                tables = torch.arange(blocks, device=self.device, dtype=torch.int32).view(1, -1)
                lens = torch.tensor([total], dtype=torch.int32, device=self.device)
                calls: list[Call] = []
                for _ in range(self.timer.copies(per_token * total, most=16)):
                    cache = self._cache(shape, blocks)
                    calls.append(
                        partial(
                            paged_prefill,
                            query,
                            cache.key_cache,
                            cache.value_cache,
                            tables,
                            starts,
                            lens,
                            shape.head_dim**-0.5,
                            cache.fmt,
                            cache.k_scale,
                            cache.v_scale,
                            variant=variant_of(shape),
                            backend=self.backend,
                            max_query_len=new,
                            plan_cache={},
                        )  # fmt: skip
                    )
                row.append(self.timer.seconds(calls))
                tick()
            rows.append(row)
        return rows

    def _cache(self, shape: AttentionShape, blocks: int) -> PagedKVCache:
        return allocate_kv_cache(shape.kv_format, blocks, self.block_size,
                                 shape.kv_heads_per_gpu, shape.head_dim,
                                 dtype=torch.bfloat16, device=self.device)  # fmt: skip

    def memory(self, sizes: Sequence[int], tick: Tick) -> list[float]:
        seconds = []
        for nbytes in sizes:
            half = max(1, nbytes // 2)
            pairs = [
                (torch.empty(half, dtype=torch.uint8, device=self.device).fill_(1),
                 torch.empty(half, dtype=torch.uint8, device=self.device))
                for _ in range(self.timer.copies(nbytes))
            ]  # fmt: skip
            seconds.append(self.timer.seconds([partial(dst.copy_, src) for src, dst in pairs]))
            tick()
        return seconds
