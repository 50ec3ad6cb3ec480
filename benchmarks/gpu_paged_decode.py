"""Paged decode attention on a CUDA GPU: kvplan's Triton kernel against torch SDPA, in HBM TB/s.

Run: python benchmarks/gpu_paged_decode.py [--quick]
(H100/H200; a few minutes; --quick: 4k and 8k)
Without a CUDA GPU it prints one line and exits 0: nothing is measured.

Method. Shape of Llama-3.1-8B: 32 query heads, 8 KV heads, head_dim 128, block size 16, batch 64,
one decode token per sequence, every sequence at the full context (4k, 8k, 16k, 32k). K/V are
random normal, generated once per context in the contiguous layout [batch, 8, context, 128] fp16,
then scattered into kvplan's paged caches through a block table that is a random permutation of
all blocks, so no sequence's blocks are adjacent. The paged caches come in fp16 and fp8-e4m3
(one per-tensor scale per cache, absmax / 448). Queries are fp16 against the fp16 cache (SDPA
needs matching dtypes) and bf16 against the fp8 cache, the usual serving pairing.

Before timing, each configuration is checked once: the fp16 kernel against SDPA's output on the
same values (max abs diff < 2e-2), the fp8 kernel against fp32 SDPA over the dequantized fp8
values of the first few sequences. Timing: CUDA events around each call, 5 warmup calls and 20
timed, median reported. Decode attention reads every K/V byte once and computes little, so it
is memory-bound: bytes = 2 (K, V) x batch x context x 8 x 128 x element size, plus queries,
outputs and block tables (negligible); achieved TB/s = bytes / median time. SDPA
(enable_gqa=True where torch has it, else KV heads pre-expanded with repeat_interleave outside
the timed call, and its bytes counted as read) runs on the contiguous fp16 K/V. Fractions of
peak use the HBM bandwidth of kvplan's GPU profile when the device name maps onto one.
One context is resident at a time; everything is freed (dropped + empty_cache) before the next.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from collections.abc import Callable
from typing import Any

HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE, BATCH = 32, 8, 128, 16, 64
CONTEXTS, QUICK_CONTEXTS = (4096, 8192, 16384, 32768), (4096, 8192)
WARMUP, ITERS, TOL, CHECK_SEQS, CHUNK = 5, 20, 2e-2, 4, 8
NO_GPU = "no CUDA GPU: this benchmark needs one; nothing measured"


def gpu_peak_tbps(device_name: str) -> tuple[str, float] | None:
    """(kvplan profile, HBM TB/s) for a CUDA device name, or None when no profile matches
    exactly."""
    from kvplan.spec.resolve import load_gpu

    key = device_name.lower().replace("nvidia", "").strip().replace(" ", "-")
    if "h100" in key and ("hbm3" in key or "sxm" in key):  # "NVIDIA H100 80GB HBM3" is the SXM part
        key = "h100-80gb"
    try:
        gpu = load_gpu(key)  # exact names/aliases only: "gh200-480gb" or "h100-nvl" stay unknown
    except ValueError:
        return None
    return gpu.name, gpu.hbm_tbps


def time_ms(fn: Callable[[], Any]) -> float:
    """Median of ITERS CUDA-event timings after WARMUP untimed calls."""
    import torch

    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(ITERS)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def sdpa_gqa_supported(device: Any) -> bool:
    """Whether this torch's SDPA takes enable_gqa (torch >= 2.5)."""
    import torch

    q, kv = torch.zeros(1, 4, 1, 8, device=device), torch.zeros(1, 2, 2, 8, device=device)
    try:
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


def sdpa_decode(q: Any, k: Any, v: Any, gqa: bool) -> Any:
    """q [B, 32, 128], k/v [B, 8 (or 32 if pre-expanded), T, 128] -> [B, 32, 128]."""
    import torch

    kwargs = {"enable_gqa": True} if gqa and k.shape[1] != q.shape[1] else {}
    out = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v, **kwargs)
    return out.squeeze(2)


def build_paged(fmt: str, k: Any, v: Any, tables: Any) -> Any:
    """kvplan's paged caches in `fmt`, filled from contiguous k/v [B, 8, T, 128] through
    `tables`."""
    import torch
    from kvplan.kernels.quant import allocate_kv_cache, quantize, tensor_scale

    batch, _, context, _ = k.shape
    cache = allocate_kv_cache(
        fmt,
        batch * context // BLOCK_SIZE,
        BLOCK_SIZE,
        KV_HEADS,
        HEAD_DIM,
        dtype=torch.float16,
        device=k.device,
    )
    scales = (
        (tensor_scale(k, fmt), tensor_scale(v, fmt))
        if cache.fmt.scale == "tensor"
        else (None, None)
    )
    if scales[0] is not None:
        cache.k_scale.copy_(scales[0])
        cache.v_scale.copy_(scales[1])
    for src, dst, scale in (
        (k, cache.key_cache, cache.k_scale),
        (v, cache.value_cache, cache.v_scale),
    ):
        raw = (
            dst.view(torch.uint8) if dst.element_size() == 1 else dst
        )  # indexed stores lack fp8 kernels
        for b0 in range(0, batch, CHUNK):  # chunked: quantize's fp32 temporaries stay small
            stored = quantize(src[b0 : b0 + CHUNK], cache.fmt, scale)[0]
            stored = stored.view(torch.uint8) if stored.element_size() == 1 else stored
            n = stored.shape[0]
            raw[tables[b0 : b0 + n].long()] = stored.view(
                n, KV_HEADS, -1, BLOCK_SIZE, HEAD_DIM
            ).permute(0, 2, 3, 1, 4)
    return cache


def fp8_reference(q: Any, k: Any, v: Any, cache: Any, gqa: bool) -> Any:
    """fp32 SDPA over the dequantized fp8 values of the first CHECK_SEQS sequences."""
    from kvplan.kernels.quant import dequantize, quantize

    def deq(x: Any, scale: Any) -> Any:
        return dequantize(quantize(x[:CHECK_SEQS], cache.fmt, scale)[0], scale, cache.fmt, HEAD_DIM)

    kd, vd = deq(k, cache.k_scale), deq(v, cache.v_scale)
    if not gqa:
        kd, vd = (
            kd.repeat_interleave(HEADS // KV_HEADS, 1),
            vd.repeat_interleave(HEADS // KV_HEADS, 1),
        )
    return sdpa_decode(q[:CHECK_SEQS].float(), kd, vd, gqa)


def run_context(context: int, device: Any, gqa: bool) -> list[dict[str, Any]]:
    """Measure SDPA (fp16) and kvplan (fp16, fp8-e4m3) at one context; one row per KV format."""
    import torch
    from kvplan.kernels.paged_attention import paged_attention

    gen = torch.Generator(device=device).manual_seed(context)
    shape = (BATCH, KV_HEADS, context, HEAD_DIM)
    k = torch.randn(shape, generator=gen, device=device, dtype=torch.float16)
    v = torch.randn(shape, generator=gen, device=device, dtype=torch.float16)
    q16 = torch.randn(BATCH, HEADS, HEAD_DIM, generator=gen, device=device, dtype=torch.float16)
    num_blocks = BATCH * context // BLOCK_SIZE
    tables = (
        torch.randperm(num_blocks, generator=gen, device=device).view(BATCH, -1).to(torch.int32)
    )
    seq_lens = torch.full((BATCH,), context, dtype=torch.int32, device=device)
    scale = HEAD_DIM**-0.5
    extra = 2 * q16.numel() * 2 + tables.numel() * 4  # query + output + block table bytes

    ks, vs = (
        (k, v)
        if gqa
        else (k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1))
    )
    ref16 = sdpa_decode(q16, ks, vs, gqa)
    sdpa_ms = time_ms(lambda: sdpa_decode(q16, ks, vs, gqa))
    sdpa_bytes = 2 * ks.numel() * ks.element_size() + 2 * q16.numel() * 2
    ks = vs = None  # freed (the timed closure above reads these names)
    torch.cuda.empty_cache()

    rows = []
    for fmt in ("fp16", "fp8-e4m3"):
        cache = build_paged(fmt, k, v, tables)
        q = q16 if fmt == "fp16" else q16.to(torch.bfloat16)

        def call() -> Any:
            return paged_attention(
                q,
                cache.key_cache,
                cache.value_cache,
                tables,
                seq_lens,
                scale,
                cache.fmt,
                cache.k_scale,
                cache.v_scale,
                backend="triton",
            )

        out = call()
        if fmt == "fp16":
            diff = (out.float() - ref16.float()).abs().max().item()
        else:
            diff = (
                (out[:CHECK_SEQS].float() - fp8_reference(q, k, v, cache, gqa)).abs().max().item()
            )
        kv_bytes = 2 * cache.key_cache.numel() * cache.key_cache.element_size()
        rows.append(
            {
                "context": context,
                "fmt": fmt,
                "ms": time_ms(call),
                "bytes": kv_bytes + extra,
                "sdpa_ms": sdpa_ms,
                "sdpa_bytes": sdpa_bytes,
                "diff": diff,
                "ok": diff < TOL,
            }
        )
        cache = out = None  # freed (call() reads cache)
        torch.cuda.empty_cache()
    k = v = q16 = ref16 = tables = seq_lens = None  # freed before the next context
    torch.cuda.empty_cache()
    return rows


def pct(tbps: float, peak: float | None) -> str:
    return f"{100 * tbps / peak:.0f}%" if peak else "n/a"


def report(rows: list[dict[str, Any]], device_name: str, gqa: bool) -> str:
    """The markdown block for benchmarks/RESULTS.md."""
    import torch
    import triton

    match = gpu_peak_tbps(device_name)
    peak = match[1] if match else None
    lines = [
        "## Paged decode attention: kvplan Triton vs torch SDPA "
        f"({datetime.date.today().isoformat()})",
        "",
        f"- GPU: {device_name}; torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"triton {triton.__version__}",
        f"- HBM peak: {peak} TB/s (kvplan GPU profile '{match[0]}')"
        if match
        else "- unknown GPU peak",
        f"- Llama-3.1-8B decode: {HEADS} q heads, {KV_HEADS} KV heads, head_dim {HEAD_DIM}, block "
        f"{BLOCK_SIZE}, "
        f"batch {BATCH}; shuffled block tables; median of {ITERS} CUDA-event timings after "
        f"{WARMUP} warmup",
        "- SDPA peer: contiguous [batch, 8, context, 128] fp16, "
        + (
            "enable_gqa=True"
            if gqa
            else "KV pre-expanded with repeat_interleave (its 4x bytes counted)"
        ),
        "- check: max abs diff vs SDPA (fp16) / fp32 SDPA on the dequantized fp8 values (fp8), "
        "tolerance "
        f"{TOL:g}",
        "",
        "| context | KV | kvplan ms | kvplan TB/s | of peak | SDPA fp16 ms | SDPA TB/s | of peak "
        "| kvplan / SDPA time | max abs diff |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        tbps, sdpa_tbps = r["bytes"] / r["ms"] / 1e9, r["sdpa_bytes"] / r["sdpa_ms"] / 1e9
        lines.append(
            f"| {r['context'] // 1024}k | {r['fmt']} | {r['ms']:.3f} | {tbps:.2f} | "
            f"{pct(tbps, peak)} "
            f"| {r['sdpa_ms']:.3f} | {sdpa_tbps:.2f} | {pct(sdpa_tbps, peak)} "
            f"| {r['ms'] / r['sdpa_ms']:.2f} | {r['diff']:.1e} {'ok' if r['ok'] else 'FAIL'} |"
        )
    lines += [
        "",
        "| context | kvplan fp16 ms | kvplan fp8-e4m3 ms | fp8 / fp16 time |",
        "|---:|---:|---:|---:|",
    ]
    by_key = {(r["context"], r["fmt"]): r["ms"] for r in rows}
    for context in sorted({r["context"] for r in rows}):
        f16, f8 = by_key[(context, "fp16")], by_key[(context, "fp8-e4m3")]
        lines.append(f"| {context // 1024}k | {f16:.3f} | {f8:.3f} | {f8 / f16:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="contexts 4k and 8k only")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(NO_GPU)
        return 0
    if not torch.cuda.is_available():
        print(NO_GPU)
        return 0
    device = torch.device("cuda")
    device_name = torch.cuda.get_device_name(device)
    gqa = sdpa_gqa_supported(device)
    rows: list[dict[str, Any]] = []
    for context in QUICK_CONTEXTS if args.quick else CONTEXTS:
        rows += run_context(context, device, gqa)
        for r in rows[-2:]:
            print(
                f"# {context // 1024}k {r['fmt']}: kvplan {r['ms']:.3f} ms, SDPA "
                f"{r['sdpa_ms']:.3f} ms, "
                f"max abs diff {r['diff']:.1e}",
                file=sys.stderr,
                flush=True,
            )
    print(report(rows, device_name, gqa))
    if not all(r["ok"] for r in rows):
        print(
            f"\ncorrectness FAILED (max abs diff >= {TOL:g}) in at least one configuration",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
