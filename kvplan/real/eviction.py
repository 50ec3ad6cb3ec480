"""An eviction policy inside the real engine's paged block pool.

The block manager (kvplan.core.kv.budget.PolicyBudget, the simulator's memory model) says
how many slots each sequence holds; this file makes the pool's tensors hold exactly those
tokens, per layer and per KV head:
- h2o: each head's kept tokens sit compacted in the sequence's first slots. A decode step
  at its budget first drops, per head, the token with the least accumulated attention
  outside the recent half (kvplan.core.policies.keep_h2o) by moving the last slot's K/V
  into its hole, then writes the new token into the last slot; so no step attends to
  budget + 1 tokens. A prefill chunk attends to everything kept plus the chunk, then the
  head's kept tokens are gathered to the front. Attention runs in kvplan's paged kernels;
  the scores H2O accumulates are recomputed beside them in torch (the kernels return no
  probabilities), per KV head, the query heads of a GQA group adding their attention.
- sliding-window: tokens stay at their positions; the block manager frees blocks the
  window has left and the kernels' sliding-window mask (budget keys, the query included)
  hides the stale slots of the first block kept.
Other policies are refused in real mode (snapkv, streaming's in-cache re-indexing,
paged-eviction and entropy-budget need their own pool operations, not written yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvplan.core.kv.budget import PolicyBudget
from kvplan.core.policies import PolicySpec, held_tokens, keep_h2o
from kvplan.core.sequence import Sequence

REAL_POLICIES = ("h2o", "sliding-window")


def check_real_policy(spec: PolicySpec) -> None:
    if spec.name not in REAL_POLICIES:
        raise ValueError(f"real mode evicts from the paged pool for {', '.join(REAL_POLICIES)}; '{spec.name}' is "
                         "measured with --quality-text or in simulated mode")


@dataclass
class SeqStep:
    key: tuple[int, int]
    prompt_len: int
    slot_start: int  # slot index of the step's first new token
    count: int
    length: int  # tokens written once the step is done
    table: list[int]
    evict_first: bool  # a decode step at its budget drops a token per head before writing


@dataclass
class RealEviction:
    spec: PolicySpec
    budget: PolicyBudget
    block_size: int
    scores: dict[tuple[int, int], list[Any]] = field(default_factory=dict)  # per layer: np [kv_heads, held]
    # per layer: np [kv_heads, held], each slot's token position (hole filling reorders slots)
    positions: dict[tuple[int, int], list[Any]] = field(default_factory=dict)
    measured: dict[tuple[int, int], list[tuple[int, int]]] = field(default_factory=dict)  # (length, slots held)
    copied_slots: int = 0
    steps: list[SeqStep] = field(default_factory=list)
    # The alternative to compaction, measured on the same run: leave holes where tokens were
    # evicted; a block (all layers and heads share it) frees only once no head of any layer
    # keeps a token of it. Summed over sequences and steps, against compacted blocks.
    hole_blocks: int = 0
    compact_blocks: int = 0
    _live: dict[tuple[int, int], set[int]] = field(default_factory=dict)

    @property
    def compacted(self) -> bool:
        return self.spec.name != "sliding-window"

    def slot_start(self, seq: Sequence) -> int:
        """Where the step's first new token goes, in the sequence's slot coordinates."""
        if not self.compacted:
            return seq.num_computed - seq.dropped_blocks * self.block_size
        count = seq.prompt_len + seq.num_generated - seq.num_computed
        if count <= 1:
            return held_tokens(self.spec, seq.prompt_len, seq.num_computed + 1) - 1
        return self.budget.kept(seq)

    def begin_step(self, order: list[tuple[Sequence, int]], slot_starts: Any) -> RealEviction:
        self.steps = []
        for (seq, count), start in zip(order, slot_starts.tolist()):
            key = (seq.request.request_id, seq.sample_index)
            if seq.num_computed == 0:
                self.scores.pop(key, None)  # a fresh or recomputed sequence
                self.positions.pop(key, None)
                self.measured.pop(key, None)
            kept = self.budget.kept(seq)
            self.steps.append(SeqStep(key, seq.prompt_len, int(start), count, seq.num_computed + count,
                                      list(seq.block_table), self.compacted and count == 1 and kept + 1 > start + 1))
        return self

    def variant(self, variant: Any) -> Any:
        from dataclasses import replace

        return variant if self.compacted else replace(variant, sliding_window=self.spec.budget)

    # -- inside each layer's attention ----------------------------------------------------

    def before_write(self, layer: int, cache: Any) -> None:
        """Decode steps at their budget: per head, move the last slot into the victim's hole."""
        for step in self.steps:
            if not step.evict_first:
                continue
            scores, positions = self._layer_scores(step, layer), self.positions[step.key][layer]
            kept = scores.shape[1]
            extended = np.concatenate([scores, np.zeros((scores.shape[0], 1))], axis=1)  # the new token: recent
            new_position = np.full((scores.shape[0], 1), step.length - 1)
            keep = _keep_h2o_by_position(extended, np.concatenate([positions, new_position], axis=1),
                                         step.slot_start + 1)
            victims = [int(np.setdiff1d(np.arange(kept), row)[0]) for row in keep]
            last = kept - 1
            moves = [(head, victim) for head, victim in enumerate(victims) if victim != last]
            if moves:
                heads = np.array([h for h, _ in moves])
                holes = np.array([v for _, v in moves])
                self._move(cache, step.table, heads, np.full(len(moves), last), holes)
                scores[heads, holes] = scores[heads, last]
                positions[heads, holes] = positions[heads, last]
            self.copied_slots += len(moves)
            self.scores[step.key][layer] = scores[:, :last]
            self.positions[step.key][layer] = positions[:, :last]

    def after_attention(self, layer: int, cache: Any, query: Any, scale: float, num_layers: int) -> None:
        """Accumulate this step's attention per KV head; compact prefill chunks to the budget."""
        row = 0
        for step in self.steps:
            q = query[row:row + step.count]
            row += step.count
            lens = step.slot_start + step.count
            if self.compacted:
                received = self._received(cache, step, q, scale)
                old = self._layer_scores(step, layer)
                heads = received.shape[0]
                if old.shape[0] == 0:
                    old = np.zeros((heads, 0))
                    self.positions[step.key][layer] = np.zeros((heads, 0), dtype=np.int64)
                scores = np.concatenate([old, np.zeros((heads, step.count))], axis=1) + received
                new_positions = np.tile(np.arange(step.length - step.count, step.length), (heads, 1))
                positions = np.concatenate([self.positions[step.key][layer], new_positions], axis=1)
                held = held_tokens(self.spec, step.prompt_len, step.length)
                if held < lens:
                    keep = _keep_h2o_by_position(scores, positions, held)
                    self._compact(cache, step.table, keep)
                    scores = np.take_along_axis(scores, keep, axis=1)
                    positions = np.take_along_axis(positions, keep, axis=1)
                    self.copied_slots += int(np.sum(keep != np.arange(held)))
                self.scores[step.key][layer] = scores
                self.positions[step.key][layer] = positions
                slots = scores.shape[1]
                live = self._live.setdefault(step.key, set())
                if layer == 0:
                    live.clear()
                live.update(np.unique(positions // self.block_size).tolist())
                if layer == num_layers - 1:
                    self.hole_blocks += len(live)
                    self.compact_blocks += -(-slots // self.block_size)
            else:
                slots = min(lens, held_tokens(self.spec, step.prompt_len, step.length))
            if layer == num_layers - 1:
                self.measured.setdefault(step.key, []).append((step.length, slots))

    # -- tensors ----------------------------------------------------------------------------

    def _layer_scores(self, step: SeqStep, layer: int) -> Any:
        for table in (self.scores, self.positions):
            layers = table.setdefault(step.key, [])
            while len(layers) <= layer:
                layers.append(np.zeros((0, 0)))
        return self.scores[step.key][layer]

    def _flat_slots(self, table: list[int], indices: Any) -> Any:
        import torch

        blocks = torch.tensor(table, dtype=torch.long)[torch.as_tensor(indices) // self.block_size]
        return blocks * self.block_size + torch.as_tensor(indices) % self.block_size

    def _received(self, cache: Any, step: SeqStep, q: Any, scale: float) -> Any:
        """Attention each held slot received from the step's queries, per KV head [kv_heads, lens]."""
        import torch

        from kvplan.kernels.quant import dequantize

        lens = step.slot_start + step.count
        slots = self._flat_slots(step.table, np.arange(lens)).to(cache.key_cache.device)
        heads = cache.key_cache.shape[2]
        stored = cache.key_cache.reshape(-1, heads, cache.key_cache.shape[-1])[slots]
        scales = cache.k_scale
        if scales is not None and scales.dim() == 4:
            scales = scales.reshape(-1, heads, scales.shape[-1])[slots]
        keys = dequantize(stored, scales, cache.fmt, cache.head_dim).float()  # [lens, kv_heads, dim]
        group = q.shape[1] // heads
        qg = q.float().reshape(step.count, heads, group, -1)
        logits = torch.einsum("tkgd,nkd->kgtn", qg, keys) * scale
        causal = torch.arange(lens)[None, :] > (step.slot_start + torch.arange(step.count))[:, None]
        probs = logits.masked_fill(causal.to(logits.device), float("-inf")).softmax(dim=-1)
        return probs.sum(dim=(1, 2)).double().cpu().numpy()

    def _tensors(self, cache: Any) -> list[Any]:
        heads = cache.key_cache.shape[2]
        out = [cache.key_cache, cache.value_cache]
        out += [s for s in (cache.k_scale, cache.v_scale) if s is not None and s.dim() == 4]
        return [t.reshape(-1, heads, t.shape[-1]) for t in out]

    def _move(self, cache: Any, table: list[int], heads: Any, sources: Any, targets: Any) -> None:
        import torch

        src, dst = self._flat_slots(table, sources), self._flat_slots(table, targets)
        head_index = torch.as_tensor(heads, dtype=torch.long)
        for flat in self._tensors(cache):
            rows, cols = head_index.to(flat.device), (src.to(flat.device), dst.to(flat.device))
            flat[cols[1], rows] = flat[cols[0], rows]

    def _compact(self, cache: Any, table: list[int], keep: Any) -> None:
        """Per head, gather the kept slots to the front (the gather is read whole before the
        scatter writes)."""
        heads, held = keep.shape
        head_index = np.repeat(np.arange(heads), held)
        self._move(cache, table, head_index, keep.reshape(-1), np.tile(np.arange(held), heads))


def _keep_h2o_by_position(scores: Any, positions: Any, budget: int) -> Any:
    """keep_h2o over slots in any order: its recent half is by token position, so slots are
    ranked by position first; returns kept slot indices per head."""
    order = np.argsort(positions, axis=1, kind="stable")
    kept = keep_h2o(np.take_along_axis(scores, order, axis=1), budget)
    return np.sort(np.take_along_axis(order, kept, axis=1), axis=1)
