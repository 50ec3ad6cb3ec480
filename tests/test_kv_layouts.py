"""KV cache layouts: bytes per token equal the estimator's, storage shapes and dtypes, bit
packing and the quantize / dequantize round trip (pure torch, no kernels)."""

from __future__ import annotations

import pytest
from kv_formats import FORMATS

torch = pytest.importorskip("torch")

from kvplan.kernels.quant import (  # noqa: E402  (after the torch check)
    allocate_kv_cache,
    cache_bytes_per_token_per_head,
    dequantize,
    get_format,
    pack_bits,
    quantize,
    unpack_bits,
)

from kvplan.spec import parse_kv_format  # noqa: E402


@pytest.mark.parametrize("head_dim", [8, 64, 128])
@pytest.mark.parametrize("fmt", FORMATS)
def test_layout_bytes_match_estimator(fmt: str, head_dim: int) -> None:
    assert cache_bytes_per_token_per_head(fmt, head_dim) == parse_kv_format(fmt).bytes_per_vector(
        head_dim
    )


def test_layout_bytes_known_values() -> None:
    assert cache_bytes_per_token_per_head("int8", 128) == 132
    assert cache_bytes_per_token_per_head("int4", 128) == 68
    assert cache_bytes_per_token_per_head("fp8", 128) == 128
    assert cache_bytes_per_token_per_head("int4-g32", 128) == 80
    assert cache_bytes_per_token_per_head("bf16", 128) == 256


def test_allocate_shapes_and_dtypes() -> None:
    cache = allocate_kv_cache("int4-g32", 3, 16, 2, 128)
    assert cache.key_cache.shape == (3, 16, 2, 64) and cache.key_cache.dtype == torch.uint8
    assert cache.k_scale.shape == (3, 16, 2, 4) and cache.k_scale.dtype == torch.float32
    fp8 = allocate_kv_cache("fp8-e5m2", 3, 16, 2, 128)
    assert fp8.key_cache.dtype == torch.float8_e5m2 and fp8.k_scale.tolist() == [1.0]
    plain = allocate_kv_cache("none", 3, 16, 2, 128, dtype=torch.float16)
    assert plain.key_cache.dtype == torch.float16 and plain.k_scale is None
    with pytest.raises(ValueError, match="dtype"):
        get_format("none")
    with pytest.raises(ValueError, match="multiple of 2"):
        get_format("int4-g3")


def test_int4_packing_is_offset_binary_low_nibble_first() -> None:
    packed = pack_bits(torch.tensor([1, -2, 7, -7, -8]), 4)
    # (1+8) | (-2+8) << 4 = 0x69; (7+8) | (-7+8) << 4 = 0x1F; odd tail padded with q=0 -> 8.
    assert packed.tolist() == [0x69, 0x1F, 0x80]
    assert unpack_bits(packed, 4, 5).tolist() == [1, -2, 7, -7, -8]
    q = torch.randint(-2, 2, (3, 7))
    assert torch.equal(unpack_bits(pack_bits(q, 2), 2, 7), q)


@pytest.mark.parametrize("fmt", ["int8", "int4", "int2", "int4-g32", "int8-g16"])
def test_quantize_roundtrip_within_half_a_step(fmt: str) -> None:
    cf = get_format(fmt)
    x = torch.randn(5, 3, 64, generator=torch.Generator().manual_seed(0))
    x[0, 0] = 0.0  # an all-zero vector must store scale 0 and decode to zeros, not NaN
    stored, scales = quantize(x, cf)
    assert stored.shape == (5, 3, cf.packed_dim(64)) and scales.shape == (5, 3, cf.num_groups(64))
    back = dequantize(stored, scales, cf, 64)
    step = scales.repeat_interleave(cf.group_len(64), dim=-1)
    assert torch.all((back - x).abs() <= step / 2 + 1e-6)
    assert torch.equal(back[0, 0], torch.zeros(64)) and scales[0, 0].eq(0).all()
