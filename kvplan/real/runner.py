"""Real mode: the same scheduler and block manager, with KV in torch block pools and a
transformers model running every step; time is measured wall-clock.

The model's own attention modules call kvplan's paged attention through transformers'
public attention-function registry (`AttentionInterface.register`), so no modeling code
is forked. A step packs every scheduled sequence's new tokens into one [1, T] batch:
attention writes the step's K/V into the paged cache (`write_kv`), then decode tokens go
through the `paged_attention` kernel, and prefill chunks through torch SDPA over their
KV gathered (and dequantized) from the blocks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence

ATTENTION_NAME = "kvplan_paged"


@dataclass
class Prefill:
    offset: int  # first packed index of this sequence's tokens in the step
    start: int  # position of its first new token
    count: int
    blocks: Any  # long tensor: block ids covering positions [0, start + count)


@dataclass
class StepContext:
    """What the attention function needs for one step, shared by all layers."""

    pool: list[Any]  # one PagedKVCache per layer
    slot_mapping: Any
    decode_index: Any
    decode_tables: Any
    decode_lens: Any
    prefills: list[Prefill] = field(default_factory=list)
    backend: str | None = None


def paged_attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                            scaling: float | None = None, dropout: float = 0.0, kvplan_ctx: StepContext | None = None,
                            **kwargs: Any) -> tuple[Any, None]:
    """transformers attention interface: query [1, H, T, D], key/value [1, KV, T, D] (after RoPE)."""
    import torch

    from kvplan.kernels.cache_ops import write_kv
    from kvplan.kernels.paged_attention import paged_attention
    from kvplan.kernels.quant import dequantize

    if kvplan_ctx is None:
        raise RuntimeError("kvplan paged attention needs a kvplan step context")
    ctx = kvplan_ctx
    cache = ctx.pool[module.layer_idx]
    q = query[0].transpose(0, 1)
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    write_kv(k, v, cache.key_cache, cache.value_cache, ctx.slot_mapping, cache.fmt, cache.k_scale, cache.v_scale,
             backend=ctx.backend)
    out = torch.empty_like(q)
    if ctx.decode_index.numel():
        out[ctx.decode_index] = paged_attention(
            q[ctx.decode_index].contiguous(), cache.key_cache, cache.value_cache, ctx.decode_tables, ctx.decode_lens,
            scale, cache.fmt, cache.k_scale, cache.v_scale, backend=ctx.backend).to(q.dtype)
    group = q.shape[1] // cache.num_kv_heads
    for chunk in ctx.prefills:
        end = chunk.start + chunk.count
        keys, values = [], []
        for stored, scales in ((cache.key_cache, cache.k_scale), (cache.value_cache, cache.v_scale)):
            rows = stored[chunk.blocks].flatten(0, 1)[:end]
            row_scales = scales[chunk.blocks].flatten(0, 1)[:end] if scales is not None and scales.dim() > 1 else scales
            (keys if stored is cache.key_cache else values).append(dequantize(rows, row_scales, cache.fmt, cache.head_dim))
        kk = keys[0].repeat_interleave(group, dim=1).transpose(0, 1)  # [H, end, D]
        vv = values[0].repeat_interleave(group, dim=1).transpose(0, 1)
        qq = q[chunk.offset:chunk.offset + chunk.count].transpose(0, 1).float()  # [H, count, D]
        positions = torch.arange(chunk.start, end, device=q.device)[:, None]
        allowed = torch.arange(end, device=q.device)[None, :] <= positions
        attended = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=allowed, scale=scale)
        out[chunk.offset:chunk.offset + chunk.count] = attended.transpose(0, 1).to(q.dtype)
    return out.unsqueeze(0), None


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention_forward)


def _as_slots(cache: Any) -> Any:
    from dataclasses import replace

    def view(tensor: Any) -> Any:
        if tensor is None or tensor.dim() < 4:
            return tensor  # per-tensor scales
        return tensor.reshape(-1, 1, *tensor.shape[2:])

    return replace(cache, key_cache=view(cache.key_cache), value_cache=view(cache.value_cache),
                   k_scale=view(cache.k_scale), v_scale=view(cache.v_scale))


class RealRunner:
    """Executes step plans on a transformers model; greedy decoding; measured time."""

    mode = "real"

    def __init__(self, model: Any, pool: list[Any], block_size: int, vocab_size: int, device: str,
                 backend: str | None = None, seed: int = 0) -> None:
        import torch

        register_attention()
        model.set_attn_implementation(ATTENTION_NAME)
        self.model = model
        self.pool = pool
        # Contiguous allocators hand out slot ranges that need not start on a block: they
        # see the same memory as blocks of one slot.
        self.slot_pool = [_as_slots(cache) for cache in pool]
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.backend = backend
        self.seed = seed
        self.tokens: dict[tuple[int, int], list[int]] = {}
        self.step_logits: dict[tuple[int, int], Any] = {}  # last step's sampled logits (quality checks)
        self.keep_logits = False

    @property
    def kv_bytes(self) -> int:
        total = 0
        for cache in self.pool:
            for tensor in (cache.key_cache, cache.value_cache, cache.k_scale, cache.v_scale):
                if tensor is not None:
                    total += tensor.numel() * tensor.element_size()
        return total

    def tokens_of(self, seq: Sequence) -> list[int]:
        key = (seq.request.request_id, seq.sample_index)
        tokens = self.tokens.get(key)
        if tokens is None:
            if seq.sample_index:  # a parallel sample continues from its parent's first token
                tokens = list(self.tokens[(seq.request.request_id, 0)][: seq.prompt_len + 1])
            elif seq.request.prompt_tokens is not None:
                tokens = list(seq.request.prompt_tokens)
            else:  # length-only workloads get deterministic pseudo-random prompts
                import numpy as np

                rng = np.random.default_rng((self.seed, seq.request.request_id))
                tokens = rng.integers(3, self.vocab_size, seq.prompt_len).tolist()
            self.tokens[key] = tokens
        return tokens

    def step_time(self, plan: StepPlan) -> float:
        import torch

        started = time.perf_counter()
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_index: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[Prefill] = []
        sampled: list[tuple[Sequence, int]] = []
        contiguous = bool(plan.scheduled) and plan.scheduled[0][0].extent is not None
        block = 1 if contiguous else self.block_size
        for seq, count in plan.scheduled:
            tokens = self.tokens_of(seq)
            start = seq.num_computed
            offset = len(ids)
            ids.extend(tokens[start:start + count])
            positions.extend(range(start, start + count))
            if contiguous:
                first = seq.extent[0]  # type: ignore[index]
                table = list(range(first, first + start + count))
            else:
                table = seq.block_table
            slots.extend(table[p // block] * block + p % block for p in range(start, start + count))
            if count == 1:
                decode_index.append(offset)
                decode_tables.append(table)
                decode_lens.append(start + 1)
            else:
                used = -(-(start + count) // block)
                prefills.append(Prefill(offset, start, count, torch.tensor(table[:used], device=self.device)))
            if start + count == seq.prompt_len + seq.num_generated:
                sampled.append((seq, offset + count - 1))
        width = max((len(t) for t in decode_tables), default=0)
        ctx = StepContext(
            pool=self.slot_pool if contiguous else self.pool,
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=self.device),
            decode_index=torch.tensor(decode_index, dtype=torch.long, device=self.device),
            decode_tables=torch.tensor([t + [-1] * (width - len(t)) for t in decode_tables], dtype=torch.int32,
                                       device=self.device).reshape(len(decode_tables), width),
            decode_lens=torch.tensor(decode_lens, dtype=torch.int32, device=self.device),
            prefills=prefills, backend=self.backend)
        keep = torch.tensor([index for _, index in sampled], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            output = self.model(input_ids=torch.tensor([ids], device=self.device),
                                position_ids=torch.tensor([positions], device=self.device),
                                kvplan_ctx=ctx, logits_to_keep=keep, use_cache=False)
        logits = output.logits[0].float()
        next_tokens = logits.argmax(dim=-1).tolist()
        for (seq, _), (token, row) in zip(sampled, zip(next_tokens, logits)):
            self.tokens_of(seq).append(token)
            if self.keep_logits:
                self.step_logits.setdefault((seq.request.request_id, seq.sample_index), []).append(row)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started + plan.transfer_s  # offload copies were timed as they ran
