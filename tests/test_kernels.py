"""KV kernels against their naive references: Triton (interpreted on CPU) and the torch fallback.

The interpreter must be on before triton is first imported (its standard library is
jitted at import), hence the environment variable first. write_kv's cases are
test_kernels_write.py's, the compiled GPU tests (`-m gpu`, TRITON_INTERPRET=0 in the
environment) test_kernels_gpu.py's.
"""

from triton_helpers import triton_interpreter_for_module

_interpreter = triton_interpreter_for_module()

# ruff: noqa: E402  (imports follow the interpreter switch on purpose)
import importlib.util
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from kernel_cases import attention_case
from kvplan.kernels import select_backend
from kvplan.kernels.cache_ops import write_kv
from kvplan.kernels.paged_attention import paged_attention
from kvplan.kernels.quant import allocate_kv_cache
from kvplan.kernels.reference import paged_attention_reference

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

# Relative L2 error of attention over the quantized cache vs the exact fp32 cache: about
# 2x the worst seen over several seeds with unit-normal K/V (a loose sanity bound only).
LOOSE_REL_TOL = {
    "fp32": 1e-6,
    "fp16": 2e-3,
    "bf16": 1e-2,
    "fp8-e4m3": 0.06,
    "fp8-e5m2": 0.12,
    "int8": 0.015,
    "int8-g16": 0.012,
    "int4": 0.25,
    "int4-g32": 0.2,
    "int4-tensor": 0.4,
}


# -- paged attention -------------------------------------------------------------------


def _tight_tol(dtype: torch.dtype) -> dict:
    return {
        torch.float32: {"atol": 2e-5, "rtol": 1e-5},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
        torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
    }[dtype]


def _check_attention(
    backend: str,
    fmt: str,
    head_dim: int,
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    dtype: torch.dtype,
) -> None:
    case = attention_case(fmt, head_dim, block_size, num_heads, num_kv_heads, dtype)
    got = case.run(backend)
    assert got.dtype == dtype and got.shape == case.query.shape
    torch.testing.assert_close(got.float(), case.reference().float(), **_tight_tol(dtype))
    exact = paged_attention_reference(
        case.query.float(),
        case.exact_cache.key_cache,
        case.exact_cache.value_cache,
        case.block_tables,
        case.seq_lens,
        case.scale,
        "fp32",
    )
    assert ((got.float() - exact).norm() / exact.norm()).item() <= LOOSE_REL_TOL[fmt]


# (fmt, head_dim, block_size, num_heads, num_kv_heads, dtype): GQA 1/2/4 and MQA (kv heads = 1).
TORCH_ATTENTION_CASES = [
    (f, hd, bs, h, kvh, dt)
    for f, dt in (
        ("fp32", torch.float32),
        ("fp16", torch.float16),
        ("bf16", torch.bfloat16),
        ("fp8-e4m3", torch.float32),
        ("fp8-e5m2", torch.float16),
        ("int8", torch.float32),
        ("int4", torch.float16),
        ("int4-g32", torch.float32),
        ("int8-g16", torch.float32),
        ("int4-tensor", torch.float32),
    )
    for hd, bs, h, kvh in ((8, 1, 2, 2), (64, 4, 4, 2), (128, 16, 8, 2), (64, 16, 4, 1))
]


@pytest.mark.parametrize(
    "fmt,head_dim,block_size,num_heads,num_kv_heads,dtype", TORCH_ATTENTION_CASES
)
def test_paged_attention_torch_matches_reference(
    fmt: str, head_dim: int, block_size: int, num_heads: int, num_kv_heads: int, dtype: torch.dtype
) -> None:
    _check_attention("torch", fmt, head_dim, block_size, num_heads, num_kv_heads, dtype)


# Group 1 with block size 1, MQA, groups 4 and 2 in fp32/fp16, then every quantized layout.
TRITON_ATTENTION_CASES = [
    ("fp32", 8, 1, 2, 2, torch.float32),
    ("fp32", 64, 4, 4, 1, torch.float32),
    ("fp16", 128, 16, 8, 2, torch.float16),
    ("fp16", 64, 4, 4, 2, torch.float16),
    ("fp8-e4m3", 64, 16, 4, 2, torch.float32),
    ("fp8-e5m2", 8, 4, 4, 1, torch.float16),
    ("int8", 64, 4, 4, 2, torch.float16),
    ("int8", 128, 1, 4, 4, torch.float32),
    ("int4", 64, 16, 8, 2, torch.float32),
    ("int4", 8, 4, 2, 1, torch.float16),
    ("int4-g32", 128, 4, 4, 2, torch.float32),
    ("int8-g16", 64, 4, 4, 2, torch.float32),
    ("int4-tensor", 64, 4, 4, 4, torch.float32),
]


@needs_triton
@pytest.mark.parametrize(
    "fmt,head_dim,block_size,num_heads,num_kv_heads,dtype", TRITON_ATTENTION_CASES
)
def test_paged_attention_triton_matches_reference(
    fmt: str, head_dim: int, block_size: int, num_heads: int, num_kv_heads: int, dtype: torch.dtype
) -> None:
    _check_attention("triton", fmt, head_dim, block_size, num_heads, num_kv_heads, dtype)


@pytest.mark.parametrize("backend", ["torch", pytest.param("triton", marks=needs_triton)])
def test_paged_attention_empty_sequence_returns_zeros(backend: str) -> None:
    case = attention_case("int8", 64, 4, 4, 2, torch.float32, seq_lens=[0, 6])
    got = case.run(backend)
    assert torch.equal(got[0], torch.zeros_like(got[0]))
    torch.testing.assert_close(got, case.reference(), atol=2e-5, rtol=1e-5)


@needs_triton
def test_paged_attention_triton_tile_smaller_than_block() -> None:
    # block_n 16 < block_size 32: one block spans two tiles; sequences span several blocks.
    case = attention_case("fp32", 64, 32, 4, 2, torch.float32, seq_lens=[1, 64, 45])
    got = paged_attention(
        case.query,
        case.cache.key_cache,
        case.cache.value_cache,
        case.block_tables,
        case.seq_lens,
        case.scale,
        "fp32",
        backend="triton",
        block_n=16,
    )
    torch.testing.assert_close(got, case.reference(), atol=2e-5, rtol=1e-5)


# -- argument checks and backend choice --------------------------------------------------


def test_rejects_bad_arguments() -> None:
    case = attention_case("fp16", 8, 4, 4, 2, torch.float16)
    c = case.cache
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(
            case.query[:, :3], c.key_cache, c.value_cache, case.block_tables, case.seq_lens, 1.0
        )
    with pytest.raises(ValueError, match="stores"):
        paged_attention(
            case.query, c.key_cache, c.value_cache, case.block_tables, case.seq_lens, 1.0, "int8"
        )
    int8 = allocate_kv_cache("int8", 2, 4, 2, 8)
    with pytest.raises(ValueError, match="scale caches"):
        write_kv(
            torch.zeros(1, 2, 8),
            torch.zeros(1, 2, 8),
            int8.key_cache,
            int8.value_cache,
            torch.tensor([0]),
            "int8",
        )
    with pytest.raises(ValueError, match="unknown backend"):
        paged_attention(
            case.query,
            c.key_cache,
            c.value_cache,
            case.block_tables,
            case.seq_lens,
            1.0,
            backend="cuda",
        )


def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert select_backend("torch", on_cuda=False) == "torch"
    assert select_backend("reference", on_cuda=False) == "reference"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert select_backend(None, on_cuda=False) == "torch"
    if HAS_TRITON:
        with pytest.raises(ValueError, match="TRITON_INTERPRET"):
            select_backend("triton", on_cuda=False)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert select_backend("auto", on_cuda=False) == "triton"


def test_import_kvplan_kernels_stays_torch_free() -> None:
    probe = (
        "import sys, kvplan, kvplan.kernels; "
        "print(','.join(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
