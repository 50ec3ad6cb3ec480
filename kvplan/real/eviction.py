"""An eviction policy inside the real engine's paged block pool.

The block manager (kvplan.core.kv.budget.PolicyBudget, the simulator's memory model) says
how many slots each sequence holds; this file makes the pool's tensors hold exactly those
tokens, per layer and per KV head (selection: kvplan.core.policies, as the quality
evaluator uses it):
- policies that compact (`policy.compacts`: h2o, paged-eviction, entropy-budget, snapkv)
  keep each head's tokens in the sequence's first slots. A decode step at its budget first
  selects (`policy.keep`) with the new token counted as the newest, moves kept slots from
  the tail into the holes (one copy per evicted slot), then writes the new token into the
  last slot, so no step attends to budget + 1 tokens; a prefill chunk attends to everything
  kept plus the chunk, then each head's kept tokens are gathered to the front. Pages are
  picked per layer; one block table serves every layer, so a page dropped in one layer is
  compacted away there rather than unmapped (named simplification). A policy that splits
  its budget across layers keeps each layer at its own budget on its own slots
  (`layer_context`), the blocks holding the largest (the rest: internal fragmentation).
- a policy that selects after the prompt (snapkv) evicts nothing until the step that reads
  the prompt's last token; then the last `window` prompt queries (kept across chunks) vote
  per KV head over the earlier tokens (`policy.keep_after_prompt`); later tokens all stay.
- window policies keep tokens at their positions; the block manager frees blocks the
  window has left (sinks keep block 0), the kernels' sliding-window mask (budget keys,
  the query included) hides stale slots, and sinks are written into the window's first
  slots (real/streaming.py).
Attention runs in kvplan's paged kernels; the scores the policies need are recomputed
beside them in torch (the kernels return no probabilities), per KV head, the query heads
of a GQA group adding their attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvplan import cdiv
from kvplan.core.kv.budget import PolicyBudget
from kvplan.core.policies import PolicySpec, held_tokens
from kvplan.core.sequence import Sequence
from kvplan.real import pool_slots
from kvplan.real.streaming import SinkCopies
from kvplan.spec.setting_error import SettingError


def check_real_policy(spec: PolicySpec) -> None:
    refusal = spec.policy.real_refusal
    if refusal is not None:
        raise SettingError(
            "real mode cannot run '{policy}': {refusal}; measure it with {quality_text} or in "
            "simulated mode",
            policy=spec.name,
            refusal=refusal,
        )


@dataclass
class SeqStep:
    key: tuple[int, int]
    prompt_len: int
    slot_start: int  # slot index of the step's first new token
    count: int
    length: int  # tokens written once the step is done
    table: list[int]
    evict_first: bool  # a decode step at its budget drops tokens per head before writing


@dataclass
class RealEviction:
    spec: PolicySpec
    budget: PolicyBudget
    block_size: int
    scores: dict[tuple[int, int], list[Any]] = field(
        default_factory=dict
    )  # per layer: np [kv_heads, held]
    # per layer: np [kv_heads, held], each slot's token position (hole filling reorders slots)
    positions: dict[tuple[int, int], list[Any]] = field(default_factory=dict)
    # snapkv: per layer, the latest prompt queries [<= window, heads, dim] and their slots
    window_queries: dict[tuple[int, int], list[Any]] = field(default_factory=dict)
    measured: dict[tuple[int, int], list[tuple[int, int]]] = field(
        default_factory=dict
    )  # (length, slots held)
    copied_slots: int = 0
    steps: list[SeqStep] = field(default_factory=list)
    # The alternative to compaction, measured on the same run: leave holes where tokens were
    # evicted; a block (all layers and heads share it) frees only once no head of any layer
    # keeps a token of it. Summed over sequences and steps, against compacted blocks.
    hole_blocks: int = 0
    compact_blocks: int = 0
    sinks: SinkCopies | None = None  # streaming: the sinks written into each window
    # per step: (tokens written, slots each layer holds); `measured` keeps the largest
    layer_measured: dict[tuple[int, int], list[tuple[int, tuple[int, ...]]]] = field(
        default_factory=dict
    )
    _live: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    _layer_slots: list[int] = field(default_factory=list)
    _contexts: dict[int, Any] = field(
        default_factory=dict
    )  # entropy-budget: per layer budget, this step's context

    @property
    def compacted(self) -> bool:
        return self.spec.policy.compacts

    @property
    def positional(self) -> bool:
        """Every held slot keeps its own token (no moves, no sink copies): blocks may be shared."""
        return self.spec.policy.positional

    def slot_start(self, seq: Sequence) -> int:
        """Where the step's first new token goes, in the sequence's slot coordinates."""
        if not self.compacted:
            return seq.num_computed - seq.dropped_blocks * self.block_size
        count = seq.prompt_len + seq.num_generated - seq.num_computed
        if count <= 1 and not self.spec.policy.selects_after_prompt:  # may evict before writing
            return held_tokens(self.spec, seq.prompt_len, seq.num_computed + 1) - 1
        return self.budget.kept(seq)

    def begin_step(self, order: list[tuple[Sequence, int]], slot_starts: Any) -> RealEviction:
        self.steps = []
        self._contexts = {}
        self._layer_slots = []
        for (seq, count), start in zip(order, slot_starts.tolist()):
            key = (seq.request.request_id, seq.sample_index)
            if seq.num_computed == 0:  # a fresh or recomputed sequence
                for table in (
                    self.scores,
                    self.positions,
                    self.measured,
                    self.window_queries,
                    self.layer_measured,
                ):
                    table.pop(key, None)
                if self.sinks is not None:
                    self.sinks.forget(key)
            kept = self.budget.kept(seq)
            self.steps.append(
                SeqStep(
                    key,
                    seq.prompt_len,
                    int(start),
                    count,
                    seq.num_computed + count,
                    list(seq.block_table),
                    self.compacted and count == 1 and kept > start,
                )
            )
        return self

    def layer_held(self, step: SeqStep, layer: int, length: int) -> int:
        """Tokens per head the layer holds once `length` tokens are written."""
        budgets = self.spec.layer_budgets
        return (
            held_tokens(self.spec, step.prompt_len, length)
            if budgets is None
            else min(length, budgets[layer])
        )

    def layer_start(self, step: SeqStep, layer: int) -> int:
        """The layer's slot for the step's first new token (entropy-budget: per layer)."""
        if self.spec.layer_budgets is None:
            return step.slot_start
        if step.count == 1:  # evicts before writing, at the layer's budget
            return self.layer_held(step, layer, step.length) - 1
        return self.layer_held(step, layer, step.length - step.count)

    def _evicts_first(self, step: SeqStep, layer: int) -> bool:
        if self.spec.layer_budgets is None:
            return step.evict_first
        return step.count == 1 and self.layer_held(step, layer, step.length - 1) > self.layer_start(
            step, layer
        )

    def layer_context(self, layer: int, ctx: Any) -> Any:
        """The step context a layer's attention uses: entropy-budget's layers write their new
        tokens after, and read, only their own kept slots (layers of one budget share it)."""
        budgets = self.spec.layer_budgets
        if budgets is None:
            return ctx
        if budgets[layer] not in self._contexts:
            from dataclasses import replace

            import torch

            starts = np.array(
                [self.layer_start(step, layer) for step in self.steps], dtype=np.int64
            )
            counts = np.array([step.count for step in self.steps], dtype=np.int64)
            slots = [
                pool_slots.flat_slots(step.table, start + np.arange(step.count), self.block_size)
                for step, start in zip(self.steps, starts.tolist())
            ]
            device = ctx.slot_mapping.device
            lens = torch.from_numpy(starts + counts).to(device=device, dtype=torch.int32)
            decode = ctx.num_decode
            self._contexts[budgets[layer]] = replace(
                ctx,
                slot_mapping=torch.cat(slots).to(device) if slots else ctx.slot_mapping,
                decode_lens=lens[:decode],
                decode_max_len=int(lens[:decode].max()) if decode else 0,
                prefill_lens=lens[decode:],
                plan_cache={},
            )
        return self._contexts[budgets[layer]]

    def variant(self, variant: Any) -> Any:
        from dataclasses import replace

        return variant if self.compacted else replace(variant, sliding_window=self.spec.budget)

    def _keep(self, scores: Any, positions: Any, held: int) -> Any:
        """Kept slot indices per head [heads, held], sorted, for slots in any order: the
        policy selects over each head's slots ranked by token position (h2o's recent half
        and paged-eviction's pages are by position)."""
        order = np.argsort(positions, axis=1, kind="stable")
        chosen = np.asarray(
            self.spec.policy.keep(
                self.spec,
                np.take_along_axis(scores, order, axis=1),
                np.take_along_axis(positions, order, axis=1),
                held,
            )
        )
        if chosen.ndim == 1:  # one kept set for every head
            chosen = np.tile(chosen, (scores.shape[0], 1))
        keep = np.sort(np.take_along_axis(order, chosen, axis=1), axis=1)
        if keep.shape[1] != held:
            raise RuntimeError(
                f"{self.spec.name} kept {keep.shape[1]} slots, the memory model says {held}"
            )
        return keep

    @property
    def prefill_steps(self) -> list[SeqStep]:
        return [step for step in self.steps if step.count > 1]

    # -- inside each layer's attention ----------------------------------------------------

    def before_attention(
        self, layer: int, cache: Any, key: Any, value: Any, backend: str | None
    ) -> None:
        """Streaming: each decode query's window gets the sinks in its first 4 slots (`key`,
        `value`: the step's new K/V as the model computed them, before the pool stored them)."""
        if self.sinks is None:
            return
        self.sinks.remember(layer, self.steps, key, value)
        dtype = key.dtype
        for step in self.steps:
            if step.count == 1:
                self.sinks.place(
                    layer,
                    cache,
                    step.key,
                    step.table,
                    step.slot_start,
                    step.length - 1,
                    dtype,
                    backend,
                )

    def before_write(self, layer: int, cache: Any) -> None:
        """Decode steps at their budget: per head, fill the victims' holes from the tail."""
        for step in self.steps:
            if not self._evicts_first(step, layer):
                continue
            start = self.layer_start(step, layer)
            scores, positions = self._layer_scores(step, layer), self.positions[step.key][layer]
            heads, kept = scores.shape
            extended = np.concatenate(
                [scores, np.zeros((heads, 1))], axis=1
            )  # the new token: recent
            extended_positions = np.concatenate(
                [positions, np.full((heads, 1), step.length - 1)], axis=1
            )
            keep = self._keep(extended, extended_positions, start + 1)[
                :, :-1
            ]  # the new token stays last
            moved_heads, sources, targets = pool_slots.fill_holes(keep, start)
            pool_slots.move_slots(cache, step.table, self.block_size, moved_heads, sources, targets)
            scores[moved_heads, targets] = scores[moved_heads, sources]
            positions[moved_heads, targets] = positions[moved_heads, sources]
            self.copied_slots += len(moved_heads)
            self.scores[step.key][layer] = scores[:, :start]
            self.positions[step.key][layer] = positions[:, :start]

    def after_attention(
        self, layer: int, cache: Any, query: Any, scale: float, num_layers: int
    ) -> None:
        """Accumulate this step's attention per KV head; compact to what the policy keeps."""
        row = 0
        for index, step in enumerate(self.steps):
            q = query[row : row + step.count]
            row += step.count
            lens = step.slot_start + step.count
            if not self.compacted:
                slots = min(lens, held_tokens(self.spec, step.prompt_len, step.length))
            else:
                slots = self._compact_step(layer, cache, step, q, scale)
            self._layer_slots.append(slots)  # layer-major: each layer's steps in order
            per_layer = self._layer_slots[index :: len(self.steps)]
            if self.compacted:
                self._count_holes(step, layer, num_layers, max(per_layer))
            if (
                layer == num_layers - 1
            ):  # the slots the sequence's blocks must hold: its largest layer's
                self.measured.setdefault(step.key, []).append((step.length, max(per_layer)))
                self.layer_measured.setdefault(step.key, []).append((step.length, tuple(per_layer)))
        if layer == num_layers - 1:
            self._layer_slots = []

    def _compact_step(self, layer: int, cache: Any, step: SeqStep, q: Any, scale: float) -> int:
        start = self.layer_start(step, layer)
        lens = start + step.count
        scores = self._layer_scores(step, layer)
        heads = cache.key_cache.shape[2]
        if scores.shape[0] == 0:
            scores = np.zeros((heads, 0))
            self.positions[step.key][layer] = np.zeros((heads, 0), dtype=np.int64)
        new_positions = np.tile(np.arange(step.length - step.count, step.length), (heads, 1))
        positions = np.concatenate([self.positions[step.key][layer], new_positions], axis=1)
        held = self.layer_held(step, layer, step.length)
        keep = None
        if self.spec.policy.selects_after_prompt:
            scores = np.zeros((heads, lens))  # scored once, from the prompt's observation window
            if step.length - step.count < step.prompt_len <= step.length:
                keep = self._snapkv_keep(layer, cache, step, q, scale, held)
            elif step.length < step.prompt_len:
                self._remember_queries(step, layer, q)
        else:
            keys = pool_slots.read_keys(cache, step.table, lens, self.block_size)
            received = pool_slots.attention_probs(
                keys, q, start + np.arange(step.count), scale
            ).sum(axis=1)
            scores = np.concatenate([scores, np.zeros((heads, step.count))], axis=1) + received
            if held < lens:
                keep = self._keep(scores, positions, held)
        if keep is not None:
            self.copied_slots += pool_slots.compact(cache, step.table, self.block_size, keep)
            scores = np.take_along_axis(scores, keep, axis=1)
            positions = np.take_along_axis(positions, keep, axis=1)
        self.scores[step.key][layer] = scores
        self.positions[step.key][layer] = positions
        return scores.shape[1]

    def _remember_queries(self, step: SeqStep, layer: int, q: Any) -> None:
        layers = self.window_queries.setdefault(step.key, [])
        while len(layers) <= layer:
            layers.append(None)
        previous = layers[layer]
        rows = q.detach().float() if previous is None else _cat(previous, q.detach().float())
        layers[layer] = rows[-self.spec.window :]

    def _snapkv_keep(
        self, layer: int, cache: Any, step: SeqStep, q: Any, scale: float, held: int
    ) -> Any | None:
        """SnapKV's one compression, in the step that reads the prompt's last token: the
        last `window` prompt queries vote over the earlier prompt tokens, per KV head."""
        prompt = step.prompt_len
        if prompt <= self.spec.budget:
            return None
        in_step = prompt - (step.length - step.count)  # prompt tokens this step reads
        earlier = self.window_queries.get(step.key, [None] * (layer + 1))
        earlier = earlier[layer] if layer < len(earlier) else None
        rows = q[:in_step].float() if earlier is None else _cat(earlier, q[:in_step].float())
        window = min(self.spec.window, prompt - 1)
        queries = rows[-window:]
        keys = pool_slots.read_keys(cache, step.table, prompt, self.block_size)
        probs = pool_slots.attention_probs(keys, queries, np.arange(prompt - window, prompt), scale)
        votes = probs.sum(axis=1)[:, : prompt - window]
        keep = self.spec.policy.keep_after_prompt(self.spec, votes, window)
        tail = np.tile(
            np.arange(prompt, step.slot_start + step.count), (keep.shape[0], 1)
        )  # recomputed outputs
        keep = np.concatenate([keep, tail], axis=1)
        if keep.shape[1] != held:
            raise RuntimeError(f"snapkv kept {keep.shape[1]} slots, the memory model says {held}")
        return keep

    def _count_holes(self, step: SeqStep, layer: int, num_layers: int, slots: int) -> None:
        live = self._live.setdefault(step.key, set())
        if layer == 0:
            live.clear()
        live.update(np.unique(self.positions[step.key][layer] // self.block_size).tolist())
        if layer == num_layers - 1:
            self.hole_blocks += len(live)
            self.compact_blocks += cdiv(slots, self.block_size)

    def _layer_scores(self, step: SeqStep, layer: int) -> Any:
        for table in (self.scores, self.positions):
            layers = table.setdefault(step.key, [])
            while len(layers) <= layer:
                layers.append(np.zeros((0, 0)))
        return self.scores[step.key][layer]


def _cat(first: Any, second: Any) -> Any:
    import torch

    return torch.cat([first, second])
