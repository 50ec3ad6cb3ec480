"""The scenario file tests/vllm_driver.py runs through vLLM: its keys and the check that a
typo fails here rather than inside vLLM. Plain Python (no vLLM, no torch), so the driver
reads it before it imports either."""

from __future__ import annotations

import json
from typing import Any

INT_KEYS = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens")
SCEN_KEYS = {*INT_KEYS, "max_model_len", "enable_prefix_caching", "model", "requests"}
# A scenario names its model by "model" (the tiny Llama's sizes) or by "model_config" (an HF
# config.json as a dict, run with vLLM's dummy weights) with "seed"; one of the two.
CONFIG_KEYS = {"model_config", "seed"}
# Optional: VLLM_CPU_KVCACHE_SPACE (whole GiB) for --engine real, num_gpu_blocks then null,
# so that vLLM sizes the pool from that memory as a CPU server does.
SPACE_KEY = "kv_cache_space_gib"
# Optional: the share of the machine's memory vLLM's CPU worker requests (its
# --gpu-memory-utilization, default 0.92), which must be free when the engine starts; the
# pool is fixed by num_gpu_blocks either way, so a lower share only lets a run start beside
# other processes' memory.
MEMORY_KEY = "gpu_memory_utilization"
MODEL_KEYS = {"hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim"}
MODEL_KEYS |= {"vocab_size", "seed"}
REQ_KEYS = {"id", "prompt_token_ids", "max_tokens"}


class DriverError(Exception):
    """A malformed scenario or an unexpected engine state: reported in one line."""


def need(ok: bool, msg: str) -> None:
    if not ok:
        raise DriverError(msg)


def is_int(v: Any, low: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def load_scenario(path: str) -> dict[str, Any]:
    """Parse and check the scenario, so that a typo fails here rather than inside vLLM."""
    try:
        with open(path) as f:
            scen = json.load(f)
    except (OSError, ValueError) as e:
        raise DriverError(f"cannot read scenario {path}: {e}") from e
    need(isinstance(scen, dict), "scenario must be a JSON object")
    given_config = "model_config" in scen
    required = (SCEN_KEYS - {"model"}) | CONFIG_KEYS if given_config else SCEN_KEYS
    missing = sorted(required - scen.keys())
    unknown = sorted(scen.keys() - required - {SPACE_KEY, MEMORY_KEY})
    need(not missing and not unknown, f"scenario keys: missing {missing}, unknown {unknown}")
    space = scen.get(SPACE_KEY)
    need(space is None or is_int(space), f"scenario.{SPACE_KEY} must be a positive integer")
    share = scen.get(MEMORY_KEY, 0.5)
    ok = isinstance(share, float | int) and not isinstance(share, bool) and 0 < share <= 1
    need(ok, f"scenario.{MEMORY_KEY} must be a number in (0, 1]")
    for k in (*INT_KEYS, "max_model_len"):
        if k == "num_gpu_blocks" and space is not None:
            need(scen[k] is None, f"num_gpu_blocks must be null with {SPACE_KEY}")
            continue
        need(is_int(scen[k]), f"scenario.{k} must be a positive integer")
    need(isinstance(scen["enable_prefix_caching"], bool), "enable_prefix_caching: true/false")
    if given_config:
        cfg = scen["model_config"]
        need(isinstance(cfg, dict), "model_config must be an HF config.json object")
        need(is_int(cfg.get("vocab_size")), "model_config.vocab_size must be a positive integer")
        arch = cfg.get("architectures")
        need(isinstance(arch, list) and len(arch) == 1, "model_config.architectures: one name")
        need(is_int(scen["seed"], 0), "seed must be an integer >= 0")
        vocab = cfg["vocab_size"]
    else:
        m = scen["model"]
        keys = sorted(MODEL_KEYS)
        need(isinstance(m, dict) and m.keys() == MODEL_KEYS, f"model keys must be {keys}")
        for k, v in m.items():
            need(is_int(v, 0 if k == "seed" else 1), f"model.{k} must be a positive integer")
        need(m["num_heads"] % m["num_kv_heads"] == 0, "model.num_heads % num_kv_heads != 0")
        vocab = m["vocab_size"]
    reqs = scen["requests"]
    need(isinstance(reqs, list) and len(reqs) > 0, "requests must be a non-empty list")
    ids: set[int] = set()
    for i, r in enumerate(reqs):
        need(isinstance(r, dict) and r.keys() == REQ_KEYS, f"requests[{i}] keys must be {REQ_KEYS}")
        need(is_int(r["id"], 0) and r["id"] not in ids, f"requests[{i}].id: unique int >= 0")
        ids.add(r["id"])
        toks = r["prompt_token_ids"]
        ok = isinstance(toks, list) and len(toks) > 0
        ok = ok and all(is_int(t, 0) and t < vocab for t in toks)
        need(ok, f"requests[{i}].prompt_token_ids: non-empty list of ints in [0, vocab_size)")
        need(is_int(r["max_tokens"]), f"requests[{i}].max_tokens must be a positive integer")
    return scen


def model_seed(scen: dict[str, Any]) -> int:
    return scen["seed"] if "model_config" in scen else scen["model"]["seed"]


def model_dtype(scen: dict[str, Any]) -> str:
    """The given config's own dtype (so its weights are what kvplan reads from the same
    config), else "auto": the tiny model is stored as the CPU platform prefers."""
    cfg = scen.get("model_config", {})
    return str(cfg.get("torch_dtype") or cfg.get("dtype") or "auto")


def ext_id(request_id: str) -> int:
    """Scenario id of an engine request id: LLMEngine appends "-<8 random chars>"."""
    return int(request_id.rsplit("-", 1)[0])
