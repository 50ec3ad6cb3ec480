"""`kvplan plan`: SLO parsing, the per-replica search against hand-derived roofline figures,
monotonicity of the answer, the cluster check, and the command's output and errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hardening_helpers import invoke

from kvplan.bench.workloads import WorkloadSpec
from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.deploy_plan import make_plan
from kvplan.deploy.replica_search import fewest_replicas, probe
from kvplan.deploy.slo import parse_slo

# Llama-3.1-8B: 8,030,261,248 parameters in bf16; H100 SXM: 3.35 TB/s (datasheet); KV per
# token: 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes.
WEIGHT_BYTES = 8_030_261_248 * 2
H100_BANDWIDTH = 3.35e12
KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2


def _decode_demand(slo: str, **overrides) -> Demand:
    """Fixed 16-token prompts and 256 output tokens, at most 8 sequences a step: decode-bound."""
    settings = dict(
        model="llama-3.1-8b",
        rate=20.0,
        slo=parse_slo(slo),
        optimization="paged",
        num_requests=64,
        workload=WorkloadSpec(kind="random", input_len=16, output_len=256),
        step_model="roofline",
    )
    return Demand(**{**settings, **overrides})


def _cheap_demand(slo: str, **overrides) -> Demand:
    """The decode-bound demand at a quarter of the work (32 requests of 64 output tokens): the
    plan's invariants hold at any size, and at this one they run in the default suite."""
    settings = dict(
        num_requests=32, workload=WorkloadSpec(kind="random", input_len=16, output_len=64)
    )
    return _decode_demand(slo, **{**settings, **overrides})


def test_slo_reads_units_and_names_bad_input() -> None:
    slo = parse_slo("ttft_p90=2s, tpot_p99=60ms,e2e_p50=30")
    assert [(t.metric, t.limit_s) for t in slo.targets] == [
        ("ttft_s_p90", 2.0),
        ("tpot_s_p99", 0.06),
        ("e2e_s_p50", 30.0),
    ]
    assert slo.misses({"ttft_s_p90": 2.5, "tpot_s_p99": 0.05, "e2e_s_p50": 1.0}) == [
        "ttft_p90 2.5 s > 2 s"
    ]
    assert slo.misses(
        {"ttft_s_p90": None, "tpot_s_p99": 0.05, "e2e_s_p50": 1.0}
    )  # unmeasured is a miss
    for bad in ("ttft=2s", "ttft_p95=2s", "ttft_p90=-1s", "ttft_p90=2s,ttft_p90=3s"):
        with pytest.raises(ValueError, match="^slo"):
            parse_slo(bad)


def test_saturation_and_lone_tpot_match_the_roofline_by_hand() -> None:
    """Decode step of b sequences = (weights + their KV) / bandwidth. A burst of 64 requests in
    batches of 8 runs 8 x 256 such steps at a mean context of 16 + 128 tokens."""
    step_8 = (WEIGHT_BYTES + 8 * 144 * KV_BYTES_PER_TOKEN) / H100_BANDWIDTH
    burst_rate = 64 / (8 * 256 * step_8)  # 6.458 req/s
    result = probe(_decode_demand("tpot_p90=1s"), Candidate("h100-80gb", 1, "auto", 8))
    assert result.status == "ok"
    assert result.saturation_rps == pytest.approx(burst_rate, rel=2e-3)
    # alone, one sequence a step at a context of up to 271 tokens: TPOT ~ weights / bandwidth
    lone_tpot = (WEIGHT_BYTES + 144 * KV_BYTES_PER_TOKEN) / H100_BANDWIDTH  # 4.80 ms
    tight = probe(
        _decode_demand(f"tpot_p90={0.97 * lone_tpot * 1000:.3f}ms"),
        Candidate("h100-80gb", 1, "auto", 8),
    )
    assert tight.status == "latency" and "no queue" in tight.reason
    loose = probe(
        _decode_demand(f"tpot_p90={1.03 * lone_tpot * 1000:.3f}ms"),
        Candidate("h100-80gb", 1, "auto", 1),
    )
    assert loose.status == "ok"  # one sequence a step: never batched, so TPOT stays the lone one


def test_replica_count_is_derived_by_hand() -> None:
    """Eight sequences a step serve at most mu = 8 / (256 x step_8) = 6.458 req/s, so 20 req/s
    needs at least ceil(20 / 6.458) = 4 replicas. Four suffice: each then gets 5 req/s, a load
    of 0.77 on 8 servers of 1.24 s; Erlang C for M/M/8 (exponential service, which waits
    longer than this fixed one) gives P(wait) = 0.40 and P(wait > 1.9 s) = 0.40 x
    exp(-(8 x 0.807 - 5) x 1.9) = 0.025, under the 10% a p90 TTFT of 2 s allows."""
    step_8 = (WEIGHT_BYTES + 8 * 144 * KV_BYTES_PER_TOKEN) / H100_BANDWIDTH
    service_rate = 8 / (256 * step_8)
    per_server = 1 / (256 * step_8)
    load = 5.0 / service_rate
    erlang_terms = [(8 * load) ** k / math.factorial(k) for k in range(8)]
    top = (8 * load) ** 8 / math.factorial(8) / (1 - load)
    waits = top / (sum(erlang_terms) + top)
    assert waits == pytest.approx(0.40, abs=0.01)
    assert waits * math.exp(-(8 * per_server - 5.0) * 1.9) < 0.1
    demand = _decode_demand("ttft_p90=2s", rate=20.0)
    result = fewest_replicas(demand, probe(demand, Candidate("h100-80gb", 1, "auto", 8)))
    assert result.replicas == math.ceil(20.0 / service_rate) == 4
    assert 5.0 <= result.capacity_rps <= service_rate and result.capacity_upper_rps <= 20.0 / 3


def test_pruning_never_changes_the_answer() -> None:
    """Branch and bound stops a candidate that cannot beat the best found, after one trial; the
    plan is the one searching every candidate to the end gives."""
    demand = _cheap_demand("ttft_p90=1s", rate=20.0)
    candidates = [
        Candidate("h100-80gb", 1, "auto", 8),
        Candidate("h100-80gb", 1, "auto", 4),
        Candidate("a100-80gb", 1, "auto", 8),
    ]
    prices = {"h100-80gb": 2.0, "a100-80gb": 1.5}
    plan = make_plan(demand, candidates, prices)
    full = {c: fewest_replicas(demand, probe(demand, c)).replicas for c in candidates}
    cost = {c: n * prices[c.gpu] for c, n in full.items()}
    best = min(cost, key=lambda c: (cost[c], c.tp))
    assert plan.winner is not None and plan.winner.capacity.candidate == best
    pruned = [row for row in plan.rows if row.capacity.status == "cost"]
    for row in pruned:  # pruned only when its full search costs more than the winner
        assert cost[row.capacity.candidate] > plan.winner.usd_per_hour - 1e-9
        assert row.capacity.cost_floor <= cost[row.capacity.candidate] + 1e-9


def test_replicas_are_the_division_then_what_the_cluster_needs() -> None:
    demand = _cheap_demand("ttft_p90=2s", rate=12.0)
    plan = make_plan(demand, [Candidate("h100-80gb", 1, "auto", 8)], {"h100-80gb": 2.0})
    row = plan.rows[0]
    n = row.division_replicas  # the fewest: one replica meets at 12 / n and misses at 12 / (n - 1)
    assert row.capacity.capacity_rps >= 12.0 / n and (
        n == 1 or row.capacity.capacity_upper_rps <= 12.0 / (n - 1)
    )
    assert row.verified and plan.winner is row
    assert row.usd_per_hour == pytest.approx(2.0 * row.gpus)
    assert demand.slo.meets(row.cluster_metrics)


def test_a_higher_rate_or_a_tighter_slo_never_needs_fewer_gpus() -> None:
    # four plans at the cheap demand's size: about 5 s on 2 cores
    candidates = [Candidate("h100-80gb", 1, "auto", 8)]

    def gpus(rate: float, slo: str) -> int:
        winner = make_plan(_cheap_demand(slo, rate=rate), candidates, {"h100-80gb": 2.0}).winner
        assert winner is not None
        return winner.gpus

    by_rate = [gpus(rate, "ttft_p90=1s") for rate in (2.0, 40.0)]
    assert by_rate == sorted(by_rate) and by_rate[-1] > by_rate[0]
    assert gpus(20.0, "ttft_p90=0.3s,tpot_p90=6ms") >= gpus(20.0, "ttft_p90=1s")


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_prefix_workloads_are_verified_behind_the_kv_aware_router() -> None:
    """The cluster check disagrees with the division and the plan follows the cluster: on RAG
    traffic (shared documents) at 36 req/s, nine replicas by division (one replica misses at
    36 / 8 req/s), seven behind the kv-aware router, which pools their queues (a request waits
    for the first of seven, not for its own one)."""
    demand = Demand(
        model="llama-3.1-8b",
        rate=36.0,
        slo=parse_slo("ttft_p90=0.5s"),
        num_requests=60,
        workload=WorkloadSpec(kind="rag"),
        step_model="roofline",
    )
    plan = make_plan(demand, [Candidate("l4", 1)], {})
    row = plan.rows[0]
    assert plan.router == "kv-aware" and row.verified and plan.winner is row
    assert row.replicas < row.division_replicas and row.gpus == row.replicas
    assert (
        row.capacity.capacity_upper_rps <= 36.0 / row.replicas
    )  # one replica alone misses at that share
    assert (
        row.cluster_metrics.get("prefix_hit_rate", 0) > 0.3
    )  # shared documents are served from cache
    assert demand.slo.meets(row.cluster_metrics)


def test_cli_plan_prints_a_ranked_table_and_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    prices = tmp_path / "prices.toml"
    prices.write_text('[usd_per_gpu_hour]\n"NVIDIA L4" = 0.8\na100-80gb = 1.6\n')
    out = tmp_path / "plan"
    args = [
        "plan",
        "llama-3.1-8b",
        "--rate",
        "4",
        "--prices",
        str(prices),
        "--tp",
        "1,2",
        "--step-model",
        "roofline",
        "--slo",
        "tpot_p90=200ms",
        "--num-requests",
        "40",
        "--workers",
        "1",
        "--out",
        str(out),
    ]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert "winner:" in result.output and "simulations" in result.output
    data = json.loads((out / "plan.json").read_text())
    assert data["schema"] == "kvplan.plan/1" and data["winner"] == 0
    assert {row["gpu"] for row in data["candidates"]} == {"l4", "a100-80gb"} and len(
        data["candidates"]
    ) == 4
    first = data["candidates"][0]
    assert (
        first["status"] == "ok"
        and first["verified"]
        and first["usd_per_hour"]
        == pytest.approx(first["gpus"] * {"l4": 0.8, "a100-80gb": 1.6}[first["gpu"]])
    )
    costs = [row["usd_per_hour"] for row in data["candidates"] if row["status"] == "ok"]
    assert costs == sorted(costs)
    records = [json.loads(line) for line in (out / "plan.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["plan"] * 4 and sum(
        r["metrics"]["winner"] for r in records
    ) == 1
    report = invoke(["report", str(out / "plan.jsonl"), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report" / "plan_pareto.png").is_file()


def test_the_pareto_front_keeps_only_unbeaten_points() -> None:
    from kvplan.report.plan_charts import pareto_front

    points = [(10.0, 5.0), (4.0, 3.0), (6.0, 2.0), (4.0, 1.0), (12.0, 5.0), (20.0, 9.0)]
    assert pareto_front(points) == [(4.0, 3.0), (10.0, 5.0), (20.0, 9.0)]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rate", "0"], "--rate"),
        (["--rate", "4", "--slo", "ttft=2"], "--slo"),
        (["--rate", "4"], "--gpu"),
        (["--rate", "4", "--gpus", "l4", "--tp", "0"], "--tp"),
        (["--rate", "4", "--gpus", "no-such-gpu"], "no-such-gpu"),
        (["--rate", "4", "--gpus", "l4", "--kv-dtype", "bogus"], "bogus"),
        (["--rate", "4", "--gpus", "l4", "--workload", "nope"], "nope"),
        (["--rate", "4", "--gpus", "l4", "--engine", "foo"], "--engine"),
    ],
)
def test_cli_plan_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = invoke(["plan", "llama-3.1-8b", *args])
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output


def test_a_bad_price_file_is_named(tmp_path: Path) -> None:
    prices = tmp_path / "p.toml"
    prices.write_text("[usd_per_gpu_hour]\nl4 = -1\n")
    result = invoke(["plan", "llama-3.1-8b", "--rate", "4", "--prices", str(prices)])
    assert result.exit_code == 2 and "p.toml" in result.output and "positive" in result.output


def test_a_trace_is_rescaled_to_each_rate(tmp_path: Path) -> None:
    """A generic JSONL trace of 41 requests 0.25 s apart runs at 4 req/s natively; a trial at
    2 req/s stretches its arrivals x2, and `--rate inf` squeezes them to t = 0."""
    from kvplan.deploy.trials import ALL_AT_ONCE_SCALE, sent_at, trace_rate

    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"arrival_s": 0.25 * i, "prompt_len": 64, "output_len": 16}) + "\n"
            for i in range(41)
        )
    )
    workload = WorkloadSpec(trace=str(trace))
    assert trace_rate(workload) == pytest.approx(4.0)
    assert sent_at(workload, 2.0, 40, 4.0).time_scale == pytest.approx(2.0)
    assert sent_at(workload, math.inf, 40, 4.0).time_scale == ALL_AT_ONCE_SCALE
    demand = Demand(
        model="llama-3.1-8b",
        rate=3.0,
        slo=parse_slo("ttft_p90=2s"),
        workload=workload,
        optimization="paged",
        num_requests=40,
        step_model="roofline",
    )
    plan = make_plan(demand, [Candidate("l4", 1)], {})
    assert plan.router == "kv-aware" and plan.winner is not None and plan.winner.verified


@pytest.mark.slow
def test_ray_searches_to_the_same_plan() -> None:
    """On Ray every candidate is searched at once (no bound between waves): more simulations,
    the same plan."""
    import importlib.util

    from ci_helpers import require_in_ci

    from kvplan.execution.executors import LocalExecutor, RayExecutor

    require_in_ci(
        importlib.util.find_spec("ray") is not None, "ray", "pip install -e '.[all]' installs it"
    )
    demand = _decode_demand("ttft_p90=1s", rate=20.0)
    candidates = [Candidate("h100-80gb", 1, "auto", 8), Candidate("a100-80gb", 1, "auto", 8)]
    prices = {"h100-80gb": 2.0, "a100-80gb": 1.5}
    local = make_plan(demand, candidates, prices, LocalExecutor(2))
    ray = make_plan(demand, candidates, prices, RayExecutor())
    assert [(r.layout, r.capacity.status) for r in ray.rows][:1] == [
        (r.layout, r.capacity.status) for r in local.rows
    ][:1]
    assert ray.winner is not None and ray.winner.gpus == local.winner.gpus
