"""How long `kvplan plan` takes over 4 GPU types x 4 TP sizes x 2 KV dtypes (32 candidates),
and how many simulations it runs: the issue's target is under 60 s on a 2-core machine.

The question is the README's: Llama-3.1-70B at 10 req/s of ShareGPT, TTFT p90 under 2 s, on
H100 / H200 / A100-80GB / L40S at illustrative prices (the plan ranks by them; they are not
current quotes). Printed: wall seconds, simulations, the winner, and the same with --disagg.

Run: python benchmarks/plan_speed.py   (about a minute)
"""

from __future__ import annotations

import os
import time

from kvplan.bench.workloads import WorkloadSpec
from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.deploy_plan import make_plan
from kvplan.deploy.slo import parse_slo
from kvplan.execution.executors import LocalExecutor

PRICES = {
    "h100-80gb": 2.49,
    "h200": 3.50,
    "a100-80gb": 1.60,
    "l40s": 0.86,
}  # illustrative $/GPU-hour
TARGET_S = 60.0


def main() -> None:
    demand = Demand(
        model="llama-3.1-70b",
        rate=10.0,
        slo=parse_slo("ttft_p90=2s"),
        workload=WorkloadSpec(kind="sharegpt"),
    )
    candidates = [
        Candidate(gpu, tp, dtype)
        for gpu in sorted(PRICES)
        for tp in (1, 2, 4, 8)
        for dtype in ("auto", "fp8")
    ]
    executor = LocalExecutor(os.cpu_count() or 1)
    for disagg in (False, True):
        start = time.perf_counter()
        plan = make_plan(demand, candidates, PRICES, executor, disagg=disagg)
        wall = time.perf_counter() - start
        winner = plan.winner
        verdict = "met" if wall < TARGET_S else "missed"
        print(
            f"{len(candidates)} candidates{' + disaggregated pools' if disagg else ''}: "
            f"{wall:.1f} s wall on "
            f"{executor.workers} worker(s), {plan.simulations} simulations (target < {TARGET_S:g} "
            f"s: {verdict}); "
            f"winner {winner.layout if winner else None}, {winner.gpus if winner else '-'} GPUs, "
            f"${winner.usd_per_hour if winner else 0:.2f}/h"
        )


if __name__ == "__main__":
    main()
