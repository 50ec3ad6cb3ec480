"""write_kv against its reference: the torch path and Triton (interpreted on CPU) store
every KV format's bits exactly, fp8 rounding as torch's cast. GPU: tests/test_kernels_gpu.py."""

from triton_helpers import HAS_TRITON, triton_interpreter_for_module

_interpreter = triton_interpreter_for_module()

# ruff: noqa: E402  (imports follow the interpreter switch on purpose)

import pytest

torch = pytest.importorskip("torch")

from kernel_cases import bits, fresh_cache, write_case
from kv_formats import FORMATS
from kvplan.kernels.cache_ops import write_kv
from kvplan.kernels.quant import allocate_kv_cache, get_format
from kvplan.kernels.reference import write_kv_reference

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


# -- write_kv --------------------------------------------------------------------------


def _check_write(
    backend: str, fmt: str, head_dim: int, block_size: int, dtype: torch.dtype
) -> None:
    key, value, slots, num_blocks, heads = write_case(head_dim, block_size, dtype)
    ref = fresh_cache(fmt, num_blocks, block_size, heads, head_dim, dtype, key, value)
    got = fresh_cache(fmt, num_blocks, block_size, heads, head_dim, dtype, key, value)
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
            assert torch.equal(bits(a), bits(b))
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
    if _interpreter_drops_the_sign_of_zero():
        # Triton 3.7's interpreter casts fp32 -0.0 to fp8 +0 (3.8 and compiled kernels keep
        # the sign): compare every other value exactly, and what rounds to -0.0 as +0.
        zero = expected.float() == 0
        expected = torch.where(zero, torch.zeros((), dtype=torch.float32), expected.float())
        expected = expected.to(dtype)
    assert torch.equal(bits(cache.key_cache), bits(expected))


def _interpreter_drops_the_sign_of_zero() -> bool:
    import triton
    from kvplan.kernels import interpreting

    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    return interpreting() and (major, minor) < (3, 8)
