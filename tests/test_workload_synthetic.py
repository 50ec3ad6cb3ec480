"""Synthetic workloads: determinism, published means, caps, arrival statistics, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvplan.workload import ARRIVALS, WORKLOAD_KINDS, make_workload
from kvplan.workload.lengths import cap_lengths, load_length_stats

STATS_FILE = "sarathi_sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
LOGNORMAL_KINDS = ("sharegpt", "alpaca", "long-reasoning")


def _lengths(reqs) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r.prompt_len for r in reqs]), np.array([r.output_len for r in reqs])


def _gaps(reqs) -> np.ndarray:
    return np.diff([0.0] + [r.arrival_s for r in reqs])


@pytest.fixture
def tiny_stats(tmp_path: Path) -> Path:
    path = tmp_path / "stats.csv"
    path.write_text(
        "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
        "10,20,30,0.5\n300,40,340,7.5\n"
    )
    return path


def test_exports() -> None:
    assert WORKLOAD_KINDS == (
        "sharegpt",
        "alpaca",
        "sharegpt-stats",
        "long-reasoning",
        "system-prompt",
        "rag",
        "chat",
        "few-shot",
    )
    assert ARRIVALS == ("poisson", "gamma", "burst")


@pytest.mark.parametrize("kind", LOGNORMAL_KINDS)
@pytest.mark.parametrize("arrival", ARRIVALS)
def test_same_seed_same_requests_sorted_with_ids(kind: str, arrival: str) -> None:
    a = make_workload(kind, 200, rate=4.0, arrival=arrival, cv=2.0, seed=7)
    assert a == make_workload(kind, 200, rate=4.0, arrival=arrival, cv=2.0, seed=7)
    assert [r.request_id for r in a] == list(range(200))
    times = [r.arrival_s for r in a]
    assert times == sorted(times)
    assert all(type(r.prompt_len) is int and type(r.output_len) is int for r in a)
    assert all(r.prompt_len >= 1 and r.output_len >= 1 and r.total_len <= 2048 for r in a)


@pytest.mark.parametrize("kind", LOGNORMAL_KINDS)
def test_different_seeds_differ(kind: str) -> None:
    a, b = (make_workload(kind, 100, rate=1.0, seed=s) for s in (0, 1))
    assert _lengths(a)[0].tolist() != _lengths(b)[0].tolist()
    assert [r.arrival_s for r in a] != [r.arrival_s for r in b]


def test_arrival_process_does_not_change_lengths() -> None:
    """Lengths are drawn before arrivals, so swapping the process keeps the same prompts."""
    base = _lengths(make_workload("sharegpt", 300, rate=2.0, seed=3))
    for arrival in ("gamma", "burst"):
        other = _lengths(make_workload("sharegpt", 300, rate=2.0, arrival=arrival, cv=3.0, seed=3))
        assert all(np.array_equal(x, y) for x, y in zip(base, other))


@pytest.mark.parametrize(
    ("kind", "prompt_mean", "output_mean"),
    [
        ("sharegpt", 161.31, 337.99),  # vLLM paper, ShareGPT
        ("alpaca", 19.31, 58.45),  # vLLM paper, Alpaca
        ("long-reasoning", 200.0, 4000.0),
    ],
)
def test_means_match_targets(kind: str, prompt_mean: float, output_mean: float) -> None:
    prompt, output = _lengths(make_workload(kind, 20_000, rate=10.0, seed=0, max_model_len=100_000))
    assert prompt.mean() == pytest.approx(prompt_mean, rel=0.05)
    assert output.mean() == pytest.approx(output_mean, rel=0.05)


def test_long_reasoning_outputs_are_thousands() -> None:
    _, output = _lengths(make_workload("long-reasoning", 5_000, rate=1.0, max_model_len=100_000))
    assert np.median(output) > 3_000
    assert (output >= 1_000).mean() > 0.95


@pytest.mark.parametrize("kind", LOGNORMAL_KINDS)
def test_max_model_len_cap(kind: str) -> None:
    reqs = make_workload(kind, 5_000, rate=1.0, seed=1, max_model_len=256)
    assert max(r.total_len for r in reqs) <= 256
    assert min(min(r.prompt_len, r.output_len) for r in reqs) >= 1


def test_cap_truncates_output_first_then_prompt() -> None:
    prompt, output = cap_lengths(np.array([10, 600, 100, 512]), np.array([5, 3, 500, 1]), 512)
    assert prompt.tolist() == [10, 511, 100, 511]
    assert output.tolist() == [5, 1, 412, 1]


def test_poisson_mean_gap() -> None:
    gaps = _gaps(make_workload("alpaca", 20_000, rate=8.0, seed=2))
    assert gaps[0] > 0  # the first request arrives after the first gap
    assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv(cv: float) -> None:
    gaps = _gaps(make_workload("alpaca", 20_000, rate=5.0, arrival="gamma", cv=cv, seed=4))
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_burst_all_at_zero_and_rate_ignored() -> None:
    reqs = make_workload("sharegpt", 50, rate=None, arrival="burst")
    assert [r.arrival_s for r in reqs] == [0.0] * 50
    assert make_workload("sharegpt", 50, rate=-1.0, arrival="burst") == reqs


def test_sharegpt_stats_samples_rows_jointly(tiny_stats: Path) -> None:
    reqs = make_workload("sharegpt-stats", 400, rate=1.0, seed=5, stats_path=tiny_stats)
    pairs = {(r.prompt_len, r.output_len) for r in reqs}
    assert pairs == {(10, 20), (300, 40)}  # never (10, 40): rows are kept whole
    assert reqs == make_workload(
        "sharegpt-stats", 400, rate=1.0, seed=5, stats_path=str(tiny_stats)
    )
    capped = make_workload(
        "sharegpt-stats", 400, rate=1.0, seed=5, stats_path=tiny_stats, max_model_len=310
    )
    assert {(r.prompt_len, r.output_len) for r in capped} == {(10, 20), (300, 10)}


def test_sharegpt_stats_real_file(shared_data: Path) -> None:
    path = shared_data / "traces" / STATS_FILE
    prompts, outputs = load_length_stats(path)
    assert len(prompts) == 30_731
    assert prompts.mean() == pytest.approx(2340.03, abs=0.01)
    assert outputs.mean() == pytest.approx(438.71, abs=0.01)
    # every row totals <= 8,149 tokens, so at 8k+ nothing is capped and the means carry over
    prompt, output = _lengths(
        make_workload("sharegpt-stats", 20_000, rate=1.0, stats_path=path, max_model_len=8_192)
    )
    assert prompt.mean() == pytest.approx(2340.03, rel=0.03)
    assert output.mean() == pytest.approx(438.71, rel=0.03)
    reqs = make_workload("sharegpt-stats", 2_000, rate=1.0, stats_path=path)
    assert max(r.total_len for r in reqs) <= 2048


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (dict(kind="nope"), "unknown workload kind 'nope'"),
        (dict(arrival="uniform"), "unknown arrival process 'uniform'"),
        (dict(num_requests=0), "num_requests must be an integer >= 1"),
        (dict(rate=0.0), "need a finite rate > 0"),
        (dict(rate=-2.0), "need a finite rate > 0"),
        (dict(rate=None), "pass e.g. rate=10"),
        (dict(arrival="gamma", cv=0.0), "cv > 0"),
        (dict(max_model_len=1), "max_model_len must be an integer >= 2"),
        (dict(kind="sharegpt-stats"), "sharegpt-stats needs stats_path"),
        (
            dict(kind="sharegpt-stats", stats_path="/no/such/stats.csv"),
            "/no/such/stats.csv not found",
        ),
    ],
)
def test_bad_input_one_line_errors(kwargs: dict, needle: str) -> None:
    args = dict(kind="sharegpt", num_requests=10, rate=1.0) | kwargs
    with pytest.raises(ValueError) as info:
        make_workload(args.pop("kind"), args.pop("num_requests"), **args)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_stats_row_names_line(tmp_path: Path) -> None:
    path = tmp_path / "stats.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n7,x\n")
    with pytest.raises(ValueError, match=r"stats\.csv:3: lengths must be integers"):
        load_length_stats(path)
