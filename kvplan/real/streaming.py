"""StreamingLLM in the real engine's paged pool: 4 attention sinks + a window, tokens kept
at their positions (blocks free as the window slides, the sink block stays: the memory
model of kvplan.core.policies.slots).

The kernels mask one sliding window per query (`budget` keys, itself included). For a
query at position t past the budget, the window's first 4 slots hold tokens t - budget + 1
.. t - budget + 4, which the policy has evicted; writing the 4 sinks there makes the
window hold exactly sinks + the newest budget - 4 tokens. It is also StreamingLLM's
re-indexing (Xiao et al. 2023; mit-han-lab/streaming-llm gives cached tokens positions
0..n-1 by their place in the cache): keys carry RoPE by position and only distances
matter, so the window keeps its own positions and the sinks, rotated by t - budget + 1
more positions, sit right before it, as in the paper's cache. `streaming-abspos` writes
them unrotated (original positions, the named variant).

The sinks' K/V are kept beside the pool as the copies' source, as the model computed them
(before the pool stored them: 4 tokens per layer per sequence, in the model's dtype), so
the first copies cannot overwrite them (they land on slots 1-3) and a quantized pool rounds
a rotated sink once, as writing the token at its in-cache position would, never its stored
(already rounded) value a second time; the quality evaluator rounds it the same way. Each
decode step writes its 4 copies before attention. A prefill chunk
reads its rows one query at a time once they pass the budget (each needs its own sink
rotation, and a row's copies only cover tokens no later row of the chunk sees), in the
decode kernel; the rows before the budget go in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvplan.core.policies import SINKS
from kvplan.real import pool_slots


@dataclass
class SinkCopies:
    budget: int
    block_size: int
    inv_freq: Any = None  # RoPE frequencies; None: sinks keep their original positions
    # (seq, layer) -> the sinks' K, V [<= 4, kv_heads, head_dim] as the model computed them
    stash: dict[tuple[tuple[int, int], int], tuple[Any, Any]] = field(default_factory=dict)
    copies: int = 0  # sink slots written

    def forget(self, key: tuple[int, int]) -> None:
        for stashed in [k for k in self.stash if k[0] == key]:
            del self.stash[stashed]

    def remember(self, layer: int, steps: list[Any], key: Any, value: Any) -> None:
        """Keep the full-precision K/V of each sequence's first 4 tokens written this step
        (`key`, `value`: the step's packed rows [tokens, kv_heads, head_dim], in step order)."""
        import torch

        row = 0
        for step in steps:
            first = step.length - step.count  # position of the step's first token
            if first < SINKS:
                rows = slice(row, row + min(step.count, SINKS - first))
                known = self.stash.get((step.key, layer))
                k, v = key[rows].detach().clone(), value[rows].detach().clone()
                if (
                    known is not None and first > 0
                ):  # a prompt shorter than the sinks: decode steps add them
                    k, v = torch.cat([known[0], k]), torch.cat([known[1], v])
                self.stash[(step.key, layer)] = (k, v)
            row += step.count

    def place(
        self,
        layer: int,
        cache: Any,
        key: tuple[int, int],
        table: list[int],
        query_slot: int,
        query_position: int,
        dtype: Any,
        backend: str | None,
    ) -> None:
        """Write the sinks into the first 4 slots of the window of the query at
        `query_position` (slot `query_slot`), rotated to sit right before the window."""
        import torch

        from kvplan.kernels.cache_ops import write_kv
        from kvplan.quality.layer_cache import rotate

        shift = query_position - self.budget + 1  # tokens evicted past the sinks
        if shift <= 0:
            return
        stashed = self.stash.get((key, layer))
        if stashed is None or stashed[0].shape[0] < SINKS:
            raise RuntimeError(f"streaming: sequence {key} has no 4 sinks kept for layer {layer}")
        keys, values = stashed[0].float(), stashed[1]
        if self.inv_freq is not None:
            heads = keys.shape[1]
            delta = torch.full((heads, SINKS), shift)
            keys = rotate(keys.transpose(0, 1), delta, self.inv_freq.to(keys.device)).transpose(
                0, 1
            )
        targets = query_slot - self.budget + 1 + np.arange(SINKS)
        slots = pool_slots.flat_slots(table, targets, self.block_size).to(cache.key_cache.device)
        write_kv(
            keys.to(dtype).contiguous(),
            values.to(dtype).contiguous(),
            cache.key_cache,
            cache.value_cache,
            slots,
            cache.fmt,
            cache.k_scale,
            cache.v_scale,
            backend=backend,
        )
        self.copies += SINKS

    def prefill(
        self, layer: int, cache: Any, steps: list[Any], q: Any, scale: float, common: dict[str, Any]
    ) -> Any:
        """Attention output for the prefill rows `q` (the chunks of `steps`, in order)."""
        import torch

        from kvplan.kernels.paged_attention import paged_attention

        common = dict(common, plan_cache=None)  # these calls use their own tables and lengths
        device = q.device
        out = torch.empty_like(q)
        row = 0
        early_rows, early_tables, early_lens = [], [], []
        late: list[tuple[int, Any, int, int]] = []  # (row, step, slot, position)
        for step in steps:
            for i in range(step.count):
                slot, position = step.slot_start + i, step.length - step.count + i
                if position - self.budget + 1 <= 0:
                    early_rows.append(row + i)
                    early_tables.append(step.table)
                    early_lens.append(slot + 1)
                else:
                    late.append((row + i, step, slot, position))
            row += step.count

        def tables(rows: list[list[int]]) -> Any:
            width = max(len(t) for t in rows)
            return torch.tensor(
                [t + [0] * (width - len(t)) for t in rows], dtype=torch.int32, device=device
            )

        if early_rows:
            index = torch.tensor(early_rows, device=device)
            out[index] = paged_attention(
                q[index].contiguous(),
                cache.key_cache,
                cache.value_cache,
                tables(early_tables),
                torch.tensor(early_lens, dtype=torch.int32, device=device),
                scale,
                max_seq_len=max(early_lens),
                **common,
            ).to(q.dtype)
        for (
            index,
            step,
            slot,
            position,
        ) in late:  # in order: a row's copies cover only tokens later rows drop
            self.place(
                layer, cache, step.key, step.table, slot, position, q.dtype, common.get("backend")
            )
            out[index : index + 1] = paged_attention(
                q[index : index + 1].contiguous(),
                cache.key_cache,
                cache.value_cache,
                tables([step.table]),
                torch.tensor([slot + 1], dtype=torch.int32, device=device),
                scale,
                max_seq_len=slot + 1,
                **common,
            ).to(q.dtype)
        return out
