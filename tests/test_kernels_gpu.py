"""Compiled kernels on a CUDA GPU, bf16 and fp8 math (`pytest -m gpu`; run with
TRITON_INTERPRET=0 set, as benchmarks/gpu_check.sh does): paged attention, write_kv, split-KV
decode with the attention variants and the paged prefill, against the references."""

from triton_helpers import HAS_TRITON, require_compiled_triton, triton_interpreter_for_module

_interpreter = triton_interpreter_for_module()

# ruff: noqa: E402  (imports follow the interpreter switch on purpose)
import pytest

torch = pytest.importorskip("torch")

from kernel_cases import (
    AttentionCase,
    attention_case,
    bits,
    fresh_cache,
    make_variant,
    paged_case,
    prefill_case,
    write_case,
)
from kvplan.kernels.cache_ops import write_kv
from kvplan.kernels.paged_attention import paged_attention
from kvplan.kernels.paged_prefill import paged_prefill
from kvplan.kernels.quant import PagedKVCache
from kvplan.kernels.reference import (
    paged_attention_reference,
    paged_prefill_reference,
    write_kv_reference,
)
from kvplan.kernels.variant import AttentionVariant

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs CUDA and triton")


# -- GPU: compiled kernels, bf16 and fp8 math ------------------------------------------


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    require_compiled_triton(monkeypatch)


def _to_cuda(case: AttentionCase) -> AttentionCase:
    def move(c: PagedKVCache) -> PagedKVCache:
        return PagedKVCache(
            c.fmt,
            c.head_dim,
            c.key_cache.cuda(),
            c.value_cache.cuda(),
            None if c.k_scale is None else c.k_scale.cuda(),
            None if c.v_scale is None else c.v_scale.cuda(),
        )

    return AttentionCase(
        case.query.cuda(),
        move(case.cache),
        move(case.exact_cache),
        case.block_tables.cuda(),
        case.seq_lens.cuda(),
        case.scale,
    )


@pytest.mark.parametrize(
    "fmt,dtype",
    [
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
        ("fp8-e4m3", torch.bfloat16),
        ("fp8-e5m2", torch.float16),
        ("int8", torch.bfloat16),
        ("int4", torch.float16),
        ("int4-g32", torch.bfloat16),
    ],
)
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.gpu
@needs_cuda
def test_gpu_paged_attention_compiled(
    compiled: None, fmt: str, dtype: torch.dtype, block_size: int
) -> None:
    case = _to_cuda(
        attention_case(fmt, 128, block_size, 8, 2, dtype, seq_lens=[1, 2 * block_size, 77, 300])
    )
    c = case.cache  # a fixed tile (autotuning costs compiles; the benchmark exercises it)
    got = paged_attention(
        case.query,
        c.key_cache,
        c.value_cache,
        case.block_tables,
        case.seq_lens,
        case.scale,
        c.fmt,
        c.k_scale,
        c.v_scale,
        backend="triton",
        block_n=64,
    )
    ref = case.reference()
    torch.testing.assert_close(got.float(), ref.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(case.run("torch").float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("fmt", ["bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4", "int4-g32"])
@pytest.mark.gpu
@needs_cuda
def test_gpu_write_kv_compiled_bitwise(compiled: None, fmt: str) -> None:
    dtype = torch.bfloat16 if fmt != "fp8-e5m2" else torch.float16
    key, value, slots, num_blocks, heads = write_case(128, 16, dtype, num_tokens=40, num_blocks=8)
    ref = fresh_cache(fmt, num_blocks, 16, heads, 128, dtype, key, value)
    write_kv_reference(
        key, value, ref.key_cache, ref.value_cache, slots, ref.fmt, ref.k_scale, ref.v_scale
    )
    got = fresh_cache(fmt, num_blocks, 16, heads, 128, dtype, key, value)
    moved = [
        None if t is None else t.cuda()
        for t in (got.key_cache, got.value_cache, got.k_scale, got.v_scale)
    ]
    write_kv(
        key.cuda(),
        value.cuda(),
        moved[0],
        moved[1],
        slots.cuda(),
        got.fmt,
        moved[2],
        moved[3],
        backend="triton",
    )
    for a, b in zip(moved, (ref.key_cache, ref.value_cache, ref.k_scale, ref.v_scale)):
        if a is not None:
            assert torch.equal(bits(a.cpu()), bits(b))


# -- GPU: compiled kernels in bf16/fp8 (pytest -m gpu; benchmarks/gpu_check.sh runs them) --------


needs_a_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cuda(*tensors):
    return [None if t is None else t.cuda() for t in tensors]


@pytest.mark.gpu
@needs_a_gpu
@pytest.mark.parametrize(
    "fmt,dtype",
    [
        ("bf16", torch.bfloat16),
        ("fp8-e4m3", torch.bfloat16),
        ("int8", torch.bfloat16),
        ("int4", torch.float16),
    ],
)
@pytest.mark.parametrize("variant_name", ["plain", "all"])
@pytest.mark.parametrize("num_splits", [None, 1, 8])
def test_gpu_decode_compiled(
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
    dtype: torch.dtype,
    variant_name: str,
    num_splits: int | None,
) -> None:
    require_compiled_triton(monkeypatch)
    cache, tables, lens, gen, _, _ = paged_case(fmt, [1, 700, 2100, 33], 16, 32, 8, 128, dtype)
    variant = make_variant(variant_name, 32, gen)
    if variant.sinks is not None:
        variant = AttentionVariant(1000, 512, 3.0, variant.sinks.cuda())
    query = torch.randn(len(lens), 32, 128, generator=gen).to(dtype)
    expected = paged_attention_reference(
        query,
        cache.key_cache,
        cache.value_cache,
        tables,
        lens,
        0.09,
        fmt,
        cache.k_scale,
        cache.v_scale,
        variant=AttentionVariant(
            variant.sliding_window,
            variant.chunk_size,
            variant.softcap,
            None if variant.sinks is None else variant.sinks.cpu(),
        ),
    )
    q, k, v, t, n, ks, vs = _cuda(
        query, cache.key_cache, cache.value_cache, tables, lens, cache.k_scale, cache.v_scale
    )
    got = paged_attention(
        q, k, v, t, n, 0.09, fmt, ks, vs, variant=variant, num_splits=num_splits, block_n=64
    )  # a fixed tile: autotuning is the benchmark's business
    torch.testing.assert_close(got.float().cpu(), expected.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@needs_a_gpu
@pytest.mark.parametrize(
    "fmt,dtype",
    [("bf16", torch.bfloat16), ("fp8-e4m3", torch.bfloat16), ("int4-g32", torch.float16)],
)
@pytest.mark.parametrize("variant_name", ["plain", "all"])
def test_gpu_prefill_compiled(
    monkeypatch: pytest.MonkeyPatch, fmt: str, dtype: torch.dtype, variant_name: str
) -> None:
    require_compiled_triton(monkeypatch)
    query, cache, tables, query_start, lens, gen = prefill_case(
        fmt, dtype, [130, 1, 77], [300, 45, 77], 16, 32, 8, 128
    )
    variant = make_variant(variant_name, 32, gen)
    args = (
        query,
        cache.key_cache,
        cache.value_cache,
        tables,
        query_start,
        lens,
        0.09,
        fmt,
        cache.k_scale,
        cache.v_scale,
    )
    expected = paged_prefill_reference(*args, variant=variant)
    moved = _cuda(*args[:6])
    if variant.sinks is not None:
        variant = AttentionVariant(
            variant.sliding_window, variant.chunk_size, variant.softcap, variant.sinks.cuda()
        )
    got = paged_prefill(
        *moved,
        0.09,
        fmt,
        *_cuda(cache.k_scale, cache.v_scale),
        variant=variant,
        block_m=64,
        block_n=64,
    )
    torch.testing.assert_close(got.float().cpu(), expected.float(), atol=2e-2, rtol=2e-2)
