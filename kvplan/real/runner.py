"""Real mode: the same scheduler and block manager, with KV in torch block pools and a
transformers model running every step; time is measured wall-clock.

A step packs every scheduled sequence's new tokens into one [1, T] batch, decode tokens
first: attention (kvplan/real/attention.py) writes the step's K/V into the paged cache
(`write_kv`), then runs the decode tokens through `paged_attention` and the prefill
chunks through `paged_prefill`, both reading K/V through the block tables.

A step runs in two halves: `prepare` lays the packed tokens out (positions, slots and block
tables with numpy array operations, not per token: `lay_out`), picks the logits rows to
keep (teacher forcing keeps every row of a forced sequence) and builds the attention's step
context, the eviction and KIVI hooks' included; `execute` runs the forward pass and samples.
`step_time` times both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kvplan import cdiv
from kvplan.core.scheduler import StepPlan
from kvplan.core.sequence import Sequence
from kvplan.quality.torch_threads import intra_op_threads
from kvplan.real.attention import ATTENTION_NAME, StepContext, check_supported, register_attention

if TYPE_CHECKING:
    from kvplan.real.eviction import RealEviction
    from kvplan.real.kivi_pool import KiviServing


def _as_slots(cache: Any) -> Any:
    from dataclasses import replace

    if not hasattr(cache, "key_cache"):
        return cache  # a KIVI pool (kvplan.kernels.kivi): paged only, never seen as one-slot blocks

    def view(tensor: Any) -> Any:
        if tensor is None or tensor.dim() < 4:
            return tensor  # per-tensor scales
        return tensor.reshape(-1, 1, *tensor.shape[2:])

    return replace(
        cache,
        key_cache=view(cache.key_cache),
        value_cache=view(cache.value_cache),
        k_scale=view(cache.k_scale),
        v_scale=view(cache.v_scale),
    )


@dataclass(frozen=True)
class StepLayout:
    """Where one step's packed tokens go: decode tokens first (one per sequence), then prefill
    chunks, each sequence's tokens contiguous."""

    order: list[tuple[Sequence, int]]  # (sequence, new tokens) in packed order
    counts: np.ndarray  # new tokens per sequence
    first_index: np.ndarray  # each sequence's first row among the packed tokens
    positions: np.ndarray  # each packed token's position in its sequence (RoPE's)
    slot_ends: np.ndarray  # slots each sequence holds once the step is written
    slot_starts: np.ndarray  # where each sequence's new tokens start in its slots
    slots: np.ndarray  # each packed token's slot in the pool
    tables: np.ndarray  # one block table per sequence, padded with -1
    num_decode: int
    done: np.ndarray  # the step reaches the sequence's last known token, so it samples one
    contiguous: bool  # tables are one-slot "blocks": a contiguous allocator's extents


def lay_out(
    order: list[tuple[Sequence, int]], block_size: int, eviction: RealEviction | None
) -> StepLayout:
    """The step's positions, slots and block tables, from the block manager's state."""
    n = len(order)
    counts = np.fromiter((count for _, count in order), dtype=np.int64, count=n)
    starts = np.fromiter((seq.num_computed for seq, _ in order), dtype=np.int64, count=n)
    ends = starts + counts
    # Where the new tokens go in each sequence's slots: their positions, unless an
    # eviction policy keeps fewer (real/eviction.py); RoPE positions stay the tokens' own.
    slot_starts = (
        starts
        if eviction is None
        else np.fromiter((eviction.slot_start(seq) for seq, _ in order), dtype=np.int64, count=n)
    )
    slot_ends = slot_starts + counts
    contiguous = bool(order) and order[0][0].extent is not None
    block = 1 if contiguous else block_size
    if contiguous:  # one-slot "blocks": the table is the extent's slot range
        firsts = np.fromiter((seq.extent[0] for seq, _ in order), dtype=np.int64, count=n)
        tables = firsts[:, None] + np.arange(int(ends.max()), dtype=np.int64)[None, :]
    else:
        widths = cdiv(slot_ends, block)
        tables = np.full((n, int(widths.max()) if n else 0), -1, dtype=np.int64)
        for row, (seq, _) in enumerate(order):
            tables[row, : widths[row]] = seq.block_table[: widths[row]]
    owner = np.repeat(np.arange(n), counts)
    first_index = np.cumsum(counts) - counts
    positions = starts[owner] + np.arange(len(owner)) - first_index[owner]
    in_slots = (
        positions
        if eviction is None
        else slot_starts[owner] + np.arange(len(owner)) - first_index[owner]
    )
    slots = tables[owner, in_slots // block] * block + in_slots % block
    done = ends == np.fromiter(
        (seq.prompt_len + seq.num_generated for seq, _ in order), dtype=np.int64, count=n
    )
    return StepLayout(
        order,
        counts,
        first_index,
        positions,
        slot_ends,
        slot_starts,
        slots,
        tables,
        int(np.count_nonzero(counts == 1)),
        done,
        contiguous,
    )


@dataclass(frozen=True)
class PreparedStep:
    """One step ready for the model: its tokens, where they go, and which logits it keeps."""

    ids: list[int]  # the packed token ids
    layout: StepLayout
    keep: np.ndarray  # packed rows whose logits the model returns: forced sequences' rows first
    forced_rows: list[tuple[Sequence, int]]  # (teacher-forced sequence, rows kept), leading `keep`
    sampled: list[Sequence]  # one per kept row after the forced ones
    context: StepContext


NARROW_WIDTH = 512  # hidden sizes below this run their CPU steps on one thread


class RealRunner:
    """Executes step plans on a transformers model; greedy decoding; measured time.

    The hooks are fixed at construction: `eviction` when the engine runs an eviction policy
    (real/eviction.py), `kivi` when the pool stores KIVI (real/kivi_pool.py)."""

    mode = "real"

    def __init__(
        self,
        model: Any,
        pool: list[Any],
        block_size: int,
        vocab_size: int,
        device: str,
        backend: str | None = None,
        seed: int = 0,
        eviction: RealEviction | None = None,
        kivi: KiviServing | None = None,
    ) -> None:
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
        # torch's intra-op threads pay off on wide matrices; a narrow model's ops take
        # microseconds and the threads' synchronization dominates them (stories260K, width 64:
        # 4-5x slower on 2 threads than on 1 on a busy 2-core machine), so a narrow model's
        # CPU steps run on one thread
        width = getattr(model.config, "hidden_size", None) or NARROW_WIDTH
        self.threads = 1 if self.device.type == "cpu" and width < NARROW_WIDTH else None
        self.eviction = eviction
        self.kivi = kivi
        self.tokens: dict[tuple[int, int], list[int]] = {}
        self.step_logits: dict[
            tuple[int, int], Any
        ] = {}  # last step's sampled logits (quality checks)
        self.block_tokens: dict[
            int, tuple[int, ...]
        ] = {}  # full paged block -> the tokens written in it
        self.checked: set[tuple[int, int]] = set()  # sequences whose cached prefix was compared
        self.keep_logits = False
        # Teacher forcing (kvplan/real/teacher.py): a sequence's next tokens come from its text,
        # not the argmax, and every row's logits are kept, prompt rows included.
        self.forced: dict[tuple[int, int], list[int]] = {}

    @property
    def kv_bytes(self) -> int:
        """Bytes of the pool's tensors (KIVI: plus the peak its residuals held between steps)."""
        total = 0 if self.kivi is None else self.kivi.peak_residual_bytes
        for cache in self.pool:
            tensors = getattr(cache, "tensors", None) or (
                cache.key_cache,
                cache.value_cache,
                cache.k_scale,
                cache.v_scale,
            )
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
                if cached is not None and cached != tuple(tokens[j * size : (j + 1) * size]):
                    raise RuntimeError(
                        f"prefix cache: block {table[j - dropped]} matched request {key[0]} by "
                        "hash "
                        "but holds other tokens (a hash collision); rerun without 'prefix'"
                    )
        self.checked.add(key)
        for j in range(start // size, end // size):  # blocks this step fills
            self.block_tokens[table[j - dropped]] = tuple(tokens[j * size : (j + 1) * size])

    def step_time(self, plan: StepPlan) -> float:
        started = time.perf_counter()
        with intra_op_threads(self.threads):
            self.execute(self.prepare(plan))
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()
        return (
            time.perf_counter() - started + plan.transfer_s
        )  # offload copies were timed as they ran

    def prepare(self, plan: StepPlan) -> PreparedStep:
        """Lay the step out, read its tokens and build the attention's step context."""
        # Decode tokens first (one per sequence), then prefill chunks: each kernel gets a contiguous
        # slice.
        order = sorted(plan.scheduled, key=lambda item: item[1] != 1)
        layout = lay_out(order, self.block_size, self.eviction)
        ids = self._token_ids(layout)
        keep, forced_rows, sampled = self._rows_to_keep(layout)
        return PreparedStep(ids, layout, keep, forced_rows, sampled, self._context(layout))

    def execute(self, step: PreparedStep) -> None:
        """The forward pass, then each sampling sequence's next token (greedy, or its text's)."""
        import torch

        with torch.inference_mode():
            output = self.model(
                input_ids=torch.tensor([step.ids], device=self.device),
                position_ids=self._tensor(step.layout.positions[None, :], torch.long),
                kvplan_ctx=step.context,
                logits_to_keep=self._tensor(step.keep, torch.long),
                use_cache=False,
            )
        logits = output.logits[0].float()
        if step.forced_rows:
            logits = self._take_forced(step.forced_rows, logits)
        next_tokens = logits.argmax(dim=-1).tolist()
        for seq, token, row in zip(step.sampled, next_tokens, logits):
            self.tokens_of(seq).append(token)
            if self.keep_logits:
                self.step_logits.setdefault((seq.request.request_id, seq.sample_index), []).append(
                    row
                )

    def _token_ids(self, layout: StepLayout) -> list[int]:
        """The packed token ids; blocks prefix caching may hit are checked and recorded on the
        way."""
        check = not layout.contiguous and (self.eviction is None or self.eviction.positional)
        ids: list[int] = []
        for seq, count in layout.order:
            start = seq.num_computed
            tokens = self.tokens_of(seq)
            ids.extend(tokens[start : start + count])
            if check:
                self._check_and_record(seq, tokens, start, start + count)
        return ids

    def _rows_to_keep(
        self, layout: StepLayout
    ) -> tuple[np.ndarray, list[tuple[Sequence, int]], list[Sequence]]:
        """The packed rows whose logits the step needs: the last row of each sequence that
        samples; with teacher forcing, every row of a forced sequence first."""
        order, counts, first_index, done = (
            layout.order,
            layout.counts,
            layout.first_index,
            layout.done,
        )
        if not self.forced:
            sampled = [seq for (seq, _), last in zip(order, done) if last]
            return (first_index + counts - 1)[done], [], sampled
        rows: list[int] = []
        sampled_rows: list[int] = []
        forced_rows: list[tuple[Sequence, int]] = []
        sampled = []
        for (seq, count), first, last in zip(order, first_index.tolist(), done):
            if (seq.request.request_id, seq.sample_index) in self.forced:
                rows.extend(range(first, first + count))
                forced_rows.append((seq, count))
            elif last:
                sampled_rows.append(first + count - 1)
                sampled.append(seq)
        return np.array(rows + sampled_rows, dtype=np.int64), forced_rows, sampled

    def _context(self, layout: StepLayout) -> StepContext:
        """What every layer's attention reads this step: slots, block tables and lengths as
        tensors on the device, and the hooks' plans for the step."""
        import torch

        num_decode, tables, slot_ends = layout.num_decode, layout.tables, layout.slot_ends
        prefill_counts = layout.counts[num_decode:]
        return StepContext(
            pool=self.slot_pool if layout.contiguous else self.pool,
            slot_mapping=self._tensor(layout.slots, torch.int64),
            num_decode=num_decode,
            decode_tables=self._tensor(tables[:num_decode], torch.int32),
            decode_lens=self._tensor(slot_ends[:num_decode], torch.int32),
            decode_max_len=int(slot_ends[:num_decode].max()) if num_decode else 0,
            prefill_tables=self._tensor(tables[num_decode:], torch.int32),
            prefill_query_start=self._tensor(
                np.concatenate([[0], np.cumsum(prefill_counts)]), torch.int32
            ),
            prefill_lens=self._tensor(slot_ends[num_decode:], torch.int32),
            prefill_max_query=int(prefill_counts.max()) if len(prefill_counts) else 0,
            backend=self.backend,
            eviction=None
            if self.eviction is None
            else self.eviction.begin_step(layout.order, layout.slot_starts),
            kivi=None
            if self.kivi is None
            else self.kivi.begin_step(layout.order, num_decode, self.device),
        )

    def _tensor(self, array: np.ndarray, dtype: Any) -> Any:
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).to(device=self.device, dtype=dtype)

    def _take_forced(self, forced_rows: list[tuple[Sequence, int]], logits: Any) -> Any:
        """Record the forced sequences' rows (they lead `logits` in order) and append their
        text's next token where their step reached the end of what they know; returns the
        rows left for sampling."""
        row = 0
        for seq, count in forced_rows:
            key = (seq.request.request_id, seq.sample_index)
            self.step_logits.setdefault(key, []).extend(logits[row : row + count])
            row += count
            tokens = self.tokens_of(seq)
            if seq.num_computed + count == seq.prompt_len + seq.num_generated:
                tokens.append(self.forced[key][len(tokens)])
        return logits[row:]
