"""What `kvplan explain` reads from a startup log beyond its KV figures: each setting with
the words it was read from, the release's rules, the engine arithmetic on the logged KV
memory (hybrid prefix-caching modes and MTP drafters included), and the catalog and GPUs
the logs name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.engines.hybrid_kv import prefix_caching_mamba_mode
from kvplan.logs.explain import explain
from kvplan.spec.attention_group import FullAttentionSpec
from kvplan.spec.resolve import load_gpu, load_model, resolve_model
from kvplan.spec.server_log import parse_server_log

# vLLM 0.24's lines for a Qwen3.6-35B-A3B (10 full-attention + 30 Gated DeltaNet layers) server,
# FP8 KV, prefix caching on: the arithmetic is worked by hand in test_hybrid_kv.py
# (test_rec027...): 299 blocks of 2,096 tokens, 63 + 3 x 2 blocks per 131,072-token request,
# int(299 / 69 x 131,072) = 567,978; without prefix caching 63 + 3 x 1 = 66 -> 593,795.
HYBRID_LOG = """\
(APIServer pid=1) INFO 07-06 22:50:34 [api_utils.py:273] non-default args: {'model': 'Qwen/Qwen3.6-35B-A3B', 'max_model_len': 131072, 'kv_cache_dtype': 'fp8', 'enable_prefix_caching': PREFIX, 'max_num_batched_tokens': 8192, 'max_num_seqs': 1}
(EngineCore pid=107) INFO 07-06 22:50:46 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: model='Qwen/Qwen3.6-35B-A3B', tensor_parallel_size=1
(EngineCore pid=107) INFO 07-06 22:52:09 [gpu_worker.py:508] Available KV cache memory: 5.98 GiB
(EngineCore pid=107) INFO 07-06 22:52:09 [kv_cache_utils.py:2146] GPU KV cache size: 567,978 tokens
"""  # noqa: E501 (log lines as the server printed them)


@pytest.mark.parametrize(("prefix", "tokens"), [("True", 567978), ("False", 593795)])
def test_capacity_from_the_logged_kv_memory_follows_the_mamba_cache_mode(
    prefix: str, tokens: int
) -> None:
    record = explain(HYBRID_LOG.replace("PREFIX", prefix))
    assert record["inputs"]["enable_prefix_caching"] is (prefix == "True")
    assert record["capacity"]["basis"] == "logged KV memory"
    assert record["capacity"]["kvplan"] == tokens


def test_each_setting_names_the_words_it_was_read_from() -> None:
    record = explain(HYBRID_LOG.replace("PREFIX", "True"))
    assert record["sources"]["tensor_parallel_size"] == "tensor_parallel_size=1"
    assert record["sources"]["max_model_len"] == "non-default args"
    assert record["sources"]["version"] == "Initializing a V1 LLM engine (v0.24.0)"


def test_an_old_release_gets_its_own_rules() -> None:
    """A v0.8.5 banner: utilization 0.90 and CUDA graphs outside the budget, said so."""
    log = (
        "INFO 05-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5\n"
        "INFO 05-01 10:00:01 [api_server.py:1044] args: Namespace(model='meta-llama/"
        "Llama-3.1-8B-Instruct', max_model_len=None, tensor_parallel_size=1)\n"
        "INFO 05-01 10:01:00 [kv_cache_utils.py:634] GPU KV cache size: 442,864 tokens\n"
    )
    record = explain(log, gpu="h100-80gb")
    assert record["inputs"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert record["inputs"]["max_model_len"] is None  # Namespace's None is not a figure
    assert record["assumed"]["gpu_memory_utilization"] == 0.9
    assert record["prediction"]["cuda_graph_gib"] == 0.0
    assert "v0.8.5 rules" in record["prediction"]["engine_model"]


def test_a_speculative_drafter_is_read_from_the_arguments() -> None:
    log = parse_server_log(
        "non-default args: {'model': 'x', 'enable_prefix_caching': True, "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}\n"
        "GPU KV cache size: 1,000 tokens\n"
    )
    assert (log.num_speculative_tokens, log.speculative_method) == (3, "mtp")
    assert log.enable_prefix_caching is True
    flags = parse_server_log(
        "vllm serve m --no-enable-prefix-caching\nGPU KV cache size: 10 tokens"
    )
    assert flags.enable_prefix_caching is False


def test_prefix_caching_mode_by_mixer_and_release() -> None:
    """vLLM's model-config hook: Mamba-2 layers cache every block ("all"), Gated DeltaNet only
    the aligned last one ("align"); no modes before 0.15."""
    deltanet = load_model("qwen3.5-27b")
    assert {g.mixer for g in deltanet.groups if g.kind == "state"} == {"gated-deltanet"}
    assert prefix_caching_mamba_mode(deltanet, (0, 24, 0), True) == "align"
    assert prefix_caching_mamba_mode(deltanet, (0, 24, 0), False) == "none"
    assert prefix_caching_mamba_mode(deltanet, (0, 14, 0), True) == "none"
    mamba2 = load_model("nemotron-3-nano-30b-a3b")
    assert prefix_caching_mamba_mode(mamba2, None, True) == "all"
    dense = load_model("llama-3.1-8b")
    assert prefix_caching_mamba_mode(dense, None, True) == "none"
    assert FullAttentionSpec(1, 1, 64).mixer == ""


def test_the_mtp_head_is_counted_from_the_config() -> None:
    assert load_model("qwen3.5-27b").mtp_layers == 1  # mtp_num_hidden_layers
    assert load_model("deepseek-v3").mtp_layers == 1  # num_nextn_predict_layers
    assert load_model("llama-3.1-8b").mtp_layers == 0


def test_a_modelopt_export_reads_its_quantization_sidecar(tmp_path: Path) -> None:
    """Where config.json has no quantization_config, hf_quant_config.json is read as one, as
    vLLM reads it; a block naming only its producer is ModelOpt's too."""
    config = json.loads(_catalog_file("llama-3.1-8b").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}})
    )
    assert resolve_model(str(tmp_path)).spec.weight_dtype == "nvfp4"
    config["quantization_config"] = {"producer": {"name": "modelopt"}, "quant_algo": "FP8"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    # a path other than the folder's: the resolver caches each name it resolved
    assert load_model(str(tmp_path / "config.json")).weight_dtype == "fp8"


def test_the_catalogs_modelopt_exports_are_sized_in_their_format() -> None:
    assert load_model("nvidia/DeepSeek-V3.2-NVFP4").weight_dtype == "nvfp4"
    assert load_model("deepseek-ai/DeepSeek-V3.2").weight_dtype == "fp8"  # DeepSeek's own FP8
    assert load_model("nvidia/Llama-3.1-70B-Instruct-FP8").weight_dtype == "fp8"


def test_gb10_is_known_by_the_names_logs_give_it() -> None:
    for name in ("NVIDIA GB10", "DGX Spark", "gb10"):
        gpu = load_gpu(name)
        assert gpu.name == "gb10"
        assert gpu.usable_memory_bytes / 2**30 == pytest.approx(121.69)


def _catalog_file(name: str) -> Path:
    from kvplan.spec.profiles import model_profiles

    return model_profiles()[name].path


def test_all_mode_aligns_the_block_to_the_scan_chunk() -> None:
    """vLLM's hybrid block size: the smallest multiple of 16 tokens whose attention page holds
    a Mamba-2 state, or in "all" mode of lcm(chunk_size, 16) (Nemotron-3-Nano: 128)."""
    from kvplan.engines.hybrid_kv import state_block_alignment, vllm_kv_cache
    from kvplan.spec import parse_kv_format

    model = load_model("nemotron-3-nano-30b-a3b")
    assert (model.state_chunk_size, state_block_alignment(model, "all")) == (128, 128)
    assert state_block_alignment(model, "align") == 16
    fmt = parse_kv_format("auto", model)

    def block(mode: str) -> int:
        alignment = state_block_alignment(model, mode)
        cache = vllm_kv_cache(
            model, fmt, 1, 2**34, 32768, mamba_cache_mode=mode, mamba_alignment=alignment
        )
        return cache.block_size

    assert block("none") == 2096  # 16 x 131
    assert block("all") == 2176  # 128 x 17: the first multiple of 128 at or above 2,096


def test_kimi_delta_attention_is_refused_not_misread() -> None:
    """A kimi_linear config's KDA layers keep a state kvplan has no shape for: one line, not
    an all-MLA model with the state missing."""
    from kvplan.spec.hf_config import model_spec_from_config

    config = {
        "model_type": "kimi_linear",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "vocab_size": 128,
        "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4]},
    }
    with pytest.raises(ValueError, match="Kimi Delta Attention"):
        model_spec_from_config(config, "tiny-kimi-linear", "test")
