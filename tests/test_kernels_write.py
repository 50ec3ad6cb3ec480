"""write_kv against its reference: the torch path and Triton (interpreted on CPU) store
every KV format's bits exactly, fp8 rounding as torch's cast. GPU: tests/test_kernels_gpu.py."""

from conftest import triton_interpreter_for_module

_interpreter = triton_interpreter_for_module()

# ruff: noqa: E402  (imports follow the interpreter switch on purpose)
import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kvplan.kernels.cache_ops import write_kv
from kvplan.kernels.quant import PagedKVCache, allocate_kv_cache, get_format, tensor_scale
from kvplan.kernels.reference import write_kv_reference
from test_kv_layouts import FORMATS

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """View as same-width ints so equality is bitwise (NaN == NaN, -0.0 != 0.0)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


# -- write_kv --------------------------------------------------------------------------


def _write_case(
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    num_tokens: int = 6,
    num_kv_heads: int = 2,
    num_blocks: int = 5,
    seed: int = 0,
):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = max(num_blocks, -(-(num_tokens + 2) // block_size))  # room for unwritten slots
    key = (torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen) * 2).to(dtype)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    # Never the last slot: a kernel that stored the padding token at slot -1 would wrap there.
    slots = torch.randperm(num_blocks * block_size - 1, generator=gen)[:num_tokens]
    slots[1] = -1  # a padding token
    return key, value, slots, num_blocks, num_kv_heads


def _fresh_cache(
    fmt: str,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    key: torch.Tensor,
    value: torch.Tensor,
) -> PagedKVCache:
    cache = allocate_kv_cache(fmt, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
    # Sentinel bytes everywhere, so a skipped or misplaced store is visible.
    for t in (cache.key_cache, cache.value_cache):
        t.view(torch.uint8).fill_(0x55)
    if cache.fmt.per_token_scales:
        cache.k_scale.fill_(-1.0)
        cache.v_scale.fill_(-1.0)
    elif cache.fmt.scale == "tensor":
        cache.k_scale.copy_(tensor_scale(key, cache.fmt))
        cache.v_scale.copy_(tensor_scale(value, cache.fmt))
    return cache


def _check_write(
    backend: str, fmt: str, head_dim: int, block_size: int, dtype: torch.dtype
) -> None:
    key, value, slots, num_blocks, heads = _write_case(head_dim, block_size, dtype)
    ref = _fresh_cache(fmt, num_blocks, block_size, heads, head_dim, dtype, key, value)
    got = _fresh_cache(fmt, num_blocks, block_size, heads, head_dim, dtype, key, value)
    write_kv_reference(
        key, value, ref.key_cache, ref.value_cache, slots, ref.fmt, ref.k_scale, ref.v_scale
    )
    write_kv(
        key,
        value,
        got.key_cache,
        got.value_cache,
        slots,
        got.fmt,
        got.k_scale,
        got.v_scale,
        backend=backend,
    )
    for a, b in (
        (got.key_cache, ref.key_cache),
        (got.value_cache, ref.value_cache),
        (got.k_scale, ref.k_scale),
        (got.v_scale, ref.v_scale),
    ):
        if a is not None:
            assert torch.equal(_bits(a), _bits(b))
    # Slots no token maps to (the padding token's included) still hold the sentinel bytes.
    written = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    written[slots[slots >= 0]] = True
    for cache in (got.key_cache, got.value_cache):
        untouched = cache.view(torch.uint8).reshape(num_blocks * block_size, -1)[~written]
        assert untouched.eq(0x55).all()


WRITE_CASES = [
    (f, hd, bs, torch.float32)
    for f in FORMATS
    if f != "fp16"
    for hd, bs in ((8, 1), (64, 4), (128, 16))
] + [
    ("fp16", 64, 4, torch.float16),
    ("fp8-e4m3", 64, 16, torch.float16),
    ("int4", 8, 4, torch.float16),
]


@pytest.mark.parametrize("fmt,head_dim,block_size,dtype", WRITE_CASES)
def test_write_kv_torch_matches_reference_bitwise(
    fmt: str, head_dim: int, block_size: int, dtype: torch.dtype
) -> None:
    _check_write("torch", fmt, head_dim, block_size, dtype)


TRITON_WRITE_CASES = [
    ("fp32", 8, 1, torch.float32),
    ("fp16", 64, 4, torch.float16),
    ("fp8-e4m3", 64, 16, torch.float32),
    ("fp8-e5m2", 8, 4, torch.float16),
    ("int8", 64, 4, torch.float16),
    ("int4", 128, 16, torch.float32),
    ("int4", 8, 1, torch.float16),
    ("int4-g32", 64, 4, torch.float32),
    ("int8-g16", 64, 1, torch.float32),
    ("int2", 8, 4, torch.float32),
    ("int4-tensor", 8, 4, torch.float32),
]


@needs_triton
@pytest.mark.parametrize("fmt,head_dim,block_size,dtype", TRITON_WRITE_CASES)
def test_write_kv_triton_matches_reference_bitwise(
    fmt: str, head_dim: int, block_size: int, dtype: torch.dtype
) -> None:
    _check_write("triton", fmt, head_dim, block_size, dtype)


@needs_triton
@pytest.mark.parametrize("fmt", ["fp8-e4m3", "fp8-e5m2"])
def test_write_kv_triton_fp8_rounding_matches_torch_cast(fmt: str) -> None:
    """Every fp8 value, every midpoint (ties to even), -0.0 and out-of-range values."""
    dtype = get_format(fmt).storage
    grid = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    grid = grid[torch.isfinite(grid)].unique()  # sorted; also drops the duplicate -0.0
    mids = (grid[1:] + grid[:-1]) / 2  # exact in fp32: ties for the fp8 rounding
    fmax = torch.finfo(dtype).max
    x = torch.cat([grid, mids, torch.tensor([-0.0, fmax * 1.5, -fmax * 4, 1e-30])])
    x = torch.nn.functional.pad(x, (0, (-x.numel()) % 64)).reshape(-1, 1, 64)
    cache = allocate_kv_cache(fmt, x.shape[0], 1, 1, 64)
    slots = torch.arange(x.shape[0])
    write_kv(
        x,
        x,
        cache.key_cache,
        cache.value_cache,
        slots,
        fmt,
        cache.k_scale,
        cache.v_scale,
        backend="triton",
    )
    expected = x.clamp(-fmax, fmax).to(dtype).reshape(cache.key_cache.shape)
    assert torch.equal(_bits(cache.key_cache), _bits(expected))
