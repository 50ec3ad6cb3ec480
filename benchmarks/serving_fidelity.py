"""Simulated vs measured: every replayable published run in ../shared/data/serving.

For each record of serving_benchmarks.jsonl that kvplan has profiles for, the simulated
`vllm bench` client replays the run (same model, GPU, TP, dataset, lengths, prompts, rate or
concurrency) and the prediction is compared with the measurement: output tokens/s, mean
TTFT, mean TPOT, and `vllm bench latency`'s batch latency.

Three predictions per record:
  datasheet  - the step model at peak bandwidth / FLOP/s, no overhead (the old roofline);
  in-sample  - the shipped defaults: hardware factors per GPU family and overheads per
               engine generation, fitted jointly on all vLLM runs (kvplan/sim/joint_fit.py);
  LOSO       - leave-one-sweep-out: the whole table refitted without this record's sweep.
               The refit's objective holds no run of that sweep; its optimizer starts from
               the full fit's factors, because a start from scratch stalls in worse optima
               of the same objective. `--fresh-folds` starts every fold from scratch instead
               (nothing the held-out sweep shaped, but a worse fit) and writes no file.
Only vLLM runs are fitted; SGLang runs are predicted with vLLM's factors and reported apart.
TTFT is fitted and scored only where it is not queue-dominated: a concurrency cap, or a
finite rate below what the server completed at saturation (MeasuredRun.queue_dominated: the
highest request throughput its sweep measured, with a 10% allowance for the last requests'
tail). Queue-dominated TTFT is still predicted and listed apart ("queued_ttft_ms"), unfitted.

Writes profiles/step_model_defaults.toml (factors per family + residuals), and
benchmarks/serving_fidelity.jsonl (one fidelity record per run and metric, for
`kvplan report`). Run: python benchmarks/serving_fidelity.py [--fresh-folds]   (15 / 24 min on 2 cores)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

from kvplan.results import make_record, write_jsonl
from kvplan.sim.calibration import Replay, compared, simulate
from kvplan.sim.factor_table import MOE_KEY, FactorTable, factor_key
from kvplan.sim.joint_fit import fit_table, generation_of
from kvplan.sim.measured import MeasuredRun, load_dataset
from kvplan.sim.step_model import DATASHEET, FACTOR_NAMES, StepModelParams
from kvplan.spec.profiles import profiles_dir
from kvplan.spec.resolve import load_gpu, load_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "serving" / "serving_benchmarks.jsonl"
TARGETS = {"output_throughput": 0.15, "mean_tpot_ms": 0.15, "mean_ttft_ms": 0.30}
# Where a source publishes only medians (the SGLang team's vLLM 0.6.0 runs), kvplan predicts
# and scores the median; the targets name means, so these rows get no verdict.
MEDIANS = ("median_tpot_ms", "median_ttft_ms")


def family(run: MeasuredRun) -> str:
    """The run's hardware-factor key: its GPU family, or a GEMM path of its own (factor_key)."""
    return factor_key(load_gpu(run.gpu).family, run.weight_dtype, run.engine, run.engine_version)


def factors(params: StepModelParams) -> dict[str, float]:
    return {name: getattr(params, name) for name in FACTOR_NAMES}


def params_for(table: FactorTable, run: MeasuredRun) -> StepModelParams:
    return StepModelParams(**table.factors(family(run), generation_of(run)), source="fit")


def vllm_runs(runs: list[MeasuredRun], exclude_sweep: str | None = None) -> list[MeasuredRun]:
    return [r for r in runs if r.engine == "vllm" and r.sweep != exclude_sweep]


def main(fresh_folds: bool = False) -> int:
    if not DATA.is_file():
        print(f"{DATA} not found: this benchmark needs the shared serving dataset")
        return 0
    started = time.perf_counter()
    runs, skipped = load_dataset(DATA)
    print(f"{len(runs)} replayable runs, {len(skipped)} skipped")
    # Round 1: schedules at datasheet speed; round 2: schedules at the fitted speed.
    replays = {r.run_id: Replay.record(r, DATASHEET) for r in runs}
    datasheet = {r.run_id: replays[r.run_id].predict(factors(DATASHEET)) for r in runs}
    table = fit_table([replays[r.run_id] for r in vllm_runs(runs)], family)
    replays = {r.run_id: Replay.record(r, params_for(table, r)) for r in runs}
    table = fit_table([replays[r.run_id] for r in vllm_runs(runs)], family, table)
    # The shipped table's own predictions come from full simulations, not replays: an open
    # loop at a finite rate batches differently at the fitted factors than when recorded.
    in_sample = {r.run_id: simulate(r, params_for(table, r))[0] for r in runs}
    print(f"joint fit done in {time.perf_counter() - started:.0f} s")
    loso: dict[str, dict[str, float]] = {}
    for sweep in sorted({r.sweep for r in runs}):
        held = [r for r in runs if r.sweep == sweep]
        if not any(r.engine == "vllm" for r in held):  # nothing of it was fitted: the full fit is its LOSO fit
            for run in held:
                loso[run.run_id] = in_sample[run.run_id]
            continue
        others = [replays[r.run_id] for r in vllm_runs(runs, sweep)]
        fold = fit_table(others, family, rounds=3) if fresh_folds else fit_table(others, family, table, rounds=2)
        for run in held:
            loso[run.run_id], _ = simulate(run, params_for(fold, run))
        print(f"  {sweep}", flush=True)
    print(f"leave-one-sweep-out done in {time.perf_counter() - started:.0f} s")
    rows = []
    for run in runs:
        scored = compared(run)
        for metric in run.measured:
            measured = run.measured[metric]
            shown = metric if metric in scored else "queued_ttft_ms"
            rows.append({"record": run.run_id, "sweep": run.sweep, "engine": run.engine, "family": family(run),
                         "generation": generation_of(run), "moe": load_model(run.model).params.is_moe,
                         "setup": f"{run.model} {run.tp}x{run.gpu}", "benchmark": run.benchmark, "metric": shown,
                         "measured": measured, "datasheet": datasheet[run.run_id][metric],
                         "in_sample": in_sample[run.run_id][metric], "loso": loso[run.run_id][metric]})
    for row in rows:
        for key in ("datasheet", "in_sample", "loso"):
            row[f"{key}_error"] = row[key] / row["measured"] - 1.0
    if not fresh_folds:
        write_defaults(table, rows)
        write_records(rows)
    print_tables(rows, skipped)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


def write_defaults(table: FactorTable, rows: list[dict]) -> None:
    header = ["# Default step-model factors (kvplan/sim/step_model.py, kvplan/sim/factor_table.py): hardware",
              "# factors per GPU family, overheads per engine generation, one MoE factor, fitted jointly by",
              "# benchmarks/serving_fidelity.py on the vLLM runs of ../shared/data/serving/serving_benchmarks.jsonl.",
              "# Regenerate with that script; do not edit by hand. residual_* = in-sample relative errors",
              "# (predicted / measured - 1) on the runs of that family or engine: median absolute and worst."]
    residuals: dict[str, list[str]] = {}
    keys = set(table.families) | set(table.engines) | ({MOE_KEY} if table.moe else set())
    for key in keys:
        mine = [r for r in rows if r["engine"] == "vllm"
                and key in ("all", r["family"], r["generation"], MOE_KEY if r["moe"] else None)]
        lines = []
        for metric in [*TARGETS, *MEDIANS, "latency_avg_s"]:
            errors = [abs(r["in_sample_error"]) for r in mine if r["metric"] == metric]
            if errors:
                lines.append(f"residual_{metric}_median_abs = {statistics.median(errors):.4f}")
                lines.append(f"residual_{metric}_max_abs = {max(errors):.4f}")
        residuals[key] = lines
    (profiles_dir() / "step_model_defaults.toml").write_text(table.to_toml(header, residuals))


def write_records(rows: list[dict]) -> None:
    records = [make_record("fidelity", "serving-fidelity", "simulated", f"{r['record']}:{r['metric']}",
                           {k: r[k] for k in ("record", "sweep", "engine", "family", "setup", "benchmark", "metric")},
                           {k: r[k] for k in ("measured", "datasheet", "in_sample", "loso", "datasheet_error",
                                              "in_sample_error", "loso_error")}, {}, baseline=False)
               for r in rows]
    write_jsonl(ROOT / "benchmarks" / "serving_fidelity.jsonl", records)


def _median_abs(rows: list[dict], key: str) -> str:
    values = [abs(r[f"{key}_error"]) for r in rows if math.isfinite(r[f"{key}_error"])]
    return f"{100 * statistics.median(values):.1f}%" if values else "-"


def print_tables(rows: list[dict], skipped: list[tuple[str, str]]) -> None:
    print("\n| metric | engine | figures | datasheet | in-sample | LOSO | LOSO p90 | target |")
    print("|---|---|---|---|---|---|---|---|")
    for metric in ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", *MEDIANS, "latency_avg_s", "queued_ttft_ms"):
        for engine in ("vllm", "sglang"):
            mine = [r for r in rows if r["metric"] == metric and r["engine"] == engine]
            if not mine:
                continue
            errors = sorted(abs(r["loso_error"]) for r in mine)
            p90 = errors[min(len(errors) - 1, int(0.9 * len(errors)))]
            target = TARGETS.get(metric)
            verdict = "-" if target is None or engine != "vllm" else (
                f"<= {100 * target:.0f}%: " + ("met" if statistics.median(errors) <= target else "missed"))
            print(f"| {metric} | {engine} | {len(mine)} | {_median_abs(mine, 'datasheet')} | {_median_abs(mine, 'in_sample')} "
                  f"| {_median_abs(mine, 'loso')} | {100 * p90:.0f}% | {verdict} |")
    print("\n| record | sweep | setup | bench | metric | measured | datasheet | LOSO | LOSO error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['record']} | {r['sweep'][:34]} | {r['setup']} | {r['benchmark']} | {r['metric']} | {r['measured']:.4g} "
              f"| {r['datasheet']:.4g} | {r['loso']:.4g} | {100 * r['loso_error']:+.0f}% |")
    print(f"\nskipped: {', '.join(f'{rid} ({why})' for rid, why in skipped)}")


if __name__ == "__main__":
    sys.exit(main(fresh_folds="--fresh-folds" in sys.argv[1:]))
