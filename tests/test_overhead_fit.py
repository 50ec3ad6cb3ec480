"""The operator step model's fitted part against runs simulated at known overheads: a replay
re-times a recorded schedule under other overheads exactly, the fit recovers the overhead
that made the runs, and it reads only the runs measured tables timed where there are any."""

from __future__ import annotations

import pytest
from calibration_helpers import small_run

from kvplan.fit.measured import MeasuredRun
from kvplan.fit.overhead_fit import fit_overheads, overhead_for
from kvplan.fit.replay import Replay, simulate
from kvplan.sim.ops.overhead import EngineOverhead

TRUTH = EngineOverhead(base_s=0.003, per_seq_s=2e-4)
FACTORS = {"base_s": TRUTH.base_s, "per_seq_s": TRUTH.per_seq_s}
# a release whose engine adds its CPU time to the GPU's (vLLM V1 before async scheduling), as
# TRUTH does
SYNC = "0.11.0"


def test_replay_reproduces_the_simulation_at_other_overheads():
    run = small_run(engine_version=SYNC)
    replay = Replay.record(run, EngineOverhead())
    predicted, _ = simulate(run, TRUTH)
    replayed = replay.predict(FACTORS)
    for key in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        # a concurrency cap makes the schedule timing-independent: the replay is exact
        assert replayed[key] == pytest.approx(predicted[key], rel=1e-9)


def test_a_faster_replay_never_starts_a_step_before_its_arrivals():
    """Open loop at a finite rate, recorded at a large overhead and replayed at none: the step
    that admits a request starts no earlier than its send, so no TTFT comes out negative; at
    the recorded overhead the replay is the simulation itself."""
    run = small_run(max_concurrency=None, request_rate=4.0, num_prompts=30, engine_version=SYNC)
    slow = EngineOverhead(base_s=0.02, per_seq_s=1e-3)
    replay = Replay.record(run, slow)
    fast = replay.predict({"base_s": 0.0, "per_seq_s": 0.0})
    assert fast["mean_ttft_ms"] > 0 and fast["median_ttft_ms"] > 0
    again = replay.predict({"base_s": slow.base_s, "per_seq_s": slow.per_seq_s})
    simulated, _ = simulate(run, slow)
    for key in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert again[key] == pytest.approx(simulated[key], rel=1e-9)


def test_fit_recovers_runs_simulated_with_a_known_overhead():
    runs = []
    for concurrency, length in ((4, 128), (16, 512), (32, 1024)):
        run = small_run(run_id=f"c{concurrency}", max_concurrency=concurrency, input_len=length,
                        engine_version=SYNC)  # fmt: skip
        predicted, _ = simulate(run, TRUTH)
        measured = {k: predicted[k] for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")}
        runs.append(MeasuredRun(**{**run.__dict__, "measured": measured}))
    fitted = fit_overheads(runs)
    (overhead,) = fitted.values()
    assert overhead.base_s == pytest.approx(TRUTH.base_s, rel=0.05)
    assert overhead.per_seq_s == pytest.approx(TRUTH.per_seq_s, rel=0.05)
    for run in runs:
        predicted, _ = simulate(run, overhead_for(fitted, run))
        for key, value in run.measured.items():
            assert predicted[key] == pytest.approx(value, rel=0.01)


def test_the_fit_reads_only_the_runs_measured_tables_timed_where_there_are_any():
    """An H100 run (aiconfigurator's tables time its operators) and an L4 run (the roofline
    does, no table covers the L4) measured at different overheads: the fit takes the H100's
    and says so; the L4 run alone is fitted on itself."""
    from kvplan.sim.ops import aic_source

    if not aic_source.available():
        pytest.skip("aiconfigurator-core is not installed (kvplan[perf])")
    table = small_run(run_id="h100", engine_version=SYNC)
    roofline = small_run(run_id="l4", gpu="l4", engine_version=SYNC)
    other = EngineOverhead(base_s=0.02, per_seq_s=1e-3)
    runs = []
    for run, truth in ((table, TRUTH), (roofline, other)):
        predicted, _ = simulate(run, truth)
        measured = {k: predicted[k] for k in ("output_throughput", "mean_tpot_ms")}
        runs.append(MeasuredRun(**{**run.__dict__, "measured": measured}))
    (both,) = fit_overheads(runs).values()
    assert both.source == "fit on 1 table-timed runs"
    # the H100 run alone: its figures reproduced, nothing of the L4's 20 ms a step
    predicted, _ = simulate(runs[0], overhead_for({"vllm-v1": both}, runs[0]))
    for key, value in runs[0].measured.items():
        assert predicted[key] == pytest.approx(value, rel=0.01)
    assert both.base_s < 0.01
    (alone,) = fit_overheads(runs[1:]).values()
    assert alone.source == "fit on 1 runs"
