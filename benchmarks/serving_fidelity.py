"""Simulated vs measured: every replayable published run in ../shared/data/serving.

For each record of serving_benchmarks.jsonl that kvplan has profiles for, the simulated
`vllm bench` client replays the run (same model, GPU, TP, dataset, lengths, prompts, rate or
concurrency) and the prediction is compared with the measurement: output tokens/s, mean
TTFT, mean TPOT, and `vllm bench latency`'s batch latency.

Three predictions per record:
  datasheet  - the step model at peak bandwidth / FLOP/s, no overhead (the old roofline);
  in-sample  - the factors of its GPU family fitted on all vLLM runs (the shipped defaults);
  LOSO       - leave-one-sweep-out: the family's factors fitted without this record's sweep.
Only vLLM runs are fitted; SGLang runs are predicted with vLLM's factors and reported apart.
TTFT is compared only where it is not queue-dominated (a concurrency cap or a finite rate).

Writes profiles/step_model_defaults.toml (factors per family + residuals), and
benchmarks/serving_fidelity.jsonl (one fidelity record per run and metric, for
`kvplan report`). Run: python benchmarks/serving_fidelity.py   (a few minutes on 2 cores)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from kvplan.results import make_record, write_jsonl
from kvplan.sim.calibration import Replay, compared, fit_replays, simulate
from kvplan.sim.measured import MeasuredRun, load_dataset
from kvplan.sim.step_model import DATASHEET, FACTOR_NAMES, StepModelParams
from kvplan.spec.profiles import load_gpu, profiles_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "serving" / "serving_benchmarks.jsonl"
TARGETS = {"output_throughput": 0.15, "mean_tpot_ms": 0.15, "mean_ttft_ms": 0.30}


def family(run: MeasuredRun) -> str:
    return load_gpu(run.gpu).family


def factors(params: StepModelParams) -> dict[str, float]:
    return {name: getattr(params, name) for name in FACTOR_NAMES}


def family_fits(replays: dict[str, Replay], runs: list[MeasuredRun], start: dict[str, StepModelParams],
                exclude_sweep: str | None = None, only: set[str] | None = None) -> dict[str, StepModelParams]:
    """Factors per GPU family (and 'all'), fitted on vLLM runs outside `exclude_sweep`."""
    fitted = {}
    train = [r for r in runs if r.engine == "vllm" and r.sweep != exclude_sweep]
    groups = defaultdict(list)
    for run in train:
        groups[family(run)].append(replays[run.run_id])
        groups["all"].append(replays[run.run_id])
    for name, group in groups.items():
        if only is not None and name not in only:
            continue
        first = start.get(name, start.get("all", DATASHEET))
        fitted[name] = DATASHEET.with_factors(fit_replays(group, first), f"fit on {len(group)} vLLM runs")
    return fitted


def pick(fits: dict[str, StepModelParams], run: MeasuredRun) -> StepModelParams:
    return fits.get(family(run)) or fits["all"]


def main() -> int:
    if not DATA.is_file():
        print(f"{DATA} not found: this benchmark needs the shared serving dataset")
        return 0
    started = time.perf_counter()
    runs, skipped = load_dataset(DATA)
    print(f"{len(runs)} replayable runs, {len(skipped)} skipped")
    # Round 1: schedules at datasheet speed; round 2: schedules at the fitted speed.
    replays = {r.run_id: Replay.record(r, DATASHEET) for r in runs}
    datasheet = {r.run_id: replays[r.run_id].predict(factors(DATASHEET)) for r in runs}
    fits = family_fits(replays, runs, {})
    replays = {r.run_id: Replay.record(r, pick(fits, r)) for r in runs}
    fits = family_fits(replays, runs, fits)
    in_sample = {r.run_id: replays[r.run_id].predict(factors(pick(fits, r))) for r in runs}
    print(f"family fits done in {time.perf_counter() - started:.0f} s")
    loso: dict[str, dict[str, float]] = {}
    for sweep in sorted({r.sweep for r in runs}):
        held = [r for r in runs if r.sweep == sweep]
        if not any(r.engine == "vllm" for r in held):  # nothing of it was fitted: the full fit is its LOSO fit
            for run in held:
                loso[run.run_id] = in_sample[run.run_id]
            continue
        # A family with no other vLLM sweep is predicted by the all-family fit.
        wanted = {family(r) if any(o.engine == "vllm" and o.sweep != sweep and family(o) == family(r) for o in runs)
                  else "all" for r in held}
        fold = family_fits(replays, runs, fits, exclude_sweep=sweep, only=wanted)
        for run in held:
            loso[run.run_id], _ = simulate(run, fold.get(family(run)) or fold["all"])
        print(f"  {sweep}: {', '.join(sorted(wanted))}", flush=True)
    print(f"leave-one-sweep-out done in {time.perf_counter() - started:.0f} s")
    rows = []
    for run in runs:
        for metric in compared(run):
            measured = run.measured[metric]
            rows.append({"record": run.run_id, "sweep": run.sweep, "engine": run.engine, "family": family(run),
                         "setup": f"{run.model} {run.tp}x{run.gpu}", "benchmark": run.benchmark, "metric": metric,
                         "measured": measured, "datasheet": datasheet[run.run_id][metric],
                         "in_sample": in_sample[run.run_id][metric], "loso": loso[run.run_id][metric]})
    for row in rows:
        for key in ("datasheet", "in_sample", "loso"):
            row[f"{key}_error"] = row[key] / row["measured"] - 1.0
    write_defaults(fits, rows, runs)
    write_records(rows)
    print_tables(rows, skipped)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


def write_defaults(fits: dict[str, StepModelParams], rows: list[dict], runs: list[MeasuredRun]) -> None:
    lines = ["# Default step-model factors per GPU family (kvplan/sim/step_model.py), fitted by",
             "# benchmarks/serving_fidelity.py on the vLLM runs of ../shared/data/serving/serving_benchmarks.jsonl.",
             "# Regenerate with that script; do not edit by hand. residual_* = in-sample relative errors",
             "# (predicted / measured - 1) of the fit: median absolute and worst.", ""]
    for name in sorted(fits, key=lambda n: (n == "all", n)):
        params = fits[name]
        mine = [r for r in rows if r["engine"] == "vllm" and (name == "all" or r["family"] == name)]
        sweeps = sorted({r["sweep"] for r in mine})
        lines.append(f"[family.{name}]")
        for factor in FACTOR_NAMES:
            lines.append(f"{factor} = {getattr(params, factor):.6g}")
        lines.append(f'fitted_on = "{len(mine)} figures from {len(sweeps)} vLLM sweeps"')
        for metric in TARGETS | {"latency_avg_s": 0}:
            errors = [abs(r["in_sample_error"]) for r in mine if r["metric"] == metric]
            if errors:
                lines.append(f"residual_{metric}_median_abs = {statistics.median(errors):.4f}")
                lines.append(f"residual_{metric}_max_abs = {max(errors):.4f}")
        lines.append("")
    (profiles_dir() / "step_model_defaults.toml").write_text("\n".join(lines))


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
    for metric in ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "latency_avg_s"):
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
    sys.exit(main())
