"""Kernel measurements for benchmarks/gpu_check.sh: decode and prefill on the GPU, as CSV.

  python benchmarks/gpu_bench.py decode  OUT.csv [--cpu-dry-run]
  python benchmarks/gpu_bench.py prefill OUT.csv [--cpu-dry-run]

Decode (Llama-3.1-8B attention: 32 query heads, 8 KV heads, head_dim 128, block size 16):
batch 1/8/64/256 x context 1k/8k/32k x KV bf16/fp8-e4m3/int8/int4, every sequence at the full
context, one query token each, block tables a random permutation of the pool (no two
adjacent blocks of a sequence are adjacent in memory). K/V hold random values in their
storage format (fp8: randn cast; int8/int4: random codes with random positive per-token
scales), never zeros. Each configuration is first checked against kvplan's torch path on two
sequences (relative L2 error <= 2e-2), then timed: CUDA events, median of 20 calls after 5
warm-ups (the first warm-up autotunes). Bytes = what the kernel must read: K and V codes
plus per-token scales, block tables, queries, outputs. Achieved GB/s = bytes / median time;
roofline = achieved / 4.8 TB/s (the H200's HBM3e, vendor datasheet). torch SDPA (flash or
memory-efficient kernel, enable_gqa) runs on contiguous bf16 K/V [batch, 8, context, 128]
of the same shape as the reference point. Split-KV: batch 1 at 32k, bf16 and fp8, with the
default split count against num_splits=1.

Prefill: 8 fresh prompts of 4096 tokens (then 2 x 16384), bf16, causal; FLOPs = 4 x heads x
head_dim x sum over prompts of L (L + 1) / 2 (QK and PV, causal half); TFLOP/s for kvplan's
paged prefill kernel and SDPA is_causal on contiguous K/V.

--cpu-dry-run: tiny shapes through the Triton interpreter on CPU, fp16 instead of bf16,
host timers: it only proves the Python runs; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16
HBM_GBPS = 4800.0  # H200 HBM3e, NVIDIA datasheet
FORMATS = ("bf16", "fp8-e4m3", "int8", "int4")
WARMUP, ITERS, TOL = 5, 20, 2e-2


def setup(dry: bool) -> tuple[Any, Any, Any]:
    if dry:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    device = torch.device("cpu" if dry else "cuda")
    if not dry and not torch.cuda.is_available():
        sys.exit("no CUDA GPU: use --cpu-dry-run to check the script on a CPU")
    return torch, device, torch.float16 if dry else torch.bfloat16


def timer(
    torch: Any, device: Any, fn: Callable[[], Any], warmup: int = WARMUP, iters: int = ITERS
) -> float:
    """Median milliseconds of `iters` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        times = []
        for _ in range(iters):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(iters)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def paged_pool(torch: Any, device: Any, fmt: str, dtype: Any, batch: int, context: int, gen: Any):
    """(cache, block tables) for `batch` sequences of `context` tokens, random values, shuffled
    blocks."""
    from kvplan.kernels.quant import allocate_kv_cache

    per_seq = -(-context // BLOCK)
    cache = allocate_kv_cache(
        fmt, batch * per_seq, BLOCK, KV_HEADS, HEAD_DIM, dtype=dtype, device=device
    )
    for tensor in (cache.key_cache, cache.value_cache):
        for first in range(0, tensor.shape[0], 4096):  # in slices: no full-size fp32 temporary
            part = tensor[first : first + 4096]
            if cache.fmt.is_float:
                part.copy_(
                    torch.randn(part.shape, generator=gen, device=device, dtype=dtype).to(
                        part.dtype
                    )
                )
            elif part.dtype == torch.int8:
                part.copy_(
                    torch.randint(
                        -127, 128, part.shape, generator=gen, device=device, dtype=torch.int8
                    )
                )
            else:
                part.copy_(
                    torch.randint(
                        0, 256, part.shape, generator=gen, device=device, dtype=torch.uint8
                    )
                )
    for scale in (cache.k_scale, cache.v_scale):
        if scale is not None and scale.dim() == 4:
            scale.copy_(torch.rand(scale.shape, generator=gen, device=device) * 0.02 + 0.005)
    order = torch.randperm(batch * per_seq, generator=gen, device=device).to(torch.int32)
    return cache, order.reshape(batch, per_seq)


def kv_bytes(cache: Any, batch: int, context: int) -> int:
    per_token = 0
    for tensor in (cache.key_cache, cache.value_cache, cache.k_scale, cache.v_scale):
        if tensor is not None and tensor.dim() == 4:
            per_token += tensor[0, 0].numel() * tensor.element_size()
    return batch * context * per_token


def rel_err(got: Any, ref: Any) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))


def decode_rows(dry: bool) -> Iterator[dict[str, Any]]:
    torch, device, dtype = setup(dry)
    from kvplan.kernels.paged_attention import paged_attention

    batches, contexts = ((1, 2), (40,)) if dry else ((1, 8, 64, 256), (1024, 8192, 32768))
    formats = ("fp16", "int4") if dry else FORMATS
    gen = torch.Generator(device=device).manual_seed(0)
    for context in contexts:
        for batch in batches:
            query = torch.randn(batch, HEADS, HEAD_DIM, generator=gen, device=device).to(dtype)
            lens = torch.full((batch,), context, dtype=torch.int32, device=device)
            sdpa_ms = sdpa_decode_ms(torch, device, dtype, batch, context, gen)
            for fmt in formats:
                cache, tables = paged_pool(torch, device, fmt, dtype, batch, context, gen)
                args = (cache.key_cache, cache.value_cache)
                scales = dict(fmt=cache.fmt, k_scale=cache.k_scale, v_scale=cache.v_scale)
                check = min(batch, 2)
                err = rel_err(
                    paged_attention(
                        query[:check],
                        *args,
                        tables[:check],
                        lens[:check],
                        HEAD_DIM**-0.5,
                        **scales,
                        max_seq_len=context,
                    ),
                    paged_attention(
                        query[:check],
                        *args,
                        tables[:check],
                        lens[:check],
                        HEAD_DIM**-0.5,
                        **scales,
                        backend="torch",
                    ),
                )
                splits_variants = [("auto", None)]
                if batch == 1 and context == max(contexts):
                    splits_variants.append(("off", 1))
                for split_label, splits in splits_variants:
                    ms = timer(
                        torch,
                        device,
                        lambda: paged_attention(
                            query,
                            *args,
                            tables,
                            lens,
                            HEAD_DIM**-0.5,
                            **scales,
                            num_splits=splits,
                            max_seq_len=context,
                        ),
                        warmup=1 if dry else WARMUP,
                        iters=1 if dry else ITERS,
                    )
                    moved = (
                        kv_bytes(cache, batch, context)
                        + tables.numel() * 4
                        + 2 * query.numel() * query.element_size()
                    )
                    gbps = moved / ms / 1e6
                    row = dict(
                        kind="decode",
                        batch=batch,
                        context=context,
                        kv=fmt,
                        split_kv=split_label,
                        ms=round(ms, 4),
                        gb_per_s=round(gbps, 1),
                        hbm_fraction=round(gbps / HBM_GBPS, 3),
                        sdpa_ms=round(sdpa_ms, 4),
                        vs_sdpa=round(sdpa_ms / ms, 2),
                        rel_err=f"{err:.2e}",
                        ok=err <= TOL,
                    )
                    print(",".join(str(v) for v in row.values()), flush=True)
                    yield row
                cache = tables = None  # freed (the timed closures above read these names)
                if device.type == "cuda":
                    torch.cuda.empty_cache()


def sdpa_decode_ms(
    torch: Any, device: Any, dtype: Any, batch: int, context: int, gen: Any
) -> float:
    q = torch.randn(batch, HEADS, 1, HEAD_DIM, generator=gen, device=device).to(dtype)
    k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, generator=gen, device=device).to(dtype)
    v = torch.randn(batch, KV_HEADS, context, HEAD_DIM, generator=gen, device=device).to(dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    dry = device.type == "cpu"
    ms = timer(
        torch,
        device,
        lambda: sdpa(q, k, v, enable_gqa=True),
        warmup=1 if dry else WARMUP,
        iters=1 if dry else ITERS,
    )
    q = k = v = None  # freed (the timed closure above reads these names)
    return ms


def prefill_rows(dry: bool) -> Iterator[dict[str, Any]]:
    torch, device, dtype = setup(dry)
    from kvplan.kernels.paged_prefill import paged_prefill

    shapes = ((2, 24),) if dry else ((8, 4096), (2, 16384))
    formats = ("fp16",) if dry else ("bf16", "fp8-e4m3")
    gen = torch.Generator(device=device).manual_seed(1)
    for batch, length in shapes:
        flops = 4 * HEADS * HEAD_DIM * batch * length * (length + 1) / 2
        query = torch.randn(batch * length, HEADS, HEAD_DIM, generator=gen, device=device).to(dtype)
        starts = torch.arange(batch + 1, device=device, dtype=torch.int32) * length
        lens = torch.full((batch,), length, dtype=torch.int32, device=device)
        q4 = query.reshape(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
        k4 = torch.randn(batch, KV_HEADS, length, HEAD_DIM, generator=gen, device=device).to(dtype)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        sdpa_ms = timer(
            torch,
            device,
            lambda: sdpa(q4, k4, k4, is_causal=True, enable_gqa=True),
            warmup=1 if dry else WARMUP,
            iters=1 if dry else 10,
        )
        for fmt in formats:
            cache, tables = paged_pool(torch, device, fmt, dtype, batch, length, gen)
            common = dict(
                fmt=cache.fmt, k_scale=cache.k_scale, v_scale=cache.v_scale, max_query_len=length
            )
            args = (query, cache.key_cache, cache.value_cache, tables, starts, lens, HEAD_DIM**-0.5)
            got = paged_prefill(*args, **common)
            check = slice(
                0, min(length, 64)
            )  # the first prompt's first tokens, through the torch path
            ref = paged_prefill(
                query[check],
                cache.key_cache,
                cache.value_cache,
                tables[:1],
                torch.tensor([0, check.stop], device=device, dtype=torch.int32),
                torch.tensor([check.stop], device=device, dtype=torch.int32),
                HEAD_DIM**-0.5,
                fmt=cache.fmt,
                k_scale=cache.k_scale,
                v_scale=cache.v_scale,
                backend="torch",
            )
            err = rel_err(got[check], ref)
            ms = timer(
                torch,
                device,
                lambda: paged_prefill(*args, **common),
                warmup=1 if dry else WARMUP,
                iters=1 if dry else 10,
            )
            row = dict(
                kind="prefill",
                batch=batch,
                context=length,
                kv=fmt,
                ms=round(ms, 3),
                tflops=round(flops / ms / 1e9, 1),
                sdpa_ms=round(sdpa_ms, 3),
                sdpa_tflops=round(flops / sdpa_ms / 1e9, 1),
                rel_err=f"{err:.2e}",
                ok=err <= TOL,
            )
            print(",".join(str(v) for v in row.values()), flush=True)
            yield row
            cache = tables = None  # freed before the next size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["decode", "prefill"])
    parser.add_argument("out")
    parser.add_argument("--cpu-dry-run", action="store_true")
    args = parser.parse_args()
    rows = []
    # Each row is written as soon as it is measured: a stage cut short by its timeout keeps what it
    # has.
    with open(args.out, "w", newline="") as handle:
        writer = None
        for row in (
            decode_rows(args.cpu_dry_run)
            if args.what == "decode"
            else prefill_rows(args.cpu_dry_run)
        ):
            if writer is None:
                writer = csv.DictWriter(handle, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
            handle.flush()
            rows.append(row)
    bad = [r for r in rows if not r["ok"]]
    print(f"{len(rows)} rows, {len(bad)} failing the accuracy check -> {args.out}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
