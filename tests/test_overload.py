"""A run says when its queue grows without bound: the offered, served and sustainable rates
and the overloaded verdict (kvplan.core.summary.load_summary), the bench table's lines
about them and about what timed the steps, and each workload's default rate, a load the
default setup serves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.bench.caption import load_lines, table_caption, timing_line
from kvplan.bench.workloads import WorkloadSpec, build_workload
from kvplan.cli.app import app
from kvplan.core.metrics import StepMetrics
from kvplan.core.sequence import Sequence
from kvplan.core.summary import load_summary, saturated_rate
from kvplan.results import make_record, read_jsonl
from kvplan.spec.resolve import load_model
from kvplan.workload import WORKLOAD_KINDS
from kvplan.workload.default_rates import DEFAULT_RATES
from kvplan.workload.request import Request

runner = CliRunner()


def _served(arrival: float, finish: float, request_id: int = 0) -> Sequence:
    seq = Sequence(Request(request_id, arrival, prompt_len=8, output_len=4))
    seq.first_token_s, seq.finish_s = arrival, finish
    return seq


def _steps(
    ends: list[float],
    waiting: list[int] | None = None,
    sampled: list[int] | None = None,
    running: list[int] | None = None,
) -> StepMetrics:
    """A step trace by hand: each step ends at its time, lasting since the previous end, and
    samples its count of output tokens (default 4: one request's whole output)."""
    metrics = StepMetrics()
    start, total = 0.0, 0
    for index, end in enumerate(ends):
        metrics.columns["dt"].append(end - start)
        metrics.trace_t.append(end)
        metrics.trace_waiting.append(waiting[index] if waiting else 0)
        metrics.trace_running.append(running[index] if running else 1)
        total += sampled[index] if sampled else 4
        metrics.trace_generated.append(total)
        metrics.elapsed += end - start
        start = end
    return metrics


def _finishing(finished: list[Sequence]) -> StepMetrics:
    """One step per finish, sampling that request's 4 output tokens."""
    return _steps(sorted(seq.finish_s for seq in finished if seq.finish_s is not None))


def test_a_stream_served_as_it_arrives_is_not_overloaded() -> None:
    # 41 arrivals, one a second from t = 0 to 40, each served in 0.5 s: 40 gaps over 40 s;
    # the steady window (20, 40] holds the arrivals at 21..40 and the steps ending at
    # 20.5..39.5, which sample 20 x 4 tokens: 4 tokens/s, 1 request/s at 4 tokens each.
    finished = [_served(t, t + 0.5, t) for t in range(41)]
    figures = load_summary(finished, [], _finishing(finished))
    assert figures == {
        "offered_requests_per_s": 1.0,
        "served_output_tokens_per_s": 4.0,
        "served_requests_per_s": 1.0,
        "sustainable_requests_per_s": None,
        "overloaded": False,
    }


def test_a_queue_that_grows_is_overloaded() -> None:
    # one finish every 2 s (2, 4, ..., 82): (20, 40] holds 10 of them against 20 arrivals,
    # a growth of 10 above both 5% of 20 and 2 sqrt(20) = 8.94; 40 tokens in 20 s
    finished = [_served(t, 2.0 * (t + 1), t) for t in range(41)]
    figures = load_summary(finished, [], _finishing(finished))
    assert figures["offered_requests_per_s"] == 1.0
    assert figures["served_output_tokens_per_s"] == 2.0
    assert figures["served_requests_per_s"] == 0.5
    assert figures["overloaded"] is True
    # no step had requests waiting in this hand-made trace: no ceiling to read
    assert figures["sustainable_requests_per_s"] is None


def test_a_growth_within_the_noise_of_a_poisson_count_is_not_overloaded() -> None:
    # 12 finishes in (20, 40] against 20 arrivals: a growth of 8, under 2 sqrt(20) = 8.94
    finishes = [float(t) + 0.5 for t in range(20)] + [25.0 + t for t in range(12)]
    finishes += [100.0 + t for t in range(41 - len(finishes))]
    finished = [_served(t, finish, t) for t, finish in enumerate(finishes)]
    figures = load_summary(finished, [], _finishing(finished))
    assert figures["served_requests_per_s"] == 12 / 20
    assert figures["overloaded"] is False


def test_rejected_requests_leave_the_queue_without_being_served() -> None:
    # the stable stream with 5 of the second half's requests (t = 30..34) rejected on arrival
    rejected_at = set(range(30, 35))
    finished = [_served(t, t + 0.5, t) for t in range(41) if t not in rejected_at]
    rejected = [_served(t, t, t) for t in sorted(rejected_at)]
    figures = load_summary(finished, rejected, _finishing(finished))
    assert figures["offered_requests_per_s"] == 1.0  # 41 requests arrived over 40 s
    assert figures["served_requests_per_s"] == 15 / 20
    assert figures["overloaded"] is False  # nothing waits longer for them


def test_a_stream_sent_all_at_once_is_served_at_its_drain_rate_and_cannot_overload() -> None:
    # five requests at t = 0 finishing at 1..5: the steady window is the whole drain (0, 5],
    # 20 tokens in 5 s
    finished = [_served(0.0, 1.0 + t, t) for t in range(5)]
    assert load_summary(finished, [], _finishing(finished)) == {
        "offered_requests_per_s": None,
        "served_output_tokens_per_s": 4.0,
        "served_requests_per_s": 1.0,
        "sustainable_requests_per_s": None,
        "overloaded": False,
    }


def test_the_sustainable_rate_is_the_output_rate_while_requests_waited() -> None:
    # steps end at 1, 2, 3, 4 (1 s each); requests waited after steps 2 and 3 (2 s of the 4 s
    # busy), which sampled 100 + 80 tokens with 10 running: 90 tokens/s, 22.5 requests/s of
    # 4 tokens, from 45 requests' output, past both 30 requests and 4 batches of 10
    finished = [_served(0.0, 1.0, t) for t in range(60)]
    steps = _steps([1.0, 2.0, 3.0, 4.0], [0, 3, 3, 0], [20, 100, 80, 40], [10] * 4)
    assert saturated_rate(finished, steps) == 180 / 2.0 / 4
    # a batch of 12 needs 48 requests' output at saturation (the drain's bias under a quarter)
    assert (
        saturated_rate(
            finished, _steps([1.0, 2.0, 3.0, 4.0], [0, 3, 3, 0], [20, 100, 80, 40], [12] * 4)
        )
        is None
    )
    # the output of 29 requests is too few to tell the ceiling (about 18% error at 30)
    assert (
        saturated_rate(
            finished, _steps([1.0, 2.0, 3.0, 4.0], [0, 3, 3, 0], [20, 60, 56, 40], [1] * 4)
        )
        is None
    )
    # waiting for 2 s of a 10 s busy time is a burst, not the ceiling (less than a quarter)
    longer = _steps([1.0, 2.0, 3.0, 4.0, 10.0], [0, 3, 3, 0, 0], [20, 100, 80, 40, 4], [10] * 5)
    assert saturated_rate(finished, longer) is None


def test_only_an_overloaded_run_reports_a_ceiling() -> None:
    # a stable stream whose steps all had requests waiting (a token budget held them, not a
    # full batch): its output rate there is no ceiling, as it served what came
    finished = [_served(t, t + 0.5, t) for t in range(41)]
    ends = sorted(seq.finish_s for seq in finished if seq.finish_s is not None)
    steps = _steps(ends, [1] * len(ends), [4] * len(ends), [1] * len(ends))
    assert saturated_rate(finished, steps) is not None
    assert load_summary(finished, [], steps)["sustainable_requests_per_s"] is None


def _record(name: str, **metrics: object) -> object:
    return make_record("bench", "r", "simulated", name, {}, dict(metrics))


def test_the_table_says_who_is_overloaded_and_what_each_sustains() -> None:
    records = [
        _record(
            "contiguous-max",
            offered_requests_per_s=3.0712,
            served_requests_per_s=0.18443,
            sustainable_requests_per_s=0.21795,
            overloaded=True,
        ),
        _record(
            "prefix",
            offered_requests_per_s=3.0712,
            served_requests_per_s=3.05,
            sustainable_requests_per_s=None,
            overloaded=False,
        ),
    ]
    assert load_lines(records) == [
        "contiguous-max overloaded: served 0.184 req/s of 3.07 offered; sustains about 0.218 req/s",
        "served at 3.07 req/s: prefix",
        "an overloaded run's queue grows without bound, so its latencies grow with the run's "
        "length; a --rate below 0.218 compares every optimization at a load all serve",
    ]
    served = [_record("paged", offered_requests_per_s=0.154, overloaded=False)]
    assert load_lines(served) == [
        "load: 0.154 req/s offered, served by every optimization (no queue grows)"
    ]
    assert load_lines([_record("paged", offered_requests_per_s=None, overloaded=False)]) == [
        "load: every request sent at t = 0, a batch the engine drains (nothing to keep up with)"
    ]
    assert load_lines([_record("paged@round-robin", requests_per_s=1.0)]) == []  # a cluster


def test_the_table_says_in_words_which_model_timed_the_steps() -> None:
    band = {"gpu_family": "ada", "kind": "dense", "unvalidated": True,
            "output_throughput_error": 0.4686}  # fmt: skip
    fitted = _record("paged", step_model="operators by gemm: roofline", time_error_band=band)
    assert timing_line(fitted) == (
        "times: modeled as the sum of each step's operators (operators by gemm: roofline); "
        "held-out error ±47% output tok/s for dense models on other GPU families, unvalidated "
        "on ada; not measured"
    )
    held_out = {"gpu_family": "hopper", "kind": "moe", "mean_tpot_ms_error": 0.12}
    covered = _record("paged", step_model="operators by gemm: x", time_error_band=held_out)
    assert timing_line(covered) == (
        "times: modeled as the sum of each step's operators (operators by gemm: x); held-out "
        "error ±12% TPOT for moe models on hopper GPUs; not measured"
    )
    assert timing_line(_record("paged")) == (
        "times: modeled by the bare GPU roofline at datasheet peak (--step-model roofline), a "
        "lower bound no server reaches; not measured"
    )
    mine = _record("paged", step_model="operators by gemm: x (calibration mine.json: fit)")
    assert timing_line(mine) == (
        "times: modeled as the sum of each step's operators (operators by gemm: x (calibration "
        "mine.json: fit)); not measured"
    )
    assert table_caption([fitted])[-1] == timing_line(fitted)


def test_every_workload_has_its_own_default_rate_and_the_run_records_it() -> None:
    assert set(DEFAULT_RATES) == {*WORKLOAD_KINDS, "random"}
    assert all(0 < rate < math.inf for rate in DEFAULT_RATES.values())
    assert WorkloadSpec().rate is None  # the option's default: the kind's own
    assert WorkloadSpec(kind="long-reasoning").arrival_rate == DEFAULT_RATES["long-reasoning"]
    assert WorkloadSpec(kind="long-reasoning", rate=2.0).arrival_rate == 2.0
    spec = WorkloadSpec(kind="alpaca", num_requests=3)
    built = build_workload(spec, load_model("llama-3.1-8b"), "simulated", seed=0)
    assert built.info["rate"] == DEFAULT_RATES["alpaca"]


@pytest.mark.parametrize("rate, overloaded", [("40", True), (None, False)])
def test_the_bench_table_opens_with_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: str | None, overloaded: bool
) -> None:
    """alpaca on the default L4: contiguous-max sustains about 1.5 req/s, so 40 req/s
    overloads it and the default (1 req/s) does not."""
    monkeypatch.setenv("COLUMNS", "100")
    out = tmp_path / "r.jsonl"
    args = ["bench", "--workload", "alpaca", "--num-requests", "200"]
    args += ["--optimizations", "contiguous-max", "--out", str(out)]
    result = runner.invoke(app, [*args, *(["--rate", rate] if rate else [])])
    assert result.exit_code == 0, result.output
    (record,) = read_jsonl(out)
    metrics = record.metrics
    assert metrics["overloaded"] is overloaded
    text = " ".join(result.output.split())
    for line in load_lines([record]):
        assert line in text
    if overloaded:
        assert metrics["served_requests_per_s"] < 0.5 * metrics["offered_requests_per_s"]
        assert f"served {metrics['served_requests_per_s']:.3g} req/s of" in text
    else:
        assert "served by every optimization" in text
    assert "times: modeled as the sum of each step's operators" in text


def test_a_cluster_reports_the_load_over_all_its_pods(tmp_path: Path) -> None:
    """Two pods behind a router: the stream's offered and served rates are the whole
    cluster's (every pod's requests), overloaded when the cluster's backlog grows; the
    ceiling is the pods' together."""
    out = tmp_path / "r.jsonl"
    args = ["bench", "--workload", "alpaca", "--num-requests", "300", "--rate", "40"]
    args += ["--optimizations", "contiguous-max", "--pods", "2", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)  # one record per router
    assert len(records) > 1
    for record in records:
        metrics = record.metrics
        assert metrics["pods"] == 2 and metrics["overloaded"] is True
        # 300 Poisson arrivals at 40/s: the offered rate is the stream's, not a pod's share
        assert 30 < metrics["offered_requests_per_s"] < 50
        assert metrics["served_requests_per_s"] < 0.5 * metrics["offered_requests_per_s"]
        ceiling = metrics["sustainable_requests_per_s"]
        assert ceiling is None or ceiling > 0.5 * metrics["served_requests_per_s"]
    assert "overloaded" in " ".join(result.output.split())


def test_the_table_says_why_the_offered_rate_is_not_the_rate_asked_for() -> None:
    asked = {"workload": {"kind": "sharegpt", "rate": 4.88}, "num_requests": 300}
    record = make_record("bench", "r", "simulated", "paged", asked, {
        "offered_requests_per_s": 5.3133, "overloaded": False})  # fmt: skip
    assert load_lines([record]) == [
        "load: 5.31 req/s offered, served by every optimization (no queue grows)",
        "offered: the rate these 300 arrivals came at; --rate 4.88 is the mean of the process "
        "that drew them",
    ]
    close = make_record("bench", "r", "simulated", "paged", asked, {
        "offered_requests_per_s": 4.9, "overloaded": False})  # fmt: skip
    assert len(load_lines([close])) == 1  # within 1% of the rate asked: nothing to explain
    chat = {"workload": {"kind": "chat", "rate": 0.05}, "num_requests": 300}
    sessions = make_record("bench", "r", "simulated", "paged", chat, {
        "offered_requests_per_s": 0.23, "overloaded": False})  # fmt: skip
    assert len(load_lines([sessions])) == 1  # sessions/s asked, requests/s offered


def test_a_run_too_short_to_settle_reports_no_ceiling(tmp_path: Path) -> None:
    """Mooncake's first 200 requests arrive in a minute and take three to serve on an H100:
    the batch never settles at its ceiling, so no optimization's ceiling is read off it
    (counted in completions, fp8's came out below paged's while fp8 finished the same work
    sooner)."""
    from kvplan.samples import sample_path

    out = tmp_path / "r.jsonl"
    args = ["bench", "--trace", str(sample_path("mooncake-trace")), "--gpu", "h100-80gb"]
    result = runner.invoke(
        app,
        [*args, "--optimizations", "paged,paged+fp8", "--out", str(out)],
        env={"COLUMNS": "100"},
    )
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert all(r.metrics["overloaded"] for r in records)
    assert all(r.metrics["sustainable_requests_per_s"] is None for r in records)
    assert "its ceiling is not measured" in " ".join(result.output.split())
    paged, fp8 = (r.metrics for r in records)
    assert fp8["output_tokens_per_s"] > paged["output_tokens_per_s"]  # over the makespan
