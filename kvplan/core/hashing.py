"""Block hashes for automatic prefix caching.

A full block is identified by its parent block's hash and its own tokens, so equal hashes
mean equal prefixes (vLLM's hash chain). Requests that carry token ids are hashed from
them (prompt, plus generated ids when the workload knows them). Trace requests carry one
id per `hash_block_tokens` prompt tokens whose ids already identify the prefix (Mooncake:
a prefix tree over 512-token blocks); an engine block of any size then maps to the trace
block holding its last token plus its end position, so every block size replays the same
sharing consistently. Requests with neither share nothing.

Python's hash of ints and tuples of ints is deterministic across processes, so the same
seed gives the same cache behaviour; the simulator uses it (fast, and its outputs are pinned).
Real mode, where a wrong hit would attend to another prompt's KV, uses `stable=True`: SHA-256
over the parent block's digest and the block's token ids, as vLLM's hash_block_tokens does
(collision-resistant; kvplan's root is a fixed digest rather than vLLM's random seed, so runs
repeat), and its runner also compares the tokens on every hit.
"""

from __future__ import annotations

import hashlib
from array import array

from kvplan.workload.request import Request

ROOT_HASH = 0x6B76706C616E  # the empty prefix
STABLE_ROOT = hashlib.sha256(b"kvplan block hash root").digest()


def chained_hashes(tokens: tuple[int, ...], block_size: int) -> list[int]:
    hashes = []
    parent = ROOT_HASH
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tokens[start : start + block_size]))
        hashes.append(parent)
    return hashes


def stable_chained_hashes(tokens: tuple[int, ...], block_size: int) -> list[int]:
    """SHA-256 chain: digest_i = sha256(digest_{i-1} || block i's ids as int64 little-endian).
    Each block's id is its digest's first 63 bits (non-negative int64, as numpy code expects)."""
    hashes = []
    parent = STABLE_ROOT
    for start in range(0, len(tokens) - block_size + 1, block_size):
        ids = array("q", tokens[start : start + block_size])
        if (
            ids.itemsize != 8 or array("q", [1]).tobytes()[0] != 1
        ):  # pragma: no cover - big-endian hosts
            ids.byteswap()
        parent = hashlib.sha256(parent + ids.tobytes()).digest()
        hashes.append(int.from_bytes(parent[:8], "little") & (2**63 - 1))
    return hashes


def trace_hashes(request: Request, block_size: int) -> list[int]:
    """Engine-block hashes from a trace's coarser block ids (prompt tokens only): the id of
    the trace block holding the engine block's last token, and that token's position.
    Vectorized: Mooncake prompts run to tens of thousands of tokens."""
    import numpy as np

    ids, span = request.block_hashes or (), request.hash_block_tokens
    ends = np.arange(block_size, request.prompt_len + 1, block_size, dtype=np.int64)
    trace_blocks = (ends - 1) // span
    ends = ends[trace_blocks < len(ids)]
    if not len(ends):
        return []
    owner = np.asarray(ids, dtype=np.int64)[trace_blocks[: len(ends)]]
    # (id, end) packed into one int: ends stay below 2**32, ids are non-negative.
    return ((owner << 32) | ends).tolist()


def block_hashes(request: Request, block_size: int, stable: bool = False) -> list[int]:
    """Hashes of the request's full blocks whose tokens are known in advance (`stable`: SHA-256)."""
    if request.prompt_tokens is not None:
        tokens = request.prompt_tokens + (request.output_tokens or ())
        return (stable_chained_hashes if stable else chained_hashes)(tokens, block_size)
    if request.block_hashes is not None:
        return trace_hashes(request, block_size)
    return []


def with_generated_blocks(request: Request, hashes: list[int], block_size: int) -> list[int]:
    """`hashes` (the blocks whose tokens identify a prefix: block_hashes) continued over every
    further full block of the request's prompt and output, as vLLM hashes each block its
    request fills, generated tokens included. Tokens nobody knows in advance (a length-only
    prompt, a sampled output) make blocks no other request shares: each gets a hash of its
    request and its end position, below -2**32 so that it never meets a trace hash (those are
    non-negative); it meets a token hash (Python's hash of a tuple) with the odds of any
    64-bit collision."""
    import numpy as np

    total = (request.prompt_len + request.output_len) // block_size
    if len(hashes) >= total:
        return hashes
    ends = np.arange((len(hashes) + 1) * block_size, total * block_size + 1, block_size)
    owner = np.int64(request.request_id + 1) << np.int64(32)
    return hashes + (-(owner | ends.astype(np.int64))).tolist()


def hashes_by_request(
    requests: list[Request], block_size: int, stable: bool = False
) -> dict[int, list[int]]:
    """Every request's block hashes once, shared by the bound below and the engine."""
    return {request.request_id: block_hashes(request, block_size, stable) for request in requests}


def infinite_cache_hit_tokens(
    requests: list[Request], block_size: int, hashes: dict[int, list[int]] | None = None
) -> tuple[int, int]:
    """(hit tokens, queried prompt tokens) for an unbounded cache replaying `requests` in
    arrival order: the upper bound a finite cache is measured against. Generated blocks
    are cached too (when ids are known); a fully cached prompt recomputes its last block.

    Vectorized: a block hits when its hash first appeared in an earlier request. Hashes
    identify whole prefixes, so the blocks that hit always form a prefix of the request.
    """
    import numpy as np

    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    blocks = [
        hashes[r.request_id] if hashes is not None else block_hashes(r, block_size) for r in ordered
    ]
    queried = sum(r.prompt_len for r in ordered)
    counts = np.fromiter((len(b) for b in blocks), dtype=np.int64, count=len(blocks))
    if not counts.sum():
        return 0, queried
    flat = np.fromiter((h for b in blocks for h in b), dtype=np.int64, count=int(counts.sum()))
    owner = np.repeat(np.arange(len(blocks)), counts)
    position = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    seen_before = owner[first][inverse] < owner
    limits = np.array([(r.prompt_len - 1) // block_size for r in ordered], dtype=np.int64)
    hits = int(np.count_nonzero(seen_before & (position < limits[owner]))) * block_size
    return hits, queried


def trace_block_bound(requests: list[Request]) -> float | None:
    """The trace's own bound: the share of its prompt blocks whose id appeared before
    (64.0% on Mooncake's synthetic trace)."""
    ids = [h for r in requests if r.block_hashes for h in r.block_hashes]
    return 1.0 - len(set(ids)) / len(ids) if ids else None
