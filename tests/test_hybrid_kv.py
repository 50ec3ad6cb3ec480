"""vLLM's hybrid KV cache manager arithmetic (kvplan/engines/hybrid_kv.py), figures worked by hand.

Every expected number below is derived in the comment next to it from the model's shapes, not
from the module: page = block_size x bytes per token of one layer; num_blocks = available //
page // group_size; blocks per max_model_len request summed over groups; concurrency =
num_blocks / that sum; tokens = int(concurrency x max_model_len) (vLLM >= 0.20) or
num_blocks // groups x block_size (<= 0.19).
"""

from __future__ import annotations

import json
import math

import pytest

from kvplan.engines.hybrid_kv import vllm_kv_cache
from kvplan.engines.kv_groups import kv_cache_groups, mamba_block_size
from kvplan.engines.sglang_kv import sglang_kv_tokens
from kvplan.spec import AttentionGroup, ModelSpec, ParamCount, parse_kv_format
from kvplan.spec.attention_group import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from kvplan.spec.resolve import load_model

GIB = 2**30
BF16 = parse_kv_format("bf16")
FP8 = parse_kv_format("fp8")


def tiny(groups: tuple[AttentionGroup, ...], name: str = "tiny") -> ModelSpec:
    layers = sum(g.num_layers for g in groups)
    return ModelSpec(
        name,
        "test",
        "llama",
        256,
        layers,
        4,
        64,
        1000,
        65536,
        groups,
        ParamCount(1000, 1000, 1000, 1000, 0, 0, 0),
    )


# --- tiny specs, as in vLLM's CPU tests -------------------------------------------------------


def test_pure_full_attention_is_plain_arithmetic():
    # 4 layers x 2 KV heads x 64 x (K, V) x 2 B = 512 B per token per layer; page 16 x 512 = 8,192
    # B.
    model = tiny((FullAttentionSpec(4, 2, 64),))
    (group,) = kv_cache_groups(model, BF16, 1, 16)
    assert (group.num_layers, group.group_size, group.page_size_bytes) == (4, 4, 8192)
    # 10 MiB = 10,485,760 B // 8,192 // 4 layers = 320 blocks = 5,120 tokens; 1,024-token
    # requests need 64 blocks each: 320 / 64 = 5.00x. Both token formulas agree here.
    for version in (None, "0.19.0"):
        kv = vllm_kv_cache(model, BF16, 1, 10 * 2**20, 1024, vllm_version=version)
        assert (kv.num_blocks, kv.reported_tokens, kv.reported_concurrency) == (320, 5120, 5.0)
        assert kv.true_concurrency == 5.0 and kv.padding_bytes == 0.0
    assert sglang_kv_tokens(model, BF16, 1, 10 * 2**20).max_total_num_tokens == 10 * 2**20 // (
        4 * 512
    )


def test_uneven_layer_counts_pad_the_short_group():
    # 3 full + 4 sliding (same page): 4 < 1.5 x 3, so the group size is the larger count, 4;
    # the full group gets one padding layer.
    model = tiny((FullAttentionSpec(3, 2, 64), SlidingWindowSpec(4, 2, 64, window=64)))
    groups = kv_cache_groups(model, BF16, 1, 16)
    assert [(g.kind, g.num_layers, g.group_size) for g in groups] == [
        ("full", 3, 4),
        ("sliding", 4, 4),
    ]
    # 2 MiB // 8,192 // 4 = 64 blocks; L = 256: full 16 blocks, sliding cdiv(min(63 + 2048, 256),
    # 16)
    # + 1 = 17; 64 / 33 = 1.939x, int(1.939 x 256) = 496 tokens. Per request 16 full blocks waste
    # one
    # 8,192-B layer slot each: 16 x 8,192 of 33 x 32,768 B, i.e. 2 MiB x 131,072 / 1,081,344.
    kv = vllm_kv_cache(model, BF16, 1, 2 * 2**20, 256)
    assert (kv.num_blocks, kv.blocks_per_request, kv.reported_tokens) == (64, 33, 496)
    assert kv.padding_bytes == pytest.approx(2 * 2**20 * 131072 / 1081344)


def test_page_sizes_that_do_not_divide_are_refused():
    # 3 KV heads vs 2: pages 12,288 and 8,192 B; 12,288 is not a multiple of 8,192.
    model = tiny((FullAttentionSpec(2, 3, 64), SlidingWindowSpec(2, 2, 64, window=64)))
    with pytest.raises(ValueError, match="does not divide"):
        kv_cache_groups(model, BF16, 1, 16)


# --- shipped profiles worked by hand ----------------------------------------------------------


def test_gpt_oss_20b():
    model = load_model("gpt-oss-20b")
    fmt = parse_kv_format("auto", model)
    groups = kv_cache_groups(model, fmt, 1, 16)
    # 12 full + 12 sliding(128), 8 KV heads x 64: page 16 x 8 x 64 x 2 x 2 B = 32,768 B; two groups
    # of 12.
    assert [(g.kind, g.num_layers, g.group_size, g.page_size_bytes) for g in groups] == [
        ("full", 12, 12, 32768),
        ("sliding", 12, 12, 32768),
    ]
    # 3 GiB // 32,768 // 12 = 8,192 blocks. L = 32,768: full 2,048 blocks; sliding (0.20-0.25, one
    # batch in flight) cdiv(min(127 + 2,048, 32,768), 16) + 1 = 136 + 1 = 137; 8,192 / 2,185 =
    # 3.749x;
    # int(8,192 x 32,768 / 2,185) = 122,853 tokens (<= 0.19 printed 8,192 // 2 x 16 = 65,536).
    kv = vllm_kv_cache(model, fmt, 1, 3 * GIB, 32768, vllm_version="0.25.0")
    assert (kv.num_blocks, kv.blocks_per_request, kv.reported_tokens) == (8192, 2185, 122853)
    assert round(kv.reported_concurrency, 2) == 3.75
    assert (
        vllm_kv_cache(model, fmt, 1, 3 * GIB, 32768, vllm_version="0.19.0").reported_tokens == 65536
    )
    # From 0.26 two batches are in flight: cdiv(127 + 4,096, 16) + 1 = 265 sliding blocks, 2,313 per
    # request, int(8,192 x 32,768 / 2,313) = 116,055 tokens.
    newest = vllm_kv_cache(model, fmt, 1, 3 * GIB, 32768)
    assert (newest.blocks_per_request, newest.reported_tokens) == (2313, 116055)
    # Once prefilled a request keeps cdiv(127, 16) + 1 = 9 sliding blocks: 8,192 / 2,057.
    assert kv.true_concurrency == pytest.approx(8192 / 2057)
    # Hybrid manager off: one group of 24 layers, 3 GiB // 32,768 // 24 = 4,096 blocks, 2,048 per
    # request.
    off = vllm_kv_cache(model, fmt, 1, 3 * GIB, 32768, hybrid_manager=False)
    assert (len(off.groups), off.num_blocks, off.reported_tokens, off.reported_concurrency) == (
        1,
        4096,
        65536,
        2.0,
    )
    assert (
        vllm_kv_cache(model, fmt, 1, 3 * GIB, 32768, vllm_version="0.8.5").reported_tokens == 65536
    )


def test_gemma_3_1b_pads_two_sliding_groups():
    model = load_model("gemma-3-1b")
    fmt = parse_kv_format("auto", model)
    groups = kv_cache_groups(model, fmt, 1, 16)
    # 4 full + 22 sliding(512), 1 KV head x 256: page 16 x 256 x 2 x 2 = 16,384 B. Group size 4
    # (22 >= 1.5 x 4); 22 sliding layers -> 6 groups taking layers[i::6]: 4, 4, 4, 4, 3, 3.
    assert [g.num_layers for g in groups] == [4, 4, 4, 4, 4, 3, 3]
    assert {g.group_size for g in groups} == {4} and {g.page_size_bytes for g in groups} == {16384}
    # 1 GiB // 16,384 // 4 = 16,384 blocks. L = 32,768: full 2,048; each sliding group (one batch in
    # flight) cdiv(511 + 2,048, 16) + 1 = 161, six of them 966; 16,384 / 3,014 = 5.44x;
    # int(16,384 x 32,768 / 3,014) = 178,125 tokens.
    kv = vllm_kv_cache(model, fmt, 1, GIB, 32768, vllm_version="0.25.0")
    assert (kv.num_blocks, kv.blocks_per_request, kv.reported_tokens) == (16384, 3014, 178125)
    # Two batches in flight (>= 0.26): cdiv(511 + 4,096, 16) + 1 = 289 each, 2,048 + 6 x 289 =
    # 3,782.
    assert vllm_kv_cache(model, fmt, 1, GIB, 32768).blocks_per_request == 3782
    # Padding: two 3-layer groups leave one 16,384-B slot empty in each of their 161 blocks:
    # 322 of the request's 3,014 x 4 layer-pages, over the whole 1 GiB pool.
    assert kv.padding_bytes == pytest.approx(GIB * 322 / 12056)


def test_gemma_4_unifies_pages_by_doubling_the_full_block():
    model = load_model("gemma-4-26b-a4b")
    fmt = parse_kv_format("auto", model)
    groups = kv_cache_groups(model, fmt, 1, 16)
    # sliding: 8 KV heads x 256 x 2 x 2 B = 8,192 B/token, page 131,072; full (k_eq_v, 2 heads x
    # 512):
    # 4,096 B/token, page 65,536 -> block 32 to reach 131,072. 5 full + 25 sliding: 1 + 5 groups of
    # 5.
    assert [(g.kind, g.block_size, g.num_layers) for g in groups] == [("full", 32, 5)] + [
        ("sliding", 16, 5)
    ] * 5
    assert {g.page_size_bytes for g in groups} == {131072}
    # 10 GiB // 131,072 // 5 = 16,384 blocks; L = 4,096: full cdiv(4,096, 32) = 128, sliding (one
    # batch in flight) cdiv(1,023 + 2,048, 16) + 1 = 193 each, 965; 16,384 / 1,093 = 14.99x;
    # int(... x 4,096) = 61,398.
    kv = vllm_kv_cache(model, fmt, 1, 10 * GIB, 4096, vllm_version="0.25.0")
    assert (kv.num_blocks, kv.blocks_per_request, kv.reported_tokens) == (16384, 1093, 61398)
    # Two in flight: min(1,023 + 4,096, 4,096) = 4,096 -> 257 per sliding group, 128 + 5 x 257 =
    # 1,413.
    assert vllm_kv_cache(model, fmt, 1, 10 * GIB, 4096).blocks_per_request == 1413
    assert kv.block_size == 16 and kv.padding_bytes == 0.0
    # Hybrid manager off: every layer full length, one group whose block costs the sum of the
    # pages, 25 x 131,072 + 5 x 65,536 = 3,604,480 B: 10 GiB // that = 2,978 blocks x 16 tokens.
    off = vllm_kv_cache(model, fmt, 1, 10 * GIB, 4096, hybrid_manager=False)
    assert (len(off.groups), off.block_bytes, off.num_blocks, off.reported_tokens) == (
        1,
        3604480,
        2978,
        47648,
    )


def test_qwen3_5_27b_raises_the_block_to_hold_a_linear_attention_state():
    model = load_model("qwen3.5-27b")
    fmt = parse_kv_format("auto", model)
    # State per layer: conv 3 x 10,240 x 2 B + SSM 48 x 128 x 128 x 4 B = 3,207,168 B. Attention:
    # 2 x 4 heads x 256 x 2 B = 4,096 B/token -> 783 tokens, rounded to 16: 784 (page 3,211,264 B,
    # the state padded by 4,096 B). 64-token alignment: 832.
    assert (
        mamba_block_size(model, fmt, 1) == 784
        and mamba_block_size(model, fmt, 1, alignment=64) == 832
    )
    groups = kv_cache_groups(model, fmt, 1, 16)
    # 16 full + 48 state: group size 16, 1 + 3 groups.
    assert [(g.kind, g.num_layers, g.block_size, g.page_size_bytes) for g in groups] == [
        ("full", 16, 784, 3211264)
    ] + [("state", 16, 784, 3211264)] * 3
    # vLLM issue #40691 (v0.19.0, H20, max_model_len 32,768) printed 290,864 tokens and 33.04x.
    # 1,487 blocks: full cdiv(32,768, 784) = 42 + 3 state blocks = 45 per request, 1,487 / 45 =
    # 33.04x; the 0.19 token line 1,487 // 4 x 784 = 290,864. 1,487 blocks = 1,487 x 16 x 3,211,264
    # B.
    available = 1487 * 16 * 3211264
    old = vllm_kv_cache(
        model, fmt, 1, available, 32768, vllm_version="0.19.0", max_num_batched_tokens=16384
    )
    assert (old.num_blocks, old.reported_tokens, round(old.reported_concurrency, 2)) == (
        1487,
        290864,
        33.04,
    )
    # The fix (>= 0.20): int(1,487 / 45 x 32,768) = 1,082,800.
    assert vllm_kv_cache(model, fmt, 1, available, 32768).reported_tokens == 1082800
    # Padding: 3 state blocks x 16 layers x 4,096 B per request of 45 x 16 x 3,211,264 B.
    assert old.padding_bytes == pytest.approx(available * 3 * 16 * 4096 / (45 * 16 * 3211264))
    with pytest.raises(ValueError, match="cannot disable"):
        vllm_kv_cache(model, fmt, 1, available, 32768, hybrid_manager=False)


def test_sglang_swa_split_and_linear_attention_pool():
    model = load_model("gpt-oss-20b")
    fmt = parse_kv_format("auto", model)
    # cell = 24 layers x 2,048 B = 49,152 B: 10 GiB // 49,152 = 218,453 tokens at full length;
    # full = int(218,453 x 24 / (0.8 x 12 + 12)) = int(242,725.5) = 242,725; swa = int(0.8 x that) =
    # 194,180.
    swa = sglang_kv_tokens(model, fmt, 1, 10 * GIB)
    assert (swa.max_total_num_tokens, swa.full_tokens, swa.swa_tokens) == (242725, 242725, 194180)
    qwen = load_model("qwen3.5-27b")
    # state per sequence 48 x 3,207,168 = 153,944,064 B; budget 10 GiB x 0.9 / 1.9 -> 33 slots;
    # the rest / (16 layers x 4,096 B) = 86,323 full-attention tokens.
    lin = sglang_kv_tokens(qwen, parse_kv_format("auto", qwen), 1, 10 * GIB)
    assert (lin.mamba_slots, lin.max_total_num_tokens) == (33, (10 * GIB - 33 * 153944064) // 65536)


# --- the shipped startup logs -----------------------------------------------------------------


def _record(shared_data, rec_id: str) -> dict:
    path = shared_data / "serving" / "vllm_startup_logs.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    for line in path.read_text().splitlines():
        if line.strip() and json.loads(line)["id"] == rec_id:
            return json.loads(line)
    pytest.skip(f"{rec_id} is not in {path}")


def _bracket(make, gib: float):
    """Results at both ends of the printed GiB's rounding (+-0.005 GiB)."""
    return make((gib - 0.005) * GIB), make((gib + 0.005) * GIB)


def test_rec021_gemma4_on_l40s(shared_data):
    rec = _record(shared_data, "rec021")["reported"]
    model = load_model("gemma-4-26b-a4b")
    fmt = parse_kv_format("auto", model)
    # Printed: 13.47 GiB, 63,988 tokens, 15.62x at 4,096. The line implies 22,074 blocks (13.4729
    # GiB)
    # over 1,413 blocks per request = 128 full + 5 x 257 sliding: the sliding groups reserved the
    # whole 4,096 tokens (cdiv(4,096, 16) + 1). v0.29 reserves window - 1 + two batches in flight
    # (async scheduling): 1,023 + 2 x 2,048 >= 4,096, with the logged --max-num-batched-tokens=2048.
    lo, hi = _bracket(
        lambda b: vllm_kv_cache(
            model, fmt, 1, b, 4096, max_num_batched_tokens=2048, vllm_version="0.29.0"
        ),
        rec["available_kv_gib"],
    )
    assert lo.reported_tokens <= rec["gpu_kv_cache_tokens"] <= hi.reported_tokens
    assert (
        round(lo.reported_concurrency, 2)
        <= rec["max_concurrency"]
        <= round(hi.reported_concurrency, 2)
    )
    exact = vllm_kv_cache(
        model, fmt, 1, 22074 * 5 * 131072, 4096, max_num_batched_tokens=2048, vllm_version="0.29.0"
    )
    assert (exact.reported_tokens, round(exact.reported_concurrency, 2)) == (63988, 15.62)
    # One batch in flight (<= 0.25) would have printed 20.19x.
    one_batch = vllm_kv_cache(
        model,
        fmt,
        1,
        rec["available_kv_gib"] * GIB,
        4096,
        max_num_batched_tokens=2048,
        vllm_version="0.25.0",
    )
    assert round(one_batch.reported_concurrency, 2) == 20.19


def test_rec023_gpt_oss_20b_on_l4(shared_data):
    rec = _record(shared_data, "rec023")["reported"]
    model = load_model("gpt-oss-20b")
    fmt = parse_kv_format("auto", model)
    # No "Available KV cache memory" line in the excerpt. 82,819 tokens / 2.53x at 32,768. v0.29
    # with the L4 default of 2,048 batched tokens keeps two batches in flight: a request needs
    # 2,048 + cdiv(127 + 4,096, 16) + 1 = 2,313 blocks, and 5,846 blocks (5,846 x 12 x 32,768 B =
    # 2.141 GiB) print int(5,846 / 2,313 x 32,768) = 82,819 and 2.53x.
    kv = vllm_kv_cache(
        model, fmt, 1, 5846 * 12 * 32768, 32768, max_num_batched_tokens=2048, vllm_version="0.29.0"
    )
    assert (kv.reported_tokens, round(kv.reported_concurrency, 2)) == (
        rec["gpu_kv_cache_tokens"],
        rec["max_concurrency"],
    )
    # With one batch in flight (<= 0.25: 2,185 blocks per request) no block count prints 82,819:
    # it would need 82,819 x 2,185 / 32,768 = 5,522.46..5,522.53 blocks.
    lo, hi = 82819 * 2185 / 32768, 82820 * 2185 / 32768
    assert math.ceil(lo) >= hi


def test_rec025_gpt_oss_120b_refused_on_h100(shared_data):
    rec = _record(shared_data, "rec025")["reported"]
    model = load_model("gpt-oss-120b")
    fmt = parse_kv_format("auto", model)
    # 1.71 GiB // (18 x 32,768) = 3,112 blocks; the default 131,072 tokens need 8,192 + cdiv(127 +
    # 1,024, 16) + 1 = 8,265 blocks (4.54 GiB): vLLM refuses to start, as the log shows. The longest
    # request that fits: 3,112 - 73 = 3,039 full blocks = 48,624 tokens.
    kv = vllm_kv_cache(
        model,
        fmt,
        1,
        rec["available_kv_gib"] * GIB,
        131072,
        max_num_batched_tokens=1024,
        vllm_version="0.11.0",
    )
    assert (kv.num_blocks, kv.blocks_per_request, kv.fits_one_request) == (3112, 8265, False)
    assert kv.estimated_max_model_len == 48624


def qwen3_6_35b_a3b() -> ModelSpec:
    # Assumed Qwen3.5-35B-A3B shapes (no profile ships): 40 layers, every 4th full attention
    # (2 KV heads x 256); linear attention 16 key / 32 value heads x 128, conv kernel 4:
    # conv 3 x (2 x 2,048 + 4,096) x 2 B = 49,152 + SSM 32 x 128 x 128 x 4 B = 2,097,152 ->
    # 2,146,304 B.
    return tiny(
        (
            FullAttentionSpec(10, 2, 256),
            MambaSpec(30, state_bytes_per_layer=2146304),
        ),
        "qwen3.6-35b-a3b",
    )


def test_rec027_qwen3_6_35b_a3b_fp8_on_5090(shared_data):
    rec = _record(shared_data, "rec027")["reported"]
    model = qwen3_6_35b_a3b()
    # fp8 attention: 2 x 2 x 256 x 1 B = 1,024 B/token; 2,146,304 / 1,024 = 2,096 tokens exactly
    # (16-aligned).
    # 10 full + 30 state: 4 groups of 10. Prefix caching on -> "align": 2 state blocks per group.
    # Per request: cdiv(131,072, 2,096) = 63 + 3 x 2 = 69; 5.98 GiB // 2,146,304 // 10 = 299 blocks:
    # 299 / 69 = 4.33x, int(299 / 69 x 131,072) = 567,978.
    lo, hi = _bracket(
        lambda b: vllm_kv_cache(model, FP8, 1, b, 131072, mamba_cache_mode="align"),
        rec["available_kv_gib"],
    )
    assert lo.block_size == 2096 and lo.blocks_per_request == 69
    assert lo.reported_tokens <= rec["gpu_kv_cache_tokens"] <= hi.reported_tokens
    kv = vllm_kv_cache(
        model, FP8, 1, rec["available_kv_gib"] * GIB, 131072, mamba_cache_mode="align"
    )
    assert (kv.num_blocks, kv.reported_tokens, round(kv.reported_concurrency, 2)) == (
        299,
        567978,
        4.33,
    )


def test_rec029_qwen3_6_27b_tp2_mtp(shared_data):
    rec = _record(shared_data, "rec029")["reported"]
    model = load_model("qwen3.5-27b")  # Qwen3.6-27B assumed to share Qwen3.5-27B's shapes
    # TP 2: state 3,207,168 / 2 = 1,603,584 B; fp8 attention 2 x 2 heads x 256 = 1,024 B/token ->
    # 1,566 tokens, 1,600 at a 64-token alignment (16 would give 1,568 and no block count matching).
    # MTP adds 1 full layer: 17 full + 48 state -> group size 17, 1 + 3 groups (16 layers each,
    # padded). Align mode + 3
    # speculative tokens: 5 blocks per state group. Per request: cdiv(262,144, 1,600) = 164 + 15 =
    # 179;
    # 425 blocks: 425 / 179 = 2.37x, int(425 / 179 x 262,144) = 622,408. Memory not printed.
    kv = vllm_kv_cache(
        model,
        FP8,
        2,
        425 * 17 * 1600 * 1024,
        262144,
        mamba_cache_mode="align",
        num_speculative_tokens=3,
        mamba_alignment=64,
        draft_layers=1,
    )
    assert [g.num_layers for g in kv.groups] == [17, 16, 16, 16]
    assert (kv.block_size, kv.blocks_per_request, kv.num_blocks) == (1600, 179, 425)
    assert (kv.reported_tokens, round(kv.reported_concurrency, 2)) == (
        rec["gpu_kv_cache_tokens"],
        rec["max_concurrency"],
    )
