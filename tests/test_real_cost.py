"""Real mode's pre-run cost estimate: a step cost fitted on timed warm-up steps, the run's
own schedule replayed on it, and an estimate the run's records hold beside the measured
wall time, within 2x of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.real.step_cost import (
    ModeledRunner,
    StepCost,
    StepRecorder,
    engine_factor,
    fit_step_cost,
    warmup_requests,
)
from kvplan.workload.request import Request

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_the_fit_recovers_the_terms_of_exact_step_times() -> None:
    fixed, per_seq, per_token = 0.02, 0.003, 1e-4
    shapes = [(0, 256), (2, 256), (4, 0), (3, 0), (2, 0), (1, 0)]
    samples = [(d, p, fixed + per_seq * d + per_token * p) for d, p in shapes]
    cost = fit_step_cost(samples, bookkeeping_s=0.001)
    assert cost.fixed_s == pytest.approx(fixed, rel=1e-9)
    assert cost.decode_seq_s == pytest.approx(per_seq, rel=1e-9)
    assert cost.prefill_token_s == pytest.approx(per_token, rel=1e-9)
    assert cost.bookkeeping_s == 0.001
    assert cost.model_seconds(5, 100) == pytest.approx(0.02 + 0.015 + 0.01, rel=1e-9)


def test_a_term_the_steps_would_make_negative_is_left_out() -> None:
    # decode steps that get faster with more sequences (noise): no negative cost per sequence
    decode = [(1, 0, 0.010), (2, 0, 0.008), (3, 0, 0.006)]
    cost = fit_step_cost([*decode, (0, 100, 0.02)])
    assert cost.decode_seq_s == 0.0
    # the fixed cost alone fits the decode steps in relative error: sum(1/t) / sum(1/t^2),
    # and the prompt tokens take the rest of the prefill step
    fixed = sum(1 / t for *_, t in decode) / sum(1 / t**2 for *_, t in decode)
    assert cost.fixed_s == pytest.approx(fixed, rel=1e-9)
    assert cost.prefill_token_s == pytest.approx((0.02 - fixed) / 100, rel=1e-9)


def test_an_optimizations_factor_is_its_median_step_and_its_first_steps_the_excess() -> None:
    cost = StepCost(0.01, 0.0, 0.0)
    # a fresh engine's first step took 50 ms, the next four 12 ms each: 1.2x the fit
    factor, excess = engine_factor(cost, [(1, 0, 0.05)] + [(1, 0, 0.012)] * 4)
    assert factor == pytest.approx(1.2)
    assert excess == pytest.approx(0.05 + 4 * 0.012 - 1.2 * 5 * 0.01)


def test_the_pre_run_line_says_the_terms_it_was_built_from() -> None:
    from kvplan.bench.real_cost import RunCost

    cost = RunCost(
        16, 7936, 5, 2**20, 2**28, "cpu", StepCost(0.0112, 0.0032, 9.34e-5, 0.0004),
        {"paged": 24.3, "paged+int8": 32.4}, {"paged": 1.02, "paged+int8": 1.33}, 3968, 34, 1.1,
    )  # fmt: skip
    assert cost.describe() == (
        "real mode on cpu: 16 requests x 2 optimization(s) = 15,872 tokens through 5 layers; "
        "weights 1.0 MiB, KV pool 0.25 GiB per optimization; about 57 s: 3,968 steps at 11.6 ms "
        "+ 3.2 ms per decoding sequence + 0.0934 ms per prompt token (timed on a 34-step "
        "warm-up, 1.1 s; steps of paged+int8 x1.33)"
    )


def test_warmup_requests_keep_their_prompts_and_stagger_outputs_and_arrivals() -> None:
    requests = [
        Request(i, 5.0 * i, 300, 2, prompt_tokens=tuple(range(i, i + 300)), n=2) for i in range(5)
    ]
    warm = warmup_requests(requests, (4, 8, 12, 16), 512, max_model_len=400)
    assert [r.request_id for r in warm] == [0, 1, 2, 3]  # the run's first requests
    assert [r.prompt_len for r in warm] == [128] * 4  # 512 tokens shared
    assert [r.prompt_tokens for r in warm] == [tuple(range(i, i + 128)) for i in range(4)]
    assert [r.output_len for r in warm] == [4, 8, 12, 16]  # whatever the requests asked
    assert [r.arrival_s for r in warm] == [0.0, 0.0, 1e-9, 1e-9]  # half after the first step
    assert {r.n for r in warm} == {1} and {r.output_tokens for r in warm} == {None}
    # a prompt never leaves the outputs without room in max_model_len
    assert [r.prompt_len for r in warmup_requests(requests[:1], (16,), 512, 100)] == [84]


@pytest.fixture(scope="module")
def stories_factory(stories260k: Path):
    from kvplan.bench.config import BenchConfig
    from kvplan.bench.simulation import engine_factory

    config = BenchConfig.from_flat(mode="real", model_path=str(stories260k / "hf"), device="cpu")
    return engine_factory(config)


def test_the_replay_takes_the_real_runs_steps(stories_factory) -> None:
    """All requests at t = 0: the schedule does not depend on step times, so the replay on
    modeled times must take exactly the real run's steps, shape by shape."""
    from kvplan.bench.optimizations import parse_optimization

    paged = parse_optimization("paged")
    requests = [Request(i, 0.0, 40 + 30 * i, 6 + 5 * i) for i in range(4)]
    engine, sizing = stories_factory.build(paged)
    recorder = StepRecorder(engine.runner)
    engine.runner = recorder
    engine.run(requests)
    modeled = ModeledRunner(StepCost(0.01, 0.001, 1e-5))
    replay, _ = stories_factory.scheduling_engine(paged, modeled, (sizing.kv_pool_bytes, None))
    shapes = StepRecorder(modeled)
    replay.runner = shapes
    replay.run(requests)
    assert [(d, p) for d, p, _ in shapes.samples] == [(d, p) for d, p, _ in recorder.samples]
    assert modeled.steps == len(recorder.samples) == max(r.output_len for r in requests)


@pytest.mark.slow  # compares with wall time, which a loaded machine skews: run it alone
def test_the_estimate_is_recorded_within_2x_of_the_measured_wall_time(
    stories260k: Path, tmp_path: Path
) -> None:
    """A small real run: each optimization's record holds the pre-run estimate
    (estimated_wall_s) beside the wall time it measured from its build to its end (wall_s);
    not a check of kvplan's speed but of the estimator against the run it estimated."""
    from kvplan.bench.config import BenchConfig
    from kvplan.bench.run import run_bench
    from kvplan.bench.workloads import WorkloadSpec

    config = BenchConfig.from_flat(
        mode="real", model_path=str(stories260k / "hf"), device="cpu", max_model_len=128
    )
    announced: list[str] = []
    outcome = run_bench(
        config,
        WorkloadSpec(num_requests=6),
        ["paged", "paged+int8"],
        tmp_path / "r.jsonl",
        announce=announced.append,
    )
    ratios = {
        r.optimization: r.metrics["estimated_wall_s"] / r.metrics["wall_s"] for r in outcome.records
    }
    assert all(0.5 <= ratio <= 2 for ratio in ratios.values()), ratios
    total = sum(r.metrics["estimated_wall_s"] for r in outcome.records)
    assert f"about {total:,.0f} s:" in announced[0]
