"""SGLang's startup defaults by release, read in its released sources (the sdists on PyPI:
python/sglang/srt/server_args.py, model_executor/model_runner.py, managers/tp_worker.py).

- mem_fraction_static: 0.3-0.4.5 by TP size only (>= 16: 0.79, >= 8: 0.83, 0.81 from 0.4.0,
  >= 4: 0.85, >= 2: 0.87, else 0.88); 0.4.6 keeps that table up to 80 GiB cards and above
  takes (memory - 13 GiB) / memory; 0.5.0 reserves by memory tier, (2.8 + P/10), (9.5 + P/2)
  or (12 + P/2) GiB below 35 / 90 / 160 GiB, else 32 GiB (P = TP x PP); from 0.5.4
  (_handle_gpu_memory_settings) 512 MiB + 1.5 x max(chunked_prefill_size, 2048) MiB + 2 MiB
  per CUDA-graph batch size + P/8 GiB, at least 10 GiB above 60 GiB cards. The fraction is of
  the card as nvidia-smi reports it.
- chunked_prefill_size: 8192 up to 0.3; 2048 below 25,000 MiB else 8192 in 0.4; from 0.5 by
  memory tier (2048 below 35 GiB, 8192 below 160 GiB, else 16384; 0.5.4 adds 4096 for 35-60 GiB).
- max_running_requests: min(pool tokens // 2, the request pool), the request pool being
  clamp(pool tokens / context length x 512, 2048, 4096) (5120 before 0.4).
- The KV pool: (free memory at init x fraction) - weights, free memory being what is left
  after torch.distributed / NCCL start (model_runner.profile_max_num_token).
- Scheduling: a prefill batch runs before the decodes (no mixed chunk by default), the radix
  (prefix) cache is on.
"""

from __future__ import annotations

from kvplan.engines.versions import Version, on_or_after

RESERVED_BY_TIER = (0, 5, 0)
RESERVED_BY_PARTS = (0, 5, 4)
LARGE_CARD_FORMULA = (0, 4, 6)
TP_TABLE_081 = (0, 4, 0)
GIB_MIB = 1024
# the overlap scheduler (its "zero-overhead batch scheduler") is the default from 0.4.0
OVERLAP_SCHEDULER_FROM = (0, 4, 0)


def chunked_prefill_size(version: Version | None, memory_gib: float) -> int:
    if not on_or_after(version, TP_TABLE_081):
        return 8192
    if not on_or_after(version, RESERVED_BY_TIER):
        return 2048 if memory_gib * GIB_MIB < 25_000 else 8192
    if memory_gib < 35:
        return 2048
    if memory_gib < 60 and on_or_after(version, RESERVED_BY_PARTS):
        return 4096
    return 8192 if memory_gib < 160 else 16384


def cuda_graph_max_bs(memory_gib: float, tp: int) -> int:
    """The largest batch SGLang 0.5.4+ captures a CUDA graph for (its memory reserve counts it)."""
    if memory_gib < 20:
        return 8
    if memory_gib < 35:
        return 24 if tp < 4 else 80
    if memory_gib < 60:
        return 32 if tp < 4 else 160
    if memory_gib < 160:
        return 256 if tp < 4 else 512
    return 512


def mem_fraction_static(version: Version | None, memory_gib: float, tp: int, pp: int = 1) -> float:
    """SGLang's default --mem-fraction-static for this card (memory as nvidia-smi reports it)."""
    parts = tp * pp
    if on_or_after(version, RESERVED_BY_PARTS):
        chunk = chunked_prefill_size(version, memory_gib)
        reserved = (
            512
            + max(chunk, 2048) * 1.5
            + cuda_graph_max_bs(memory_gib, tp) * 2
            + parts / 8 * GIB_MIB
        )
        if memory_gib > 60:
            reserved = max(reserved, 10 * GIB_MIB)
        return round((memory_gib * GIB_MIB - reserved) / (memory_gib * GIB_MIB), 3)
    if on_or_after(version, RESERVED_BY_TIER):
        tiers = ((35, 2.8 + parts / 10), (90, 9.5 + parts / 2), (160, 12 + parts / 2))
        reserved_gib = next((r for limit, r in tiers if memory_gib < limit), 32.0)
        return round((memory_gib - reserved_gib) / memory_gib, 3)
    if on_or_after(version, LARGE_CARD_FORMULA) and memory_gib * GIB_MIB > 81_920:
        return (memory_gib - 13) / memory_gib
    eight = 0.81 if on_or_after(version, TP_TABLE_081) else 0.83
    table = ((16, 0.79), (8, eight), (4, 0.85), (2, 0.87))
    return next((value for size, value in table if parts >= size), 0.88)


def max_running_requests(version: Version | None, pool_tokens: int, context_len: int) -> int:
    ceiling = 4096 if on_or_after(version, TP_TABLE_081) else 5120
    request_pool = min(max(int(pool_tokens / max(context_len, 1) * 512), 2048), ceiling)
    return max(1, min(pool_tokens // 2, request_pool))
