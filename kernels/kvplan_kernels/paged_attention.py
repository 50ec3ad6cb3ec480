"""Paged decode attention: one query token per sequence against its block-table KV.

The Triton kernel (triton_decode.py) runs per (sequence, KV head, split): when sequences x
KV heads cannot fill the GPU, each sequence's keys are split across programs and a second
pass merges the partial softmaxes (flash-decoding). K/V stay in their storage dtype up to
the registers; dots run in the query's fp16/bf16 on tensor cores with fp32 accumulation.
Tokens are gathered through the block table one tile of BLOCK_N tokens at a time
(block = table[t // block_size], offset = t % block_size), so any power-of-two block
size, 1 included, works with one code path. Launch parameters are autotuned on CUDA.
"""

from __future__ import annotations

import torch

from . import interpreting, jit_on_first_use, select_backend
from .quant import CacheFormat, get_format
from .reference import paged_attention_reference
from .torch_attention import paged_attention_varlen
from .triton_decode import decode_kernel, decode_reduce_kernel
from .variant import PLAIN, AttentionVariant, check_sinks

SCALE_NONE, SCALE_TENSOR, SCALE_TOKEN, SCALE_GROUPS = 0, 1, 2, 3
SPLIT_ALIGN = 128  # split lengths are multiples of the largest BLOCK_N autotune tries
MIN_SPLIT_TOKENS = 512  # fewer keys per split would cost more in the merge than they save


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    fmt: str | CacheFormat = "none",
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
    *,
    variant: AttentionVariant = PLAIN,
    backend: str | None = None,
    block_n: int | None = None,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    plan_cache: dict | None = None,
) -> torch.Tensor:
    """Decode attention for query [num_seqs, num_heads, head_dim]; returns the same shape and dtype.

    key_cache/value_cache: [num_blocks, block_size, num_kv_heads, packed_dim] in the format's
    storage dtype; block_tables: int32 [num_seqs, max_blocks]; seq_lens: int [num_seqs]
    (the query is the last of its sequence's tokens, already written to the cache).
    k_scale/v_scale: per-tensor scales (fp8, intB-tensor; default 1.0) or the per-token
    scale caches [num_blocks, block_size, num_kv_heads, num_groups] of int formats.
    variant: sliding window, chunked attention, softcap, sinks (see kernels/variant.py).
    backend: None/"auto" (Triton where it can run, else torch), "triton", "torch", "reference".
    block_n: tokens per Triton tile (power of two >= 16; default: autotuned on CUDA).
    num_splits: Triton key splits per sequence (power of two; default: enough programs to
    fill the GPU). max_seq_len: the longest sequence, if the caller knows it (saves a sync).
    plan_cache: a dict the caller keeps for one step's tables and lengths, so the torch
    path builds its gather indices and masks once for all layers (see torch_attention).
    """
    cf = get_format(fmt, key_cache.dtype)
    check_attention_args(
        query, key_cache, value_cache, block_tables, seq_lens, cf, k_scale, v_scale
    )
    check_sinks(variant, query.shape[1])
    chosen = select_backend(backend, query.is_cuda)
    if chosen == "reference":
        return paged_attention_reference(
            query,
            key_cache,
            value_cache,
            block_tables,
            seq_lens,
            scale,
            cf,
            k_scale,
            v_scale,
            variant,
        )
    if chosen == "torch":
        query_start = torch.arange(query.shape[0] + 1, device=query.device)
        return paged_attention_varlen(
            query,
            key_cache,
            value_cache,
            block_tables,
            query_start,
            seq_lens,
            scale,
            cf,
            k_scale,
            v_scale,
            variant,
            None if plan_cache is None else plan_cache.setdefault("decode", {}),
        )
    return _launch_decode(
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        scale,
        cf,
        k_scale,
        v_scale,
        variant,
        block_n,
        num_splits,
        max_seq_len,
    )


def check_attention_args(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    cf: CacheFormat,
    k_scale: torch.Tensor | float | None,
    v_scale: torch.Tensor | float | None,
) -> None:
    if query.dim() != 3:
        raise ValueError(
            f"query must be [num_tokens, num_heads, head_dim], got {tuple(query.shape)}"
        )
    num_heads, head_dim = query.shape[1:]
    num_seqs = seq_lens.shape[0] if seq_lens.dim() == 1 else -1
    if key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError(
            f"caches must be [num_blocks, block_size, num_kv_heads, packed_dim] and alike, "
            f"got {tuple(key_cache.shape)} and {tuple(value_cache.shape)}"
        )
    num_kv_heads = key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        )
    if key_cache.shape[3] != cf.packed_dim(head_dim):
        raise ValueError(
            f"format {cf.name} at head_dim {head_dim} stores {cf.packed_dim(head_dim)} "
            f"elements per vector, but the cache has {key_cache.shape[3]}"
        )
    if key_cache.dtype != cf.storage or value_cache.dtype != cf.storage:
        raise ValueError(
            f"format {cf.name} stores {cf.storage}, got {key_cache.dtype}/{value_cache.dtype}"
        )
    if num_seqs < 0 or seq_lens.is_floating_point():
        raise ValueError(
            f"seq_lens must be int [num_seqs], got {seq_lens.dtype} {tuple(seq_lens.shape)}"
        )
    if (
        block_tables.dim() != 2
        or block_tables.shape[0] != num_seqs
        or block_tables.is_floating_point()
    ):
        raise ValueError(
            f"block_tables must be int [{num_seqs}, max_blocks], got "
            f"{block_tables.dtype} {tuple(block_tables.shape)}"
        )
    # Checked on CPU only: on CUDA the .max() would cost a host sync on every step.
    if (
        num_seqs
        and not seq_lens.is_cuda
        and int(seq_lens.max()) > block_tables.shape[1] * key_cache.shape[1]
    ):
        raise ValueError("a sequence is longer than its block table can address")
    if cf.per_token_scales:
        scale_shape = (*key_cache.shape[:3], cf.num_groups(head_dim))
        for s in (k_scale, v_scale):
            if not isinstance(s, torch.Tensor) or tuple(s.shape) != scale_shape:
                raise ValueError(f"format {cf.name} needs scale caches of shape {scale_shape}")


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def kernel_layout_args(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    cf: CacheFormat,
    k_scale: torch.Tensor | float | None,
    v_scale: torch.Tensor | float | None,
    variant: AttentionVariant,
) -> tuple[list, dict]:
    """Pointer/stride arguments and constexprs both Triton attention kernels take alike."""
    head_dim = query.shape[2]
    if query.stride(-1) != 1 or key_cache.stride(-1) != 1 or value_cache.stride(-1) != 1:
        raise ValueError(
            "the Triton attention kernels need the last (head_dim) dimension contiguous"
        )
    if cf.per_token_scales:
        mode = SCALE_TOKEN if cf.num_groups(head_dim) == 1 else SCALE_GROUPS
        ks, vs = k_scale, v_scale
    elif cf.scale == "tensor":
        mode = SCALE_TENSOR
        ks, vs = _scale_arg(k_scale, query), _scale_arg(v_scale, query)
    else:
        mode, ks, vs = (
            SCALE_NONE,
            key_cache,
            value_cache,
        )  # never read: only passed so the kernel has pointers
    per_token = mode in (SCALE_TOKEN, SCALE_GROUPS)
    sinks = (
        variant.sinks.to(device=query.device, dtype=torch.float32).contiguous()
        if variant.sinks is not None
        else ks
    )
    half = query.dtype in (torch.float16, torch.bfloat16)
    import triton.language as tl

    dot_dtype = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}.get(
        query.dtype, tl.float32
    )
    pointers = [key_cache, value_cache, ks, vs, sinks]
    strides = [
        *key_cache.stride()[:3],
        *value_cache.stride()[:3],
        *(ks.stride()[:3] if per_token else (0, 0, 0)),
        *(vs.stride()[:3] if per_token else (0, 0, 0)),
    ]
    constexprs = dict(
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=max(16, next_pow2(head_dim)),
        BLOCK_SIZE=key_cache.shape[1],
        SCALE_MODE=mode,
        IS_INT=not cf.is_float,
        VPB=cf.values_per_byte,
        BITS=cf.bits,
        GROUP_LEN=cf.group_len(head_dim),
        DOT_DTYPE=dot_dtype,
        PRECISION="tf32" if half else "ieee",
        HAS_SOFTCAP=variant.softcap is not None,
        HAS_SINKS=variant.sinks is not None,
    )
    return [pointers, strides], constexprs


def _scale_arg(s: torch.Tensor | float | None, like: torch.Tensor) -> torch.Tensor:
    """Per-tensor scales go in as a 1-element device tensor: no host sync, no recompiles."""
    if isinstance(s, torch.Tensor):
        return s.to(device=like.device, dtype=torch.float32).reshape(-1)[:1].contiguous()
    return torch.full((1,), 1.0 if s is None else float(s), dtype=torch.float32, device=like.device)


def choose_splits(num_seqs: int, num_kv_heads: int, span: int, device: torch.device) -> int:
    """Splits per sequence so that programs cover every SM about twice (1 when they already do)."""
    if device.type != "cuda":
        return 1
    programs = num_seqs * num_kv_heads
    target = 2 * torch.cuda.get_device_properties(device).multi_processor_count
    if programs >= target:
        return 1
    wanted = min(-(-target // programs), max(1, span // MIN_SPLIT_TOKENS), 64)
    return 1 << (wanted.bit_length() - 1)  # a power of two (tl.arange in the merge)


_AUTOTUNED: dict[bool, object] = {}


def _autotuned_decode():
    """decode_kernel under triton.autotune (CUDA only; the interpreter runs one fixed config)."""
    if False not in _AUTOTUNED:
        import triton

        # Few configs: each costs a compile on first use. The split count is left out of the key
        # (a program's work has the same shape whatever the split count), so it does not retune.
        configs = [
            triton.Config({"BLOCK_N": n}, num_warps=w, num_stages=s)
            for n, w, s in ((64, 4, 2), (128, 4, 2), (64, 8, 3), (128, 8, 3))
        ]
        keys = ["HEAD_DIM", "GROUP_PAD", "BLOCK_SIZE", "SCALE_MODE", "VPB", "HAS_SOFTCAP"]
        _AUTOTUNED[False] = triton.autotune(configs=configs, key=keys)(
            jit_on_first_use(decode_kernel)
        )
    return _AUTOTUNED[False]


def _launch_decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    cf: CacheFormat,
    k_scale: torch.Tensor | float | None,
    v_scale: torch.Tensor | float | None,
    variant: AttentionVariant,
    block_n: int | None,
    num_splits: int | None,
    max_seq_len: int | None,
) -> torch.Tensor:
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    out = torch.empty_like(query)
    if num_seqs == 0:
        return out
    if block_n is not None and (block_n < 16 or block_n & (block_n - 1)):
        raise ValueError(f"block_n must be a power of two >= 16 (tl.dot's minimum), got {block_n}")
    if num_splits is not None and (num_splits < 1 or num_splits & (num_splits - 1)):
        raise ValueError(f"num_splits must be a power of two >= 1, got {num_splits}")
    (pointers, strides), constexprs = kernel_layout_args(
        query, key_cache, value_cache, cf, k_scale, v_scale, variant
    )
    span = variant.span(max_seq_len if max_seq_len is not None else int(seq_lens.max()))
    splits = num_splits or choose_splits(num_seqs, num_kv_heads, span, query.device)
    split_len = (
        max(SPLIT_ALIGN, -(-span // splits // SPLIT_ALIGN) * SPLIT_ALIGN)
        if splits > 1
        else max(span, 1)
    )
    group = num_heads // num_kv_heads
    hd_pad = constexprs["HEAD_DIM_PAD"]
    if splits > 1:
        partial = torch.empty(
            num_seqs, num_heads, splits, hd_pad, dtype=torch.float32, device=query.device
        )
        stats = torch.empty(
            num_seqs, num_heads, splits, 2, dtype=torch.float32, device=query.device
        )
    else:
        partial = stats = out  # never written: one split finishes in the kernel
    args = [
        out,
        partial,
        stats,
        query,
        *pointers,
        block_tables,
        seq_lens,
        float(scale),
        float(variant.softcap or 1.0),
        variant.window,
        variant.chunk,
        split_len,
        out.stride(0),
        out.stride(1),
        query.stride(0),
        query.stride(1),
        *strides,
        block_tables.stride(0),
    ]
    constexprs.update(GROUP=group, GROUP_PAD=max(16, next_pow2(group)), NUM_SPLITS=splits)
    grid = (num_seqs, num_kv_heads, splits)
    if block_n is None and not interpreting():
        _autotuned_decode()[grid](*args, **constexprs)
    else:
        jit_on_first_use(decode_kernel)[grid](*args, BLOCK_N=block_n or 32, **constexprs)
    if splits > 1:
        jit_on_first_use(decode_reduce_kernel)[(num_seqs, num_heads)](
            out,
            partial,
            stats,
            pointers[4],
            out.stride(0),
            out.stride(1),
            HEAD_DIM=head_dim,
            HEAD_DIM_PAD=hd_pad,
            NUM_SPLITS=splits,
            HAS_SINKS=constexprs["HAS_SINKS"],
        )
    return out
