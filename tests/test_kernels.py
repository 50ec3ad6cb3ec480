"""KV kernels against their naive references: Triton (interpreted on CPU) and the torch fallback.

The interpreter must be on before triton is first imported (its standard library is
jitted at import), hence the environment variable first. The GPU tests (`-m gpu`) need
triton imported in compiled mode instead: run them with TRITON_INTERPRET=0 in the
environment (benchmarks/gpu_check.sh does), which this module then leaves alone.
"""

from conftest import triton_interpreter_for_module

_interpreter = triton_interpreter_for_module()

# ruff: noqa: E402  (imports follow the interpreter switch on purpose)
import importlib.util
import subprocess
import sys
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from kvplan.kernels import select_backend
from kvplan.kernels.cache_ops import write_kv
from kvplan.kernels.paged_attention import paged_attention
from kvplan.kernels.quant import PagedKVCache, allocate_kv_cache, get_format, tensor_scale
from kvplan.kernels.reference import paged_attention_reference, write_kv_reference
from test_kernels_variants import paged_case, require_compiled_triton
from test_kv_layouts import FORMATS

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = torch.cuda.is_available()
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
needs_cuda = pytest.mark.skipif(not (HAS_CUDA and HAS_TRITON), reason="needs CUDA and triton")

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


# -- paged attention -------------------------------------------------------------------


@dataclass
class AttentionCase:
    query: torch.Tensor
    cache: PagedKVCache
    exact_cache: PagedKVCache  # the same K/V, unquantized fp32: the loose yardstick
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    scale: float

    def run(self, backend: str, exact: bool = False) -> torch.Tensor:
        c = self.exact_cache if exact else self.cache
        return paged_attention(
            self.query,
            c.key_cache,
            c.value_cache,
            self.block_tables,
            self.seq_lens,
            self.scale,
            c.fmt,
            c.k_scale,
            c.v_scale,
            backend=backend,
        )

    def reference(self) -> torch.Tensor:
        c = self.cache
        return paged_attention_reference(
            self.query,
            c.key_cache,
            c.value_cache,
            self.block_tables,
            self.seq_lens,
            self.scale,
            c.fmt,
            c.k_scale,
            c.v_scale,
        )


def _attention_case(
    fmt: str,
    head_dim: int,
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    dtype: torch.dtype,
    seq_lens: list[int] | None = None,
    seed: int = 0,
) -> AttentionCase:
    """Sequences of length 1, exactly two blocks, and a partial tail; a shuffled block table.

    Table entries past a sequence's last block are -1, so a kernel that reads them fails.
    """
    seq_lens = seq_lens or [1, 2 * block_size, block_size + 3, 5]
    cache, tables, lens, gen, key, value = paged_case(
        fmt, seq_lens, block_size, num_heads, num_kv_heads, head_dim, dtype, seed
    )
    exact = allocate_kv_cache("fp32", *cache.key_cache.shape[:3], head_dim)
    write_kv(
        key,
        value,
        exact.key_cache,
        exact.value_cache,
        torch.arange(len(key)),
        "fp32",
        backend="torch",
    )
    query = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen).to(dtype)
    return AttentionCase(query, cache, exact, tables, lens, head_dim**-0.5)


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
    case = _attention_case(fmt, head_dim, block_size, num_heads, num_kv_heads, dtype)
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
    case = _attention_case("int8", 64, 4, 4, 2, torch.float32, seq_lens=[0, 6])
    got = case.run(backend)
    assert torch.equal(got[0], torch.zeros_like(got[0]))
    torch.testing.assert_close(got, case.reference(), atol=2e-5, rtol=1e-5)


@needs_triton
def test_paged_attention_triton_tile_smaller_than_block() -> None:
    # block_n 16 < block_size 32: one block spans two tiles; sequences span several blocks.
    case = _attention_case("fp32", 64, 32, 4, 2, torch.float32, seq_lens=[1, 64, 45])
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
    case = _attention_case("fp16", 8, 4, 4, 2, torch.float16)
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
        _attention_case(fmt, 128, block_size, 8, 2, dtype, seq_lens=[1, 2 * block_size, 77, 300])
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
    key, value, slots, num_blocks, heads = _write_case(128, 16, dtype, num_tokens=40, num_blocks=8)
    ref = _fresh_cache(fmt, num_blocks, 16, heads, 128, dtype, key, value)
    write_kv_reference(
        key, value, ref.key_cache, ref.value_cache, slots, ref.fmt, ref.k_scale, ref.v_scale
    )
    got = _fresh_cache(fmt, num_blocks, 16, heads, 128, dtype, key, value)
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
            assert torch.equal(_bits(a.cpu()), _bits(b))
