"""Today's attention layouts and MoE shapes, pinned to figures derived by hand from each
shipped config.json (the arithmetic is in the comments) and to vLLM's cache formats."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.spec import parse_kv_format
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.resolve import load_model

BF16, FP8 = parse_kv_format("bf16"), parse_kv_format("fp8")


def shapes(name: str) -> list[tuple[str, int, int, int, int | None]]:
    return [
        (g.kind, g.num_layers, g.num_kv_heads, g.head_dim, g.window)
        for g in load_model(name).groups
    ]


# --- per-layer-type shapes: Gemma-4 26B-A4B ---------------------------------------------


def test_gemma4_global_layers_have_their_own_head_dim_and_kv_heads() -> None:
    # layer_types: 5 x (5 sliding + 1 full). Full layers: global_head_dim 512 and, since
    # attention_k_eq_v, num_global_key_value_heads 2; sliding layers: head_dim 256, 8 KV heads.
    assert shapes("gemma-4-26b-a4b") == [("full", 5, 2, 512, None), ("sliding", 25, 8, 256, 1024)]
    model = load_model("gemma-4-26b-a4b")
    # K = V still caches K and V apart (V = v_norm(K) without RoPE), so 2 vectors per head:
    # full 5 x 2 x 2 x 512 x 2 B = 20,480; sliding 25 x 2 x 8 x 256 x 2 B = 204,800.
    assert model.kv_bytes_per_token(BF16) == 20_480 + 204_800 == 225_280
    # Ideal at the 262,144-token maximum: full layers keep every token, sliding ones 1,024.
    assert (
        model.kv_bytes(262_144, BF16, respect_windows=True)
        == (5 * 262_144 * 4_096 + 25 * 1_024 * 8_192)
        == 5_578_424_320
    )


def test_gemma4_without_k_eq_v_keeps_the_shared_kv_head_count() -> None:
    # vLLM and transformers use num_global_key_value_heads only on K = V layers.
    config = json.loads(load_model_config("google--gemma-4-26B-A4B.json"))["text_config"]
    config = {**config, "attention_k_eq_v": False}
    full = model_spec_from_config(config, "g", "test").groups[0]
    assert (full.kind, full.num_kv_heads, full.head_dim) == ("full", 8, 512)


def test_gemma4_params_count_dense_mlp_beside_experts_and_top_k_experts() -> None:
    h, vocab = 2816, 262_144
    embedding = vocab * h  # tied: the LM head is this table
    sliding_attn = 2 * h * 16 * 256 + 2 * h * 8 * 256 + 2 * 256  # q, o; k, v; q/k norm
    global_attn = 2 * h * 16 * 512 + h * 2 * 512 + 2 * 512  # q, o; k only (K = V); q/k norm
    dense_mlp = 3 * h * 2112  # runs beside the experts in every layer (enable_moe_block)
    expert = 3 * h * 704
    router = h * 128 + h + 128  # proj, scale, per_expert_scale
    norms = 7 * h  # 4 per layer plus the MoE block's 3
    shared = (
        25 * sliding_attn + 5 * global_attn + 30 * (dense_mlp + router + norms) + h
    )  # + final norm
    params = load_model("gemma-4-26b-a4b").params
    assert params.total == embedding + shared + 30 * 128 * expert
    assert params.active == embedding + shared + 30 * 8 * expert  # top_k_experts = 8
    assert params.total / 1e9 == pytest.approx(
        25.2, rel=0.01
    )  # model card: 25.2B total, 3.8B active
    assert params.active / 1e9 == pytest.approx(3.8, rel=0.01)


def test_kv_shared_layers_keep_no_kv_of_their_own() -> None:
    # Gemma-3n / Gemma-4 E-models: the last num_kv_shared_layers layers reuse an earlier
    # layer's KV. 6 layers (pattern sliding x 2, full), last 3 shared: 2 sliding + 1 full own KV.
    config = {
        "model_type": "gemma4_text",
        "hidden_size": 64,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "global_head_dim": 32,
        "vocab_size": 10,
        "sliding_window": 8,
        "num_kv_shared_layers": 3,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2,
    }
    spec = model_spec_from_config(config, "e", "t")
    assert [(g.kind, g.num_layers) for g in spec.groups] == [("full", 1), ("sliding", 2)]
    assert spec.kv_bytes_per_token(BF16) == 1 * 2 * 1 * 32 * 2 + 2 * 2 * 1 * 16 * 2
    unshared = model_spec_from_config({**config, "num_kv_shared_layers": 0}, "e", "t")
    # Shared layers keep q_proj, o_proj and q_norm: 2 sliding (head_dim 16) + 1 full (head_dim 32).
    k_v_and_k_norm = 2 * (2 * 64 * 16 + 16) + (2 * 64 * 32 + 32)
    assert unshared.params.total - spec.params.total == k_v_and_k_norm
    with pytest.raises(ValueError, match="num_kv_shared_layers"):
        model_spec_from_config({**config, "num_kv_shared_layers": 6}, "e", "t")


# --- chunked local attention: Llama-4 -----------------------------------------------------


def test_llama4_rope_layers_are_chunked_and_every_fourth_is_global() -> None:
    # No no_rope_layers in the config: transformers derives it from no_rope_layer_interval 4,
    # so layers 3, 7, ..., 47 (12) are NoPE/global and 36 are chunked at 8,192.
    assert shapes("llama-4-scout") == [("full", 12, 8, 128, None), ("chunked", 36, 8, 128, 8192)]
    model = load_model("llama-4-scout")
    assert model.kv_kind == "GQA+chunked"
    assert model.kv_bytes_per_token(BF16) == 48 * 2 * 8 * 128 * 2 == 196_608
    length = 10_485_760  # max_position_embeddings
    ideal = model.kv_bytes(length, BF16, respect_windows=True)
    assert ideal == 12 * length * 4_096 + 36 * 8_192 * 4_096
    assert model.kv_bytes(length, BF16, respect_windows=False) / ideal == pytest.approx(
        3.99, abs=0.005
    )
    # Short of one chunk a chunked layer holds the whole sequence.
    assert model.kv_bytes(5_000, BF16, respect_windows=True) == 48 * 5_000 * 4_096


def test_llama4_explicit_no_rope_layers_and_layer_types() -> None:
    base = {
        "model_type": "llama4_text",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 10,
        "attention_chunk_size": 32,
    }
    explicit = model_spec_from_config({**base, "no_rope_layers": [1, 0, 0, 1]}, "x", "t")
    assert [(g.kind, g.num_layers) for g in explicit.groups] == [("full", 2), ("chunked", 2)]
    typed = model_spec_from_config(
        {**base, "model_type": "x", "layer_types": ["chunked_attention"] * 3 + ["full_attention"]},
        "x",
        "t",
    )
    assert [(g.kind, g.num_layers, g.window) for g in typed.groups] == [
        ("full", 1, None),
        ("chunked", 3, 32),
    ]


def test_llama4_params_count_the_shared_expert_and_dense_interleave() -> None:
    h, vocab = 5120, 202_048
    attention = 2 * h * 40 * 128 + 2 * h * 8 * 128  # q, o; k, v (L2 qk-norm has no weights)
    expert = 3 * h * 8192
    embed_and_head = 2 * vocab * h
    norms = 48 * 2 * h + h
    scout = load_model("llama-4-scout").params
    # Scout: 48 MoE layers of 16 routed experts + 1 shared, top-1
    assert scout.total == embed_and_head + 48 * (attention + 17 * expert + h * 16) + norms
    assert scout.active == embed_and_head + 48 * (attention + 2 * expert + h * 16) + norms
    assert round(scout.active / 1e9) == 17  # Meta: "17B activated", two significant digits
    maverick = load_model("llama-4-maverick").params
    # Maverick: interleave_moe_layer_step 2 -> layers 1, 3, ..., 47 MoE (128 + 1 shared);
    # the other 24 are dense with intermediate_size_mlp 16,384.
    dense = 3 * h * 16_384
    assert maverick.total == (
        embed_and_head + 48 * attention + 24 * dense + 24 * (129 * expert + h * 128) + norms
    )
    assert maverick.total / 1e9 == pytest.approx(400, rel=0.01)  # Meta: 400B total, 17B activated
    assert round(maverick.active / 1e9) == 17


# --- DeepSeek-V3.2 sparse attention: MLA latent + indexer cache ---------------------------


def test_deepseek_v32_indexer_cache_beside_the_latent() -> None:
    model = load_model("deepseek-v3.2")
    assert model.kv_kind == "MLA+indexer"
    # Latent 61 x (512 + 64) x 2 B = 70,272; indexer (vLLM DeepseekV32IndexerCache) per layer
    # index_head_dim 128 fp8 bytes + 128 // 128 fp32 scale = 132 B, any KV dtype: 61 x 132 = 8,052.
    assert model.kv_bytes_per_token(BF16) == 70_272 + 8_052 == 78_324
    # fp8 KV: vLLM stores sparse MLA as fp8_ds_mla, 512 fp8 + 4 x 4 B scales + 64 x 2 B RoPE = 656.
    assert model.kv_bytes_per_token(FP8) == 61 * 656 + 8_052 == 48_068
    assert model.kv_bytes_per_token(BF16, tp=8) == 78_324  # both replicated on every rank
    # Dense MLA (DeepSeek-V3) keeps the plain fp8 latent.
    assert load_model("deepseek-v3").kv_bytes_per_token(FP8) == 61 * 576


def test_deepseek_v32_counts_the_indexer_weights() -> None:
    # Per layer: wq_b 1536 x 64 x 128, wk 7168 x 128, k_norm (LayerNorm) 2 x 128, weights_proj 7168
    # x 64.
    indexer = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert (
        load_model("deepseek-v3.2").params.total - load_model("deepseek-v3").params.total
        == 61 * indexer
    )


# --- MLC's window key ----------------------------------------------------------------------


def test_mlc_sliding_window_size_and_sink_inside_the_window() -> None:
    # mlc-llm's mistral_7b preset: sliding_window_size 4096, attention_sink_size 4 (TVM's
    # paged cache keeps the sink inside the window, so the size is the window alone).
    assert shapes("mistral-7b-v0.1") == [("sliding", 32, 8, 128, 4096)]
    model = load_model("mistral-7b-v0.1")
    assert model.kv_bytes(32_768, BF16, respect_windows=True) == 32 * 4_096 * 4_096 == 536_870_912
    assert model.kv_bytes(32_768, BF16, respect_windows=False) == 32 * 32_768 * 4_096


# --- "active" as model cards count it ------------------------------------------------------


def test_active_counts_the_input_embedding_where_cards_do() -> None:
    qwen = load_model("qwen3-30b-a3b-fp8").params
    # Qwen: untied 151,936 x 2,048 input embedding is part of the 3.3B activated
    assert qwen.active - qwen.matmul_active == 151_936 * 2_048
    dense = load_model("llama-3.1-8b").params
    assert dense.active == dense.total  # a dense model is all active
    gpt_oss = load_model("gpt-oss-120b").params
    assert gpt_oss.active == gpt_oss.matmul_active  # OpenAI's 5.13B leaves the embedding out
    assert gpt_oss.active / 1e9 == pytest.approx(5.13, rel=0.005)


# --- end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kv_kind", "per_token", "context"),
    [
        ("gemma-4-26b-a4b", "GQA+SWA", 225_280, 131_072),
        ("llama-4-scout", "GQA+chunked", 196_608, 131_072),
        ("llama-4-maverick", "GQA+chunked", 196_608, 131_072),
        ("deepseek-v3.2", "MLA+indexer", 78_324, 131_072),
        # its config's max_position_embeddings, the longest max_model_len vLLM accepts
        ("mistral-7b-v0.1", "GQA (all SWA)", 131_072, 32_768),
    ],
)
def test_estimate_on_each_new_profile(
    name: str, kv_kind: str, per_token: int, context: int
) -> None:
    result = CliRunner().invoke(
        app,
        [
            "estimate",
            name,
            "--gpu",
            "h200",
            "--tp",
            "8",
            "--context",
            str(context),
            "--kv-dtype",
            "bf16",
            "--allocation",
            "ideal",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert (record["kv_kind"], record["kv_bytes_per_token"]) == (kv_kind, per_token)
    assert record["seq_kv_bytes_ideal"] <= record["seq_kv_bytes_full"]
    assert record["params_active"] <= record["params_total"]


def load_model_config(file: str) -> str:
    from kvplan.spec.profiles import profiles_dir

    return (profiles_dir() / "models" / file).read_text()


# --- list-valued moe_layer_freq: MiMo-V2-Flash, MiniMax-M3 --------------------------------

CONFIGS = __import__("pathlib").Path(__file__).parent / "data" / "configs"


def test_mimo_v2_flash_moe_layers_from_the_list_and_its_card_total() -> None:
    # moe_layer_freq = [0] + [1] * 47: layer 0 dense (intermediate 16384), 47 MoE layers of 256
    # experts of 3 x 4096 x 2048. hybrid_layer_pattern: 9 full layers (0, 5, 11, ..., 47; 4 KV
    # heads) and 39 sliding-window ones (window 128, swa_num_key_value_heads 8).
    model = load_model(str(CONFIGS / "XiaomiMiMo--MiMo-V2-Flash_config.json"))
    assert model.params.experts_total == 47 * 256 * 3 * 4096 * 2048
    assert shapes(str(CONFIGS / "XiaomiMiMo--MiMo-V2-Flash_config.json")) == [
        ("full", 9, 4, 192, None),
        ("sliding", 39, 8, 192, 128),
    ]
    # the model card: 309B total, 15B active (kvplan's active keeps the 0.62B input embedding)
    assert model.params.total == pytest.approx(309e9, rel=0.005)
    assert 15e9 < model.params.active - model.params.embedding < 16e9
    assert model.weight_format_name() == "fp8-block128"


def test_minimax_m3_moe_layers_from_the_list() -> None:
    # moe_layer_freq = [0, 0, 0] + [1] * 57 (and first_k_dense_replace 3): 57 MoE layers of 128
    # experts of 3 x 6144 x 3072; the 3 dense layers are dense_intermediate_size 12288 wide.
    model = load_model(str(CONFIGS / "MiniMaxAI--MiniMax-M3_config.json"))
    cfg = json.loads((CONFIGS / "MiniMaxAI--MiniMax-M3_config.json").read_text())
    assert sum(cfg["moe_layer_freq"]) == 57
    assert model.params.experts_total == 57 * 128 * 3 * 6144 * 3072
    assert model.params.routers == 57 * 6144 * 128
    # dense: 3 x 3 x 6144 x 12288; per MoE layer router 6144 x 128 + one shared expert 3 x 6144 x
    # 3072
    assert model.params.dense_mlp == 3 * 3 * 6144 * 12288 + 57 * (6144 * 128 + 3 * 6144 * 3072)


def test_moe_layer_freq_list_must_cover_the_layers() -> None:
    base = {
        "model_type": "mimo_v2_flash",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
    }
    spec = model_spec_from_config({**base, "moe_layer_freq": [0, 1, 0, 1]}, "t", "constructed")
    assert spec.params.experts_total == 2 * 8 * 3 * 256 * 64
    with pytest.raises(
        ValueError, match="moe_layer_freq. has 3 entries but .num_hidden_layers. = 4"
    ):
        model_spec_from_config({**base, "moe_layer_freq": [0, 1, 1]}, "t", "constructed")
    with pytest.raises(ValueError, match="list of 0 / 1"):
        model_spec_from_config({**base, "moe_layer_freq": [0, 2, 1, 1]}, "t", "constructed")
    assert model_spec_from_config(
        {**base, "moe_layer_freq": 2}, "t", "constructed"
    ).params.experts_total == (
        2 * 8 * 3 * 256 * 64
    )  # an integer keeps DeepSeek's every-n-th-layer reading
