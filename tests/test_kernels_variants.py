"""Attention variants (sliding window, chunked, softcap, sinks), split-KV decode and the paged
prefill kernel: the torch path and Triton (interpreted on CPU) against the naive references."""

import os

# Triton's interpreter must be on before triton is first imported (its standard library is
# jitted at import), hence the variable first; the fixture below keeps it on per test.
os.environ.setdefault("TRITON_INTERPRET", "1")

# ruff: noqa: E402  (imports follow the interpreter switch on purpose)
import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kernel_cases import VARIANTS, make_variant, paged_case, prefill_case
from kvplan.kernels import torch_attention
from kvplan.kernels.paged_attention import paged_attention
from kvplan.kernels.paged_prefill import paged_prefill
from kvplan.kernels.quant import allocate_kv_cache
from kvplan.kernels.reference import paged_attention_reference, paged_prefill_reference
from kvplan.kernels.variant import AttentionVariant

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"
)
TOL = {torch.float32: {"atol": 2e-5, "rtol": 1e-5}, torch.float16: {"atol": 2e-3, "rtol": 2e-3}}


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton on CPU tensors through its interpreter (kernels jit at first launch, so per test
    works);
    the GPU tests switch it back off for themselves."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# -- decode ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant_name", list(VARIANTS))
@pytest.mark.parametrize(
    "backend", ["torch", "torch-per-head", pytest.param("triton", marks=needs_triton)]
)
def test_decode_variants_match_reference(
    monkeypatch: pytest.MonkeyPatch, backend: str, variant_name: str
) -> None:
    if (
        backend == "torch-per-head"
    ):  # the SDPA path wide models take instead of packing KV heads into one gemm
        monkeypatch.setattr(torch_attention, "PACKED_HEADS_MAX_WIDTH", 0)
        backend = "torch"
    cache, tables, lens, gen, _, _ = paged_case(
        "fp32", [1, 9, 23, 40, 0], 4, 4, 2, 16, torch.float32
    )
    variant = make_variant(variant_name, 4, gen)
    query = torch.randn(len(lens), 4, 16, generator=gen)
    args = (query, cache.key_cache, cache.value_cache, tables, lens, 0.25, "fp32")
    expected = paged_attention_reference(*args, variant=variant)
    got = paged_attention(*args, variant=variant, backend=backend)
    torch.testing.assert_close(got, expected, **TOL[torch.float32])


@needs_triton
@pytest.mark.parametrize(
    "fmt,dtype,variant_name",
    [
        ("fp32", torch.float32, "plain"),
        ("fp16", torch.float16, "sinks"),
        ("int8", torch.float32, "window"),
        ("int4-g32", torch.float32, "all"),
        ("fp8-e4m3", torch.float32, "softcap"),
    ],
)
@pytest.mark.parametrize("num_splits", [4, pytest.param(2, marks=pytest.mark.slow)])
def test_split_kv_decode_matches_reference(
    fmt: str, dtype: torch.dtype, variant_name: str, num_splits: int
) -> None:
    # Splits are SPLIT_ALIGN (128) keys at least: lengths reach past 3 splits, and one sequence is
    # empty.
    cache, tables, lens, gen, _, _ = paged_case(fmt, [300, 1, 129, 0, 520], 16, 8, 2, 64, dtype)
    variant = make_variant(variant_name, 8, gen)
    if variant.sliding_window:
        variant = AttentionVariant(sliding_window=260)
    query = torch.randn(len(lens), 8, 64, generator=gen).to(dtype)
    args = (
        query,
        cache.key_cache,
        cache.value_cache,
        tables,
        lens,
        0.125,
        fmt,
        cache.k_scale,
        cache.v_scale,
    )
    expected = paged_attention_reference(*args, variant=variant)
    got = paged_attention(
        *args, variant=variant, backend="triton", num_splits=num_splits, block_n=64
    )
    torch.testing.assert_close(got.float(), expected.float(), **TOL[dtype])


# -- prefill -----------------------------------------------------------------------------


# A fresh prompt, a chunk extending a cached prefix, a one-token step and a long prompt spanning
# tiles.
Q_LENS, SEQ_LENS = [7, 5, 1, 37], [7, 21, 12, 37]


@pytest.mark.parametrize("variant_name", list(VARIANTS))
@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_prefill_variants_match_reference(backend: str, variant_name: str) -> None:
    query, cache, tables, query_start, lens, gen = prefill_case(
        "fp32", torch.float32, Q_LENS, SEQ_LENS
    )
    variant = make_variant(variant_name, 4, gen)
    args = (query, cache.key_cache, cache.value_cache, tables, query_start, lens, 0.25, "fp32")
    expected = paged_prefill_reference(*args, variant=variant)
    got = paged_prefill(*args, variant=variant, backend=backend)
    torch.testing.assert_close(got, expected, **TOL[torch.float32])


@pytest.mark.parametrize(
    "fmt,dtype",
    [
        ("fp16", torch.float16),
        ("int8", torch.float32),
        ("int4", torch.float16),
        ("fp8-e5m2", torch.float32),
        ("int4-g32", torch.float32),
    ],
)
@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_prefill_formats_match_reference(backend: str, fmt: str, dtype: torch.dtype) -> None:
    query, cache, tables, query_start, lens, _ = prefill_case(
        fmt, dtype, [3, 20], [9, 20], block_size=16, num_heads=8, num_kv_heads=8, head_dim=64
    )
    args = (
        query,
        cache.key_cache,
        cache.value_cache,
        tables,
        query_start,
        lens,
        0.125,
        fmt,
        cache.k_scale,
        cache.v_scale,
    )
    torch.testing.assert_close(
        paged_prefill(*args, backend=backend).float(),
        paged_prefill_reference(*args).float(),
        **TOL[dtype],
    )


def test_torch_plan_cache_shared_by_layers() -> None:
    """One plan_cache for a step's layers: each layer's own K/V (other caches and formats, the
    gather buffers reused), windowed and full layers apart, decode and prefill apart."""
    plan_cache: dict = {}
    for seed, fmt, variant_name in (
        (0, "fp32", "plain"),
        (1, "int8", "window"),
        (2, "fp32", "plain"),
        (3, "int4-g32", "all"),
    ):
        query, cache, tables, query_start, lens, gen = prefill_case(
            fmt, torch.float32, Q_LENS, SEQ_LENS, seed=0
        )
        other = paged_case(
            fmt, SEQ_LENS, 4, 4, 2, 16, torch.float32, seed=seed + 10
        ).cache  # same shapes, other K/V
        variant = make_variant(variant_name, 4, gen)
        args = (
            query,
            other.key_cache,
            other.value_cache,
            tables,
            query_start,
            lens,
            0.25,
            fmt,
            other.k_scale,
            other.v_scale,
        )
        got = paged_prefill(*args, variant=variant, backend="torch", plan_cache=plan_cache)
        torch.testing.assert_close(
            got, paged_prefill_reference(*args, variant=variant), **TOL[torch.float32]
        )
        decode_args = (
            query[:4],
            other.key_cache,
            other.value_cache,
            tables,
            lens,
            0.25,
            fmt,
            other.k_scale,
            other.v_scale,
        )
        got = paged_attention(*decode_args, variant=variant, backend="torch", plan_cache=plan_cache)
        expected = paged_attention_reference(*decode_args, variant=variant)
        torch.testing.assert_close(got, expected, **TOL[torch.float32])
    assert set(plan_cache) == {"decode", "prefill"}


def test_decode_is_prefill_of_one_token() -> None:
    query, cache, tables, _, lens, gen = prefill_case("fp32", torch.float32, [1, 1, 1], [3, 17, 8])
    variant = make_variant("all", 4, gen)
    args = (cache.key_cache, cache.value_cache, tables)
    decode = paged_attention_reference(query, *args, lens, 0.3, "fp32", variant=variant)
    prefill = paged_prefill_reference(
        query, *args, torch.arange(4), lens, 0.3, "fp32", variant=variant
    )
    assert torch.equal(decode, prefill)


def test_reference_window_by_hand() -> None:
    # One KV head, keys e_t (one-hot rows) and values t: a query sees exactly its window.
    cache = allocate_kv_cache("fp32", 4, 4, 1, 16)
    for t in range(10):
        cache.key_cache[t // 4, t % 4, 0, :] = 0.0
        cache.value_cache[t // 4, t % 4, 0, :] = float(t)
    table = torch.tensor([[0, 1, 2, 3]], dtype=torch.int32)
    query = torch.zeros(1, 1, 16)
    out = paged_attention_reference(
        query,
        cache.key_cache,
        cache.value_cache,
        table,
        torch.tensor([10]),
        1.0,
        "fp32",
        variant=AttentionVariant(sliding_window=3),
    )
    assert out[0, 0, 0].item() == pytest.approx((7 + 8 + 9) / 3)  # uniform over positions 7, 8, 9
    out = paged_attention_reference(
        query,
        cache.key_cache,
        cache.value_cache,
        table,
        torch.tensor([10]),
        1.0,
        "fp32",
        variant=AttentionVariant(chunk_size=4),
    )
    assert out[0, 0, 0].item() == pytest.approx((8 + 9) / 2)  # chunk 8..11, causal up to 9
    sink = AttentionVariant(sinks=torch.tensor([0.0]))  # sink weight e^0 against ten weights e^0
    out = paged_attention_reference(
        query,
        cache.key_cache,
        cache.value_cache,
        table,
        torch.tensor([10]),
        1.0,
        "fp32",
        variant=sink,
    )
    assert out[0, 0, 0].item() == pytest.approx(sum(range(10)) / 11)


def test_variant_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="sliding_window"):
        AttentionVariant(sliding_window=0)
    with pytest.raises(ValueError, match="softcap"):
        AttentionVariant(softcap=-1.0)
    query, cache, tables, query_start, lens, _ = prefill_case(
        "fp32", torch.float32, [1, 1, 1, 1], [3, 4, 5, 6]
    )
    with pytest.raises(ValueError, match="one logit per query head"):
        paged_attention(
            query,
            cache.key_cache,
            cache.value_cache,
            tables,
            lens,
            1.0,
            variant=AttentionVariant(sinks=torch.zeros(3)),
            backend="torch",
        )
