"""kvplan real mode against transformers `generate()` on the same model and workload, CPU.

Workload: 64 requests, prompt 32..256 and output 16..256 tokens (uniform, seed 0), all
present at t = 0, stories260K's real weights in fp32. kvplan runs them through its
continuous-batching scheduler with a paged KV pool; transformers runs them as one static
batch (left-padded prompts, every sequence decoding until the longest output, its default
dynamic KV cache). Both count only each request's own output tokens. Each side first runs
a warm-up (8 short requests) that is not timed, then the timed run. The two sides alternate
`--repeat` times and each side's best run is compared: on a shared machine other
processes only ever slow a run down, so the best run is the least disturbed one.

KV bytes, measured on both sides: kvplan's peak is its allocator's peak block count times
the bytes one block really occupies in the allocated pool tensors; transformers' is the
bytes of the K/V tensors its cache holds when generate() returns (the dynamic cache only
grows, so that is its peak).

Printed: output tokens/s (every run, the best by wall time and by process CPU time) and
peak KV bytes for each, and kvplan / transformers ratios.
Run: python benchmarks/real_vs_transformers.py [MODEL_DIR] [--threads 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from kvplan.kernels.quant import allocate_kv_cache

from kvplan.core.engine import Engine
from kvplan.core.kv import make_allocator
from kvplan.core.scheduler import SchedulerConfig
from kvplan.real.model import load_causal_lm
from kvplan.real.runner import RealRunner
from kvplan.samples import sample_path
from kvplan.workload.request import Request

DEFAULT_MODEL = sample_path("stories260k")  # shipped inside kvplan (kvplan samples)
NUM, BLOCK = 64, 16


def workload(vocab: int) -> list[Request]:
    rng = np.random.default_rng(0)
    prompts = rng.integers(32, 257, NUM)
    outputs = rng.integers(16, 257, NUM)
    return [
        Request(
            i, 0.0, int(p), int(o), prompt_tokens=tuple(rng.integers(3, vocab, int(p)).tolist())
        )
        for i, (p, o) in enumerate(zip(prompts, outputs))
    ]


def warm_up(requests: list[Request]) -> list[Request]:
    return [
        Request(r.request_id, 0.0, r.prompt_len, 8, prompt_tokens=r.prompt_tokens)
        for r in requests[:8]
    ]


class Clock:
    """Wall and process CPU time since creation. With one thread CPU time equals wall time on
    an idle machine; on a shared one it leaves out the time other processes held the core."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def run_kvplan(model, requests: list[Request]) -> tuple[tuple[float, float], int, int]:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    blocks = 4096
    pool = [
        allocate_kv_cache(
            "fp32", blocks, BLOCK, config.num_key_value_heads, head_dim, dtype=torch.float32
        )
        for _ in range(config.num_hidden_layers)
    ]
    runner = RealRunner(model, pool, BLOCK, config.vocab_size, "cpu", backend="torch")
    engine = Engine(
        make_allocator("paged", blocks * BLOCK, BLOCK, 512, watermark=0.0),
        runner,
        SchedulerConfig(max_num_seqs=NUM),
        512,
    )
    Engine(
        make_allocator("paged", blocks * BLOCK, BLOCK, 512, watermark=0.0),
        runner,
        SchedulerConfig(max_num_seqs=NUM),
        512,
    ).run(warm_up(requests))
    runner.tokens.clear()
    started = Clock()
    result = engine.run(requests)
    elapsed = started.elapsed()
    block_bytes = runner.kv_bytes // blocks
    peak = round(result.metrics["kv_cache_usage_peak"] * blocks) * block_bytes
    return elapsed, peak, runner.kv_bytes


def run_transformers(model, requests: list[Request]) -> tuple[tuple[float, float], int]:
    def batch(reqs: list[Request]) -> tuple[torch.Tensor, torch.Tensor, int]:
        longest_prompt = max(r.prompt_len for r in reqs)
        ids = torch.zeros((len(reqs), longest_prompt), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, request in enumerate(reqs):  # left padding, as decoder-only generation needs
            ids[row, longest_prompt - request.prompt_len :] = torch.tensor(request.prompt_tokens)
            mask[row, longest_prompt - request.prompt_len :] = 1
        return ids, mask, max(r.output_len for r in reqs)

    def generate(reqs: list[Request]):
        ids, mask, longest_output = batch(reqs)
        with torch.inference_mode():
            return model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=longest_output,
                min_new_tokens=longest_output,
                do_sample=False,
                pad_token_id=0,
                return_dict_in_generate=True,
            )

    generate(warm_up(requests))
    started = Clock()
    out = generate(requests)
    elapsed = started.elapsed()
    return elapsed, cache_bytes(getattr(out, "cache", None) or out.past_key_values)


def cache_bytes(cache) -> int:
    """Bytes of every K/V tensor a transformers cache holds (its layers' keys and values)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    if not total:
        raise RuntimeError("could not measure the transformers cache: no layers with keys/values")
    return total


def main(model_dir: Path = DEFAULT_MODEL, threads: int = 1, repeat: int = 3) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    kv_model, _ = load_causal_lm("model", str(model_dir), None, "fp32", "cpu")
    hf_model, _ = load_causal_lm("model", str(model_dir), None, "fp32", "cpu")
    requests = workload(kv_model.config.vocab_size)
    useful = sum(r.output_len for r in requests)
    kv_runs, hf_runs = [], []  # (wall, cpu) seconds per run
    for _ in range(repeat):  # alternate, so a busy spell on the machine hits both sides alike
        kv_s, kv_peak, kv_pool = run_kvplan(kv_model, requests)
        hf_s, hf_peak = run_transformers(hf_model, requests)
        kv_runs.append(kv_s)
        hf_runs.append(hf_s)
    name = model_dir.parent.name if model_dir.name == "hf" else model_dir.name

    def rate(runs: list[tuple[float, float]], clock: int) -> float:
        return useful / min(run[clock] for run in runs)

    def runs(times: list[tuple[float, float]]) -> str:
        walls = ", ".join(f"{useful / wall:,.0f}" for wall, _ in times)
        return (
            f"best {rate(times, 0):,.0f} output tok/s (runs: {walls}; by CPU time "
            f"{rate(times, 1):,.0f})"
        )

    print(
        f"{name}: {NUM} requests, prompts 32..256, outputs 16..256 ({useful:,} output tokens), "
        "CPU, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), best of {repeat}"
    )
    print(
        f"  kvplan real mode (continuous batching, paged KV): {runs(kv_runs)}, "
        f"peak KV {kv_peak / 2**20:.2f} MiB (pool preallocated: {kv_pool / 2**20:.1f} MiB)"
    )
    print(
        f"  transformers generate (static batch, dynamic cache): {runs(hf_runs)}, "
        f"peak KV {hf_peak / 2**20:.2f} MiB"
    )
    print(
        f"  kvplan / transformers: tokens/s {rate(kv_runs, 0) / rate(hf_runs, 0):.2f}x (best vs "
        "best; "
        f"by CPU time {rate(kv_runs, 1) / rate(hf_runs, 1):.2f}x), peak KV bytes "
        f"{kv_peak / hf_peak:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads for both sides (default 1)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed runs per side, alternating (default 3)"
    )
    args = parser.parse_args()
    main(args.model_dir, args.threads, args.repeat)
