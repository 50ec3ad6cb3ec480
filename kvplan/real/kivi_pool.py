"""KIVI in the real serving engine: quantized K/V in the paged pool's blocks
(kvplan.kernels.kivi.KiviPagedCache), the full-precision residual beside it per sequence.

A step's new K/V join each sequence's residual (one buffer per layer); attention reads the
sequence's blocks dequantized, with the residual's full-precision rows laid over the slots
not quantized yet, through kvplan's paged kernels (a scratch of the step's blocks in fp32,
the tables renumbered into it); then the rule the quality evaluator follows
(`kivi.settle_counts`) quantizes whole key groups into their block and the values older
than the R newest into their slots. Decoding one token a step this is the evaluator's
KIVI exactly; a prefill chunk attends to its own tokens in full precision and is
quantized afterwards, as KIVI's reference prefill does.

Named limits: one key group per block (block size = G = 32); no prefix caching, offload
tier, eviction policy or parallel samples (their blocks or residuals would be shared);
the residual is measured (peak bytes) but not reserved from the pool's budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvplan import cdiv
from kvplan.core.sequence import Sequence
from kvplan.spec.setting_error import SettingError


def check_kivi_serving(
    block_size: int,
    allocator: str,
    prefix: bool,
    offload: tuple[str, ...],
    policy: str | None,
    name: str,
) -> None:
    """Refuse, naming the fix, what the KIVI pool cannot combine with."""
    from kvplan.kernels.kivi import KIVI_GROUP

    if block_size != KIVI_GROUP:
        raise SettingError(
            "{name} keeps one key group ({group} tokens, the paper's G) per pool block: use "
            "{block_size} {group}, not {given}",
            name=name,
            group=KIVI_GROUP,
            given=block_size,
        )
    if allocator != "paged" or prefix or offload or policy:
        raise ValueError(
            f"{name} runs on the plain paged pool only (no contiguous allocator, prefix caching, "
            "offload tier or eviction policy: their blocks would be shared without the "
            "per-sequence full-precision residual)"
        )


@dataclass
class _SeqPlan:
    key: tuple[int, int]
    first: int  # its first row in the step's packed tokens
    count: int
    key_done: int  # tokens whose keys are quantized before the step
    value_done: int
    length: int  # tokens written after the step
    table: list[int]
    finishes: bool  # the step writes its last KV


@dataclass
class KiviServing:
    pool: list[Any]  # one KiviPagedCache per layer
    block_size: int
    format_name: str  # kivi-int2 / kivi-int4
    residual: dict[tuple[int, int], list[list[Any]]] = field(
        default_factory=dict
    )  # per layer [keys, values]
    done: dict[tuple[int, int], tuple[int, int]] = field(
        default_factory=dict
    )  # (keys, values) quantized
    measured: dict[tuple[int, int], tuple[int, int]] = field(
        default_factory=dict
    )  # (tokens, bytes) at finish
    peak_residual_bytes: int = 0
    seqs: list[_SeqPlan] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)

    def begin_step(
        self, order: list[tuple[Sequence, int]], num_decode: int, device: Any
    ) -> KiviServing:
        """Plan one step for every layer: the scratch's blocks and renumbered tables, where
        residual rows go, and what settles into which blocks and slots afterwards."""
        import torch

        from kvplan.kernels.kivi import settle_counts

        self.seqs, first = [], 0
        key_rows, value_rows, key_blocks, value_slots, tables, blocks = [], [], [], [], [], []
        size = self.block_size
        for seq, count in order:
            key = (seq.request.request_id, seq.sample_index)
            start = seq.num_computed
            if start == 0:  # a fresh or recomputed sequence
                self.residual[key] = [[None, None] for _ in self.pool]
                self.done[key] = (0, 0)
            elif key not in self.residual:
                raise ValueError(
                    "KIVI serving cannot fork parallel samples (each needs its own residual); "
                    "run requests with n = 1"
                )
            key_done, value_done = self.done[key]
            length = start + count
            width = cdiv(length, size)
            base = len(blocks)
            blocks.extend(seq.block_table[:width])
            tables.append(np.arange(base, base + width))
            key_rows.append(base * size + np.arange(key_done, length))
            value_rows.append(base * size + np.arange(value_done, length))
            keys, values = settle_counts(length - key_done, length - value_done, size)
            positions = np.arange(value_done, value_done + values)
            table = np.asarray(seq.block_table, dtype=np.int64)
            key_blocks.append(table[key_done // size : (key_done + keys) // size])
            value_slots.append(table[positions // size] * size + positions % size)
            final = seq.prompt_len + seq.output_len - 1  # the last sampled token is never written
            self.seqs.append(
                _SeqPlan(
                    key,
                    first,
                    count,
                    key_done,
                    value_done,
                    length,
                    list(seq.block_table),
                    length >= final,
                )
            )
            self.done[key] = (key_done + keys, value_done + values)
            first += count

        def tensor(parts: list[Any]) -> Any:
            return torch.from_numpy(
                np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
            ).to(device)

        widest = max((len(t) for t in tables), default=0)
        padded = np.zeros((len(tables), widest), dtype=np.int64)
        for row, table in enumerate(tables):
            padded[row, : len(table)] = table
        padded = torch.from_numpy(padded).to(device=device, dtype=torch.int32)
        self.plan = dict(
            blocks=tensor([np.asarray(blocks)]),
            key_rows=tensor(key_rows),
            value_rows=tensor(value_rows),
            key_blocks=tensor(key_blocks),
            value_slots=tensor(value_slots),
            decode_tables=padded[:num_decode],
            prefill_tables=padded[num_decode:],
        )
        return self

    def attend(
        self, layer: int, q: Any, k: Any, v: Any, scale: float, ctx: Any, common: dict[str, Any]
    ) -> Any:
        """One layer's attention for the step (q/k/v packed [tokens, heads, dim]); stores the
        step's K/V as KIVI does."""
        import torch

        from kvplan.kernels.paged_attention import paged_attention
        from kvplan.kernels.paged_prefill import paged_prefill
        from kvplan.kernels.quant import get_format

        cache, plan = self.pool[layer], self.plan
        buffers = []
        for seq in self.seqs:
            buffer = self.residual[seq.key][layer]
            for index, new in enumerate(
                (k[seq.first : seq.first + seq.count], v[seq.first : seq.first + seq.count])
            ):
                buffer[index] = new if buffer[index] is None else torch.cat([buffer[index], new])
            buffers.append(buffer)
        keys, values = cache.read_blocks(plan["blocks"])
        shape = keys.shape
        keys, values = keys.flatten(0, 1), values.flatten(0, 1)
        if buffers:
            keys.index_copy_(0, plan["key_rows"], torch.cat([b[0] for b in buffers]).float())
            values.index_copy_(0, plan["value_rows"], torch.cat([b[1] for b in buffers]).float())
        keys, values = keys.view(shape), values.view(shape)
        common = dict(common, fmt=get_format("fp32"), k_scale=None, v_scale=None)
        parts, n = [], ctx.num_decode
        if n:
            parts.append(
                paged_attention(
                    q[:n].contiguous(),
                    keys,
                    values,
                    plan["decode_tables"],
                    ctx.decode_lens,
                    scale,
                    max_seq_len=ctx.decode_max_len,
                    **common,
                )
            )
        if q.shape[0] > n:
            parts.append(
                paged_prefill(
                    q[n:].contiguous(),
                    keys,
                    values,
                    plan["prefill_tables"],
                    ctx.prefill_query_start,
                    ctx.prefill_lens,
                    scale,
                    max_query_len=ctx.prefill_max_query,
                    **common,
                )
            )
        self._settle(layer, cache, buffers)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _settle(self, layer: int, cache: Any, buffers: list[list[Any]]) -> None:
        import torch

        plan, size = self.plan, self.block_size
        settled_keys, settled_values = [], []
        for seq, buffer in zip(self.seqs, buffers):
            keys, values = self._settling(seq)
            if keys:
                settled_keys.append(
                    buffer[0][:keys].reshape(keys // size, size, *buffer[0].shape[1:])
                )
                buffer[0] = buffer[0][keys:]
            if values:
                settled_values.append(buffer[1][:values])
                buffer[1] = buffer[1][values:]
        if settled_keys:
            cache.store_keys(plan["key_blocks"], torch.cat(settled_keys))
        if settled_values:
            cache.store_values(plan["value_slots"], torch.cat(settled_values))
        if layer == len(self.pool) - 1:
            self._after_step()

    def _settling(self, seq: _SeqPlan) -> tuple[int, int]:
        """Keys and values the step quantizes (begin_step already counted them as done)."""
        key_done, value_done = self.done[seq.key]
        return key_done - seq.key_done, value_done - seq.value_done

    def residual_bytes(self, key: tuple[int, int]) -> int:
        return sum(
            t.numel() * t.element_size()
            for layer in self.residual.get(key, [])
            for t in layer
            if t is not None
        )

    def sequence_bytes(self, key: tuple[int, int], table: list[int]) -> int:
        """K/V bytes one sequence holds, measured from the pool's tensors and its residual."""
        import torch

        key_done, value_done = self.done[key]
        size = self.block_size
        blocks = torch.tensor(table[: key_done // size], dtype=torch.long)
        positions = np.arange(value_done)
        slots = torch.from_numpy(
            np.asarray(table, dtype=np.int64)[positions // size] * size + positions % size
        )
        return self.residual_bytes(key) + sum(
            cache.key_block_bytes(blocks) + cache.value_slot_bytes(slots) for cache in self.pool
        )

    def _after_step(self) -> None:
        self.peak_residual_bytes = max(
            self.peak_residual_bytes, sum(self.residual_bytes(k) for k in self.residual)
        )
        for seq in self.seqs:
            if seq.finishes:
                self.measured[seq.key] = (seq.length, self.sequence_bytes(seq.key, seq.table))
                del self.residual[seq.key], self.done[seq.key]
