"""Real mode: the same scheduler and block manager, with KV in torch block pools and a
transformers model running every step; time is measured wall-clock.

A step packs every scheduled sequence's new tokens into one [1, T] batch, decode tokens
first: attention (kvplan/real/attention.py) writes the step's K/V into the paged cache
(`write_kv`), then runs the decode tokens through `paged_attention` and the prefill
chunks through `paged_prefill`, both reading K/V through the block tables. Slot mappings,
positions and block tables are built with numpy array operations, not per token.
"""

from __future__ import annotations

import time
from typing import Any

from kvplan import cdiv
from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence
from kvplan.real.attention import ATTENTION_NAME, StepContext, check_supported, register_attention


def _as_slots(cache: Any) -> Any:
    from dataclasses import replace

    if not hasattr(cache, "key_cache"):
        return cache  # a KIVI pool (kvplan.kernels.kivi): paged only, never seen as one-slot blocks

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

        check_supported(model.config)
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
        self.block_tokens: dict[int, tuple[int, ...]] = {}  # full paged block -> the tokens written in it
        self.checked: set[tuple[int, int]] = set()  # sequences whose cached prefix was compared
        self.keep_logits = False
        # Teacher forcing (kvplan/real/teacher.py): a sequence's next tokens come from its text,
        # not the argmax, and every row's logits are kept, prompt rows included.
        self.forced: dict[tuple[int, int], list[int]] = {}
        self.eviction: Any = None  # a RealEviction when the engine runs an eviction policy (real/eviction.py)
        self.kivi: Any = None  # a KiviServing when the pool stores KIVI (real/kivi_pool.py)

    @property
    def kv_bytes(self) -> int:
        """Bytes of the pool's tensors (KIVI: plus the peak its residuals held between steps)."""
        total = 0 if self.kivi is None else self.kivi.peak_residual_bytes
        for cache in self.pool:
            tensors = getattr(cache, "tensors", None) or (cache.key_cache, cache.value_cache, cache.k_scale,
                                                          cache.v_scale)
            for tensor in tensors:
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

    def forget_block(self, block: int) -> None:
        """A block refilled from an offload tier: its earlier tokens no longer describe it."""
        self.block_tokens.pop(block, None)

    def _check_and_record(self, seq: Sequence, tokens: list[int], start: int, end: int) -> None:
        """Prefix-cache hits are found by hash; compare the tokens too, as a hit on another
        prompt's block would silently attend to the wrong KV. Blocks restored from an offload
        tier into a fresh block are not known here and are taken as they come."""
        size, table = self.block_size, seq.block_table
        dropped = seq.dropped_blocks  # a sliding window's table starts at logical block `dropped`
        key = (seq.request.request_id, seq.sample_index)
        if start and key not in self.checked:
            for j in range(dropped, start // size):
                cached = self.block_tokens.get(table[j - dropped])
                if cached is not None and cached != tuple(tokens[j * size:(j + 1) * size]):
                    raise RuntimeError(f"prefix cache: block {table[j - dropped]} matched request {key[0]} by hash "
                                       "but holds other tokens (a hash collision); rerun without 'prefix'")
        self.checked.add(key)
        for j in range(start // size, end // size):  # blocks this step fills
            self.block_tokens[table[j - dropped]] = tuple(tokens[j * size:(j + 1) * size])

    def step_time(self, plan: StepPlan) -> float:
        import numpy as np
        import torch

        started = time.perf_counter()
        # Decode tokens first (one per sequence), then prefill chunks: each kernel gets a contiguous slice.
        order = sorted(plan.scheduled, key=lambda item: item[1] != 1)
        counts = np.fromiter((count for _, count in order), dtype=np.int64, count=len(order))
        starts = np.fromiter((seq.num_computed for seq, _ in order), dtype=np.int64, count=len(order))
        ends = starts + counts
        # Where the new tokens go in each sequence's slots: their positions, unless an
        # eviction policy keeps fewer (real/eviction.py); RoPE positions stay the tokens' own.
        eviction = self.eviction
        slot_starts = starts if eviction is None else np.fromiter(
            (eviction.slot_start(seq) for seq, _ in order), dtype=np.int64, count=len(order))
        slot_ends = slot_starts + counts
        contiguous = bool(order) and order[0][0].extent is not None
        block = 1 if contiguous else self.block_size
        ids: list[int] = []
        for seq, count in order:
            start = seq.num_computed
            tokens = self.tokens_of(seq)
            ids.extend(tokens[start:start + count])
            if not contiguous and (eviction is None or eviction.positional):
                self._check_and_record(seq, tokens, start, start + count)
        if contiguous:  # one-slot "blocks": the table is the extent's slot range
            firsts = np.fromiter((seq.extent[0] for seq, _ in order), dtype=np.int64, count=len(order))
            tables = firsts[:, None] + np.arange(int(ends.max()), dtype=np.int64)[None, :]
        else:
            widths = cdiv(slot_ends, block)
            tables = np.full((len(order), int(widths.max()) if len(order) else 0), -1, dtype=np.int64)
            for row, (seq, _) in enumerate(order):
                tables[row, :widths[row]] = seq.block_table[:widths[row]]
        owner = np.repeat(np.arange(len(order)), counts)
        first_index = np.cumsum(counts) - counts
        positions = starts[owner] + np.arange(len(owner)) - first_index[owner]
        in_slots = positions if eviction is None else slot_starts[owner] + np.arange(len(owner)) - first_index[owner]
        slots = tables[owner, in_slots // block] * block + in_slots % block
        num_decode = int(np.count_nonzero(counts == 1))
        done = ends == np.fromiter((seq.prompt_len + seq.num_generated for seq, _ in order), dtype=np.int64,
                                   count=len(order))
        sampled = [seq for (seq, _), last in zip(order, done) if last]
        keep = (first_index + counts - 1)[done]
        forced_rows: list[tuple[Sequence, int]] = []  # (sequence, rows kept) in `keep` order
        if self.forced:  # forced sequences' rows first, then one row per sampled sequence
            rows, sampled_rows, sampled = [], [], []
            for (seq, count), first, last in zip(order, first_index.tolist(), done):
                if (seq.request.request_id, seq.sample_index) in self.forced:
                    rows.extend(range(first, first + count))
                    forced_rows.append((seq, count))
                elif last:
                    sampled_rows.append(first + count - 1)
                    sampled.append(seq)
            keep = np.array(rows + sampled_rows, dtype=np.int64)

        def tensor(array: Any, dtype: Any) -> Any:
            return torch.from_numpy(np.ascontiguousarray(array)).to(device=self.device, dtype=dtype)

        prefill_counts = counts[num_decode:]
        ctx = StepContext(
            pool=self.slot_pool if contiguous else self.pool,
            slot_mapping=tensor(slots, torch.int64),
            num_decode=num_decode,
            decode_tables=tensor(tables[:num_decode], torch.int32),
            decode_lens=tensor(slot_ends[:num_decode], torch.int32),
            decode_max_len=int(slot_ends[:num_decode].max()) if num_decode else 0,
            prefill_tables=tensor(tables[num_decode:], torch.int32),
            prefill_query_start=tensor(np.concatenate([[0], np.cumsum(prefill_counts)]), torch.int32),
            prefill_lens=tensor(slot_ends[num_decode:], torch.int32),
            prefill_max_query=int(prefill_counts.max()) if len(prefill_counts) else 0,
            backend=self.backend,
            eviction=None if eviction is None else eviction.begin_step(order, slot_starts),
            kivi=None if self.kivi is None else self.kivi.begin_step(order, num_decode, self.device))
        with torch.inference_mode():
            output = self.model(input_ids=torch.tensor([ids], device=self.device),
                                position_ids=tensor(positions[None, :], torch.long),
                                kvplan_ctx=ctx, logits_to_keep=tensor(keep, torch.long), use_cache=False)
        logits = output.logits[0].float()
        if forced_rows:
            logits = self._take_forced(forced_rows, logits)
        next_tokens = logits.argmax(dim=-1).tolist()
        for seq, token, row in zip(sampled, next_tokens, logits):
            self.tokens_of(seq).append(token)
            if self.keep_logits:
                self.step_logits.setdefault((seq.request.request_id, seq.sample_index), []).append(row)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started + plan.transfer_s

    def _take_forced(self, forced_rows: list[tuple[Sequence, int]], logits: Any) -> Any:
        """Record the forced sequences' rows (they lead `logits` in order) and append their
        text's next token where their step reached the end of what they know; returns the
        rows left for sampling."""
        row = 0
        for seq, count in forced_rows:
            key = (seq.request.request_id, seq.sample_index)
            self.step_logits.setdefault(key, []).extend(logits[row:row + count])
            row += count
            tokens = self.tokens_of(seq)
            if seq.num_computed + count == seq.prompt_len + seq.num_generated:
                tokens.append(self.forced[key][len(tokens)])
        return logits[row:]  # offload copies were timed as they ran
