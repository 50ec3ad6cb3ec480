"""Reproduce the vLLM paper's memory-waste and batching figures with kvplan's engine.

Setup as in Kwon et al., SOSP'23 (Fig. 2 and Fig. 13a): OPT-13B on one A100-40GB with
about 12 GB of KV cache (11.2 GiB here), ShareGPT-like requests, max_model_len 2048,
block size 16, at a request rate that saturates every allocator (20 req/s, Poisson).
Lengths: kvplan's `sharegpt` workload (lognormal, the paper's means 161.31 / 337.99,
sigmas 1.63 / 1.00 measured on the real ShareGPT stats in ../shared/data).

Run: python benchmarks/vllm_paper_fig2.py [NUM_REQUESTS] [SEED]   (default 4000 0, ~1 min)
"""

from __future__ import annotations

import sys
import time

from kvplan.bench import BenchConfig, SizingConfig, run_matrix
from kvplan.core.scheduler import SchedulerConfig
from kvplan.workload import make_workload

PAPER = {  # token-state share of KV memory (Fig. 2) and mean batched requests (Fig. 13a)
    "contiguous-max": (0.204, 7.00),
    "contiguous-pow2": (0.268, 9.81),
    "contiguous-oracle": (0.382, 13.62),
    "paged": (0.963, 30.42),
}


def main(num_requests: int = 4000, seed: int = 0) -> None:
    requests = make_workload("sharegpt", num_requests, rate=20, seed=seed, max_model_len=2048)
    # the paper's engine, not today's vLLM defaults: kvplan's plain batch limits, datasheet-speed
    # steps
    config = BenchConfig(
        SizingConfig(model="opt-13b", gpu="a100-40gb", kv_cache_gib=11.2, max_model_len=2048),
        scheduler=SchedulerConfig(),
        step_model="roofline",
        seed=seed,
    )
    started = time.perf_counter()
    records = {r.optimization: r.metrics for r in run_matrix(config, requests, list(PAPER))}
    elapsed = time.perf_counter() - started
    print(
        f"OPT-13B / A100-40GB / 11.2 GiB KV, {num_requests} ShareGPT-like requests at 20 req/s, "
        f"seed {seed}"
    )
    print(
        f"{'allocator':<18} {'token states':>13} {'paper':>7} {'of reserved':>12} "
        f"{'mean running':>13} {'paper':>7}"
    )
    for name, (paper_share, paper_running) in PAPER.items():
        m = records[name]
        print(
            f"{name:<18} {m['token_states_share']:>12.1%} {paper_share:>7.1%} "
            f"{m['token_states_of_reserved']:>12.1%}"
            f" {m['running_mean']:>13.2f} {paper_running:>7.2f}"
        )
    ratio = records["paged"]["running_mean"] / records["contiguous-oracle"]["running_mean"]
    print(
        f"paged / contiguous-oracle mean running requests: {ratio:.2f}x (paper "
        f"{30.42 / 13.62:.2f}x, target >= 2)"
    )
    print(f"replayed {num_requests * len(PAPER):,} request runs in {elapsed:.1f} s")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
