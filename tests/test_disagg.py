"""Disaggregated prefill/decode: a transferred prompt costs the decode side one token, the
pipeline's latencies by hand on the roofline, and `kvplan plan --disagg` end to end."""

from __future__ import annotations

import json

import pytest
from engine_helpers import tiny_engine
from hardening_helpers import invoke

from kvplan.bench.workloads import WorkloadSpec
from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.deploy_plan import make_plan
from kvplan.deploy.disagg_plan import DisaggRow
from kvplan.deploy.slo import parse_slo
from kvplan.sim.cluster import RouterConfig
from kvplan.sim.disagg import KvLink, run_disaggregated
from kvplan.workload.request import Request

PER_TOKEN = 131_072  # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes
FLOPS_PER_PAIR = 4 * 32 * 32 * 128  # layers x query heads x head_dim, QK and PV


def test_a_transferred_prompt_costs_the_decode_side_its_last_token() -> None:
    """vLLM, after a remote prefill: every prompt token's KV is loaded, and the last one is
    computed again to sample (num_computed = prompt - 1)."""
    engine, runner = tiny_engine()
    result = engine.run([Request(0, 0.0, 10, 3, transferred_tokens=10)])
    (done,) = result.finished
    roof = runner.roofline
    step1 = roof.step_time(
        1, 10 * FLOPS_PER_PAIR, 10 * PER_TOKEN
    )  # token 10 attends to 10 positions
    step2 = roof.step_time(1, 11 * FLOPS_PER_PAIR, 11 * PER_TOKEN)
    step3 = roof.step_time(1, 12 * FLOPS_PER_PAIR, 12 * PER_TOKEN)
    assert result.metrics["engine_steps"] == 3 and done.num_computed == 12
    assert done.first_token_s == pytest.approx(step1)
    assert done.finish_s == pytest.approx(step1 + step2 + step3)
    with pytest.raises(ValueError, match="transferred_tokens"):
        Request(1, 0.0, 10, 3, transferred_tokens=11)


def test_pipeline_latency_is_prefill_then_transfer_then_one_decode_step() -> None:
    prefill, runner = tiny_engine()
    decode, _ = tiny_engine()
    link = KvLink(PER_TOKEN, 450.0, 5e-6)
    assert link.seconds(10) == pytest.approx(5e-6 + 10 * 131_072 / 450e9)
    metrics = run_disaggregated(
        [prefill], [decode], [Request(0, 0.0, 10, 3)], link, RouterConfig("round-robin"), 16
    )
    roof = runner.roofline
    prefill_step = roof.step_time(10, 55 * FLOPS_PER_PAIR, 10 * PER_TOKEN)  # 10 + 9 + ... + 1 pairs
    first = prefill_step + link.seconds(10) + roof.step_time(1, 10 * FLOPS_PER_PAIR, 10 * PER_TOKEN)
    rest = roof.step_time(1, 11 * FLOPS_PER_PAIR, 11 * PER_TOKEN) + roof.step_time(
        1, 12 * FLOPS_PER_PAIR, 12 * PER_TOKEN
    )
    assert metrics["ttft_s_p50"] == pytest.approx(first)
    assert metrics["e2e_s_p50"] == pytest.approx(first + rest)
    assert metrics["tpot_s_p50"] == pytest.approx(rest / 2)
    assert metrics["prefill_ttft_s_p90"] == pytest.approx(prefill_step)
    assert metrics["kv_transfer_s_mean"] == pytest.approx(link.seconds(10))
    assert prefill.finished[0].request.output_len == 1  # the prefill side sees one output token


def test_disaggregation_wins_where_prefills_stall_decodes() -> None:
    """DistServe's case: 3,000-token prompts and a 7 ms TPOT target. Aggregated, every prefill
    chunk lands in some request's inter-token gap, so replicas must run nearly idle; split,
    the decode pool's steps are decode-only and one prefill replica keeps up."""
    demand = Demand(
        model="llama-3.1-8b",
        rate=10.0,
        slo=parse_slo("ttft_p90=1s,tpot_p90=7ms"),
        num_requests=60,
        optimization="paged",
        step_model="roofline",
        workload=WorkloadSpec(kind="random", input_len=3000, output_len=32),
    )
    plan = make_plan(demand, [Candidate("h100-80gb", 1)], {"h100-80gb": 2.0}, disagg=True)
    winner, aggregated = plan.rows[0], plan.rows[1]
    assert (
        isinstance(winner, DisaggRow) and winner.verified and not isinstance(aggregated, DisaggRow)
    )
    assert demand.slo.meets(winner.cluster_metrics) and demand.slo.meets(aggregated.cluster_metrics)
    assert winner.gpus == winner.prefill_replicas + winner.replicas < aggregated.gpus
    assert winner.cluster_metrics["kv_transfer_s_mean"] > 0
    assert winner.usd_per_hour == pytest.approx(2.0 * winner.gpus)


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_cli_plan_disagg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    args = [
        "plan",
        "llama-3.1-8b",
        "--rate",
        "4",
        "--gpus",
        "l4",
        "--tp",
        "1",
        "--step-model",
        "roofline",
        "--slo",
        "ttft_p90=2s,tpot_p90=200ms",
        "--num-requests",
        "40",
        "--workers",
        "1",
        "--disagg",
        "--kv-link-gbps",
        "50",
        "--json",
    ]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    split = [row for row in data["candidates"] if row["disaggregated"] is not None]
    assert len(split) == 1 and split[0]["disaggregated"]["kv_link_gbps"] == 50
    for bad, message in (
        (["--slo", "tpot_p90=50ms"], "ttft"),
        (["--kv-link-gbps", "0"], "--kv-link-gbps"),
    ):
        result = invoke(["plan", "llama-3.1-8b", "--rate", "4", "--gpus", "l4", "--disagg", *bad])
        assert (
            result.exit_code == 2 and message in result.output and "Traceback" not in result.output
        )
