"""Which pool blocks a varlen attention batch reads and which keys each query may see, for
the vectorized torch path (torch_attention.py), split into buckets of similar key length.

A batch pads every sequence to its longest key range, so a decode batch of sequences from
32 to 512 tokens, or a prefill whose first queries see a handful of keys and whose last see
hundreds, would mostly compute padding. Instead:

* each sequence's queries are cut into tiles of at most QUERY_TILE rows, and a tile reads
  only the keys up to its last query (causal), from the block holding the first key its
  first query may see (sliding window, chunk);
* the tiles are sorted by the blocks they read and cut into buckets where a padded batch
  costs less than another call would (`_bucket_bounds`: cost = tiles x rows x keys of the
  bucket's longest tile, plus BUCKET_OVERHEAD per bucket);
* each bucket is one `BucketPlan`: its blocks to gather, its query rows in the packed batch,
  and its mask.

The index work runs in numpy on the host (small arrays: one row per tile) and is done once
per model step; every layer reuses it through the step's plan_cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .variant import AttentionVariant

# prefill queries per tile: the causal triangle left to mask inside a tile is <= 64 keys per row
QUERY_TILE = 64
# One more bucket costs about as much as this many (query row x key) pairs of padded work:
# the fixed per-call cost of a gather, a few small tensor ops and an attention call on CPU.
BUCKET_OVERHEAD = 2048


@dataclass(frozen=True)
class BucketPlan:
    """One padded attention batch: `num_tiles` query tiles of up to `max_q` rows, `max_k` keys
    each."""

    max_q: int
    max_k: int
    blocks: torch.Tensor  # long [tiles * max_k / block_size]: pool blocks to gather, 0 past the end
    q_rows: torch.Tensor  # long [tiles, max_q]: each padded query's row in the packed batch
    q_valid: torch.Tensor | None  # bool [tiles, max_q]; None when every row is a real query
    out_rows: torch.Tensor  # long [real queries]: q_rows[q_valid], where the results go
    allowed: torch.Tensor  # bool [tiles, max_q, max_k]
    bias: torch.Tensor | None  # fp32 [tiles, 1, max_k], 0 where allowed else -inf (max_q == 1 only)

    @property
    def num_tiles(self) -> int:
        return self.q_rows.shape[0]


def first_key(position: np.ndarray, variant: AttentionVariant) -> np.ndarray:
    """The earliest key each query position may see (AttentionVariant.first_key, vectorized)."""
    lo = np.zeros_like(position)
    if variant.sliding_window:
        lo = np.maximum(lo, position - variant.sliding_window + 1)
    if variant.chunk_size:
        lo = np.maximum(lo, position // variant.chunk_size * variant.chunk_size)
    return lo


def varlen_plan(
    block_tables: torch.Tensor,
    query_start: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    variant: AttentionVariant,
    device: torch.device,
) -> list[BucketPlan]:
    """Buckets covering every query of the batch (`paged_attention_varlen`'s arguments)."""
    starts = query_start.cpu().numpy().astype(np.int64)
    lens = seq_lens.cpu().numpy().astype(np.int64)
    q_lens = starts[1:] - starts[:-1]
    tiles_per_seq = -(-q_lens // QUERY_TILE)
    seq = np.repeat(np.arange(len(lens)), tiles_per_seq)  # tile -> its sequence
    if not len(seq):
        return []
    tile = np.arange(len(seq)) - (np.cumsum(tiles_per_seq) - tiles_per_seq)[seq]
    tile_q = np.minimum(QUERY_TILE, q_lens[seq] - tile * QUERY_TILE)
    first_pos = lens[seq] - q_lens[seq] + tile * QUERY_TILE
    key_end = first_pos + tile_q  # causal: a tile sees no key after its last query
    first_block = first_key(first_pos, variant) // block_size
    num_blocks = -(-key_end // block_size) - first_block
    order = np.argsort(-num_blocks, kind="stable")
    tables = block_tables.cpu().numpy()
    plans = []
    for lo, hi in _bucket_bounds(num_blocks[order] * block_size * int(tile_q.max())):
        pick = order[lo:hi]
        plans.append(
            _bucket(
                pick,
                seq[pick],
                tile_q[pick],
                starts[seq[pick]] + tile[pick] * QUERY_TILE,
                first_pos[pick],
                first_block[pick],
                max(int(num_blocks[pick[0]]), 1),
                lens,
                tables,
                block_size,
                variant,
                device,
            )
        )
    return plans


def _bucket_bounds(costs: np.ndarray) -> list[tuple[int, int]]:
    """Cut tiles sorted by descending cost per tile into runs [lo, hi) minimizing
    sum(run length x cost of its first tile) + BUCKET_OVERHEAD per run (dynamic programming).

    Only the starts of runs of equal cost are candidate cuts (a cut inside such a run can move
    to the run's start at no loss), so the program runs over the distinct costs: a few dozen
    at most, since costs are whole blocks."""
    starts = np.flatnonzero(np.r_[True, costs[1:] != costs[:-1]]).tolist()  # candidate cuts
    n, cost = len(costs), costs.tolist()
    points = [*starts, n]
    best, cut = [0.0] * len(points), [0] * len(points)
    for i in range(1, len(points)):
        end = points[i]
        best[i], cut[i] = min(
            (best[j] + BUCKET_OVERHEAD + (end - points[j]) * cost[points[j]], j) for j in range(i)
        )
    bounds, i = [], len(points) - 1
    while i:
        bounds.append((points[cut[i]], points[i]))
        i = cut[i]
    return bounds[::-1]


def _bucket(
    pick: np.ndarray,
    seq: np.ndarray,
    tile_q: np.ndarray,
    row_start: np.ndarray,
    first_pos: np.ndarray,
    first_block: np.ndarray,
    num_blocks: int,
    lens: np.ndarray,
    tables: np.ndarray,
    block_size: int,
    variant: AttentionVariant,
    device: torch.device,
) -> BucketPlan:
    max_q, max_k = int(tile_q.max()), num_blocks * block_size
    seq_len = lens[seq][:, None]
    cols = first_block[:, None] + np.arange(num_blocks)[None, :]
    blocks = tables[seq[:, None], np.minimum(cols, tables.shape[1] - 1)]
    blocks = np.where(cols * block_size < seq_len, blocks, 0).reshape(-1)
    qi = np.arange(max_q)[None, :]
    q_valid = qi < tile_q[:, None]
    q_rows = row_start[:, None] + np.minimum(
        qi, tile_q[:, None] - 1
    )  # padding repeats the tile's last row
    q_pos = first_pos[:, None] + qi
    k_pos = first_block[:, None] * block_size + np.arange(max_k)[None, :]
    allowed = (
        (k_pos < seq_len)[:, None, :]
        & (k_pos[:, None, :] <= q_pos[:, :, None])
        & (k_pos[:, None, :] >= first_key(q_pos, variant)[:, :, None])
    )

    def tensor(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)

    every_row = bool(q_valid.all())
    bias = None
    if max_q == 1:
        bias = tensor(np.where(allowed, np.float32(0.0), np.float32(-np.inf)).astype(np.float32))
    return BucketPlan(
        max_q,
        max_k,
        tensor(blocks.astype(np.int64)),
        tensor(q_rows),
        None if every_row else tensor(q_valid),
        tensor(q_rows[q_valid]),
        tensor(allowed),
        bias,
    )
