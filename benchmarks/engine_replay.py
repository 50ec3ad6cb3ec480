"""Time the simulated paged engine replaying 10,000 ShareGPT-like requests at saturation.

Target: a full replay of 10,000 requests through the paged engine in under 10 s of wall
time, for each of two setups:

  (i)  the vLLM paper's setup (Kwon et al., SOSP'23): OPT-13B on one A100-40GB with 11.2 GiB
       of KV cache, max_model_len 2048;
  (ii) `kvplan bench`'s default: Llama-3.1-8B on one L4, KV budget from the capacity plan
       (the engine's default gpu_memory_utilization), max_model_len 4096.

Requests: kvplan's `sharegpt` workload (seed 0), all arriving at t = 0 ("burst"), so the
engine is saturated from the first step. Scheduler pinned to max_num_seqs 256,
max_num_batched_tokens 8192, chunked prefill, recompute preemption, block size 16; steps
timed by the datasheet roofline (`step_model="roofline"`), the model the bound below uses.

There is no timed peer: as the comparison figure the script prints an analytic lower bound
on the *modeled* makespan from the same roofline (weights read once per step, every
computed token's FLOPs, the least KV each token must read, and the fewest steps the KV
pool, max_num_seqs and the token budget allow), next to the engine's modeled makespan.

Run: python benchmarks/engine_replay.py   (about 10-15 s; exits 1 if a replay misses the target)
"""

from __future__ import annotations

import math
import sys
import time

from kvplan.bench import SizingConfig, parse_optimization
from kvplan.core.engine import Engine
from kvplan.core.scheduler import SchedulerConfig
from kvplan.sim.factory import SimulatedEngineFactory
from kvplan.workload import make_workload

NUM_REQUESTS = 10_000
TARGET_S = 10.0
SETUPS = [
    (
        "OPT-13B / A100-40GB / 11.2 GiB KV (vLLM paper)",
        SizingConfig(model="opt-13b", gpu="a100-40gb", kv_cache_gib=11.2, max_model_len=2048),
    ),
    (
        "Llama-3.1-8B / L4 (kvplan bench default)",
        SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=4096),
    ),
]


def makespan_lower_bound(engine: Engine, finished: list) -> float:
    """Seconds no schedule of these requests can beat under the engine's roofline model.

    Every step costs max(bytes / bandwidth, FLOPs / peak) >= either sum taken alone.
    Request i with n = prompt + output - 1 computed tokens contributes n(n+1)/2 attention
    pairs whatever the chunking, and at least prompt + sum(t for t in prompt+1..n) KV token
    reads (prefill in one step, then one token per step); holding t slots while computing
    token t, it needs that many slot-steps of the pool.
    """
    runner, roof = engine.runner, engine.runner.roofline
    config = engine.scheduler.config
    tokens = pairs = reads = max_steps_one = sampled = 0
    for seq in finished:
        p, o = seq.request.prompt_len, seq.request.output_len
        n = p + o - 1
        tokens += n
        pairs += n * (n + 1) // 2
        reads += p + (o - 1) * (p + 1 + n) // 2
        max_steps_one = max(max_steps_one, o)
        sampled += o
    steps = max(
        max_steps_one,
        math.ceil(tokens / config.max_num_batched_tokens),
        math.ceil(sampled / config.max_num_seqs),
        math.ceil(reads / engine.allocator.capacity_slots),
    )
    memory = (
        steps * roof.weight_bytes_read(1) + reads * runner.read_bytes_per_token
    ) / roof.bandwidth
    per_pair = min(
        runner.decode_flops_per_pair, runner.prefill_flops_per_pair
    )  # MLA: decode and prefill differ
    compute = (roof.linear_flops(tokens) + pairs * per_pair) / roof.peak_flops
    return max(memory, compute)


def main() -> int:
    failed = False
    for label, config in SETUPS:
        requests = make_workload(
            "sharegpt",
            NUM_REQUESTS,
            rate=None,
            arrival="burst",
            seed=0,
            max_model_len=config.max_model_len,
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        engine, sizing = SimulatedEngineFactory(
            config, SchedulerConfig(), step_model="roofline"
        ).build(parse_optimization("paged"))
        result = engine.run(requests)
        wall = time.perf_counter() - started
        # CPU time is what the replay itself costs; wall time also counts waiting for a core on a
        # shared machine, so the two differ when other work runs beside it.
        cpu = time.process_time() - cpu_started
        m = result.metrics
        steps = m["engine_steps"]
        verdict = "PASS" if wall < TARGET_S else "FAIL"
        failed |= verdict == "FAIL"
        bound = makespan_lower_bound(engine, result.finished)
        print(
            f"{label}: {sizing.capacity_slots:,} KV slots, max_model_len {sizing.max_model_len}, "
            f"{NUM_REQUESTS:,} ShareGPT-like requests, burst arrival"
        )
        print(
            f"  replay: {wall:.2f} s wall ({cpu:.2f} s CPU), {steps:,} engine steps, "
            f"{steps / wall:,.0f} steps/s, "
            f"{NUM_REQUESTS / wall:,.0f} requests/s ({m['requests_finished']:,} finished, "
            f"{m['requests_rejected']:,} rejected, {m['preemptions']:,} preemptions)"
        )
        print(
            f"  target {TARGET_S:.0f} s: {wall:.2f} s = {wall / TARGET_S:.2f}x of budget, {verdict}"
        )
        print(
            f"  peer (analytic roofline lower bound on modeled makespan): {bound:,.1f} s; "
            f"engine modeled makespan {m['makespan_s']:,.1f} s = {m['makespan_s'] / bound:.2f}x "
            "the bound"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
