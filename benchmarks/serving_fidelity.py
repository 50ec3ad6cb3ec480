"""The operator step model against measured serving runs it was not fitted on, and the fit of
its one fitted part (the engines' per-step overheads, kvplan/sim/ops/overhead.py).

Runs:
- every replayable published run of ../shared/data/serving/serving_benchmarks.jsonl (same
  model, GPU, TP, dataset, lengths, prompts, rate or concurrency, engine and version);
- where aiconfigurator-core is installed (kvplan[perf]), up to PER_SWEEP runs of each sweep
  of its silicon sample (kvplan/fit/aic_runs.py: TPOT and throughput at a fixed
  concurrency, measured by NVIDIA on its systems).

Each run is simulated once with zero overhead, recording each step's GPU time (replays);
overheads are then fitted per engine era (kvplan/fit/overhead_fit.py) on:
- every run: the shipped fit (two rounds: open-loop runs are recorded again at the first
  round's overheads), written to profiles/step_overheads.toml;
- every run but one model's, for each model in turn (leave one model out, from scratch, one
  round: a simplification, the held-out runs keep the batching of the zero-overhead
  recording), which predicts that model's runs: the held-out errors.

Bands: per model kind (dense, MoE, MLA, hybrid) and GPU family, the BAND_QUANTILE of the
held-out absolute errors of each figure (groups of at least MIN_BAND_RUNS runs), and per kind
over every family. Their coverage is checked nested: each model's runs against bands made
from the other models' held-out errors only.

Writes profiles/step_overheads.toml and benchmarks/serving_fidelity.jsonl (one record per run
and figure: measured, zero-overhead, in-sample and held-out predictions); `--no-write` writes
nothing. Run: python benchmarks/serving_fidelity.py [--per-sweep N] (about 20 min on 2 cores).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kvplan.fit.aic_runs import aic_runs
from kvplan.fit.measured import MeasuredRun, load_dataset
from kvplan.fit.overhead_fit import fit_overheads, fit_recorded, overhead_for, record
from kvplan.fit.replay import Replay, compared
from kvplan.results import make_record, write_jsonl
from kvplan.sim.ops.overhead import EngineOverhead
from kvplan.sim.ops.shipped import ANY_FAMILY, BAND_FIGURES, FILE_FORMAT, step_kind
from kvplan.spec.resolve import load_gpu, load_model

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "data" / "serving" / "serving_benchmarks.jsonl"
PER_SWEEP = 12
BAND_QUANTILE = 0.75
MIN_BAND_RUNS = 5
FIGURES = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "median_tpot_ms",
           "median_ttft_ms", "latency_avg_s")  # fmt: skip
# The current engines: vLLM 0.10 on, SGLang 0.5 on
CURRENT = {"vllm": (0, 10), "sglang": (0, 5)}


@dataclass(frozen=True)
class Error:
    run: MeasuredRun
    source: str  # "published" or "aiconfigurator"
    metric: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def model_of(run: MeasuredRun) -> str:
    return load_model(run.model).name


def kind_of(run: MeasuredRun) -> str:
    return step_kind(load_model(run.model))


def family_of(run: MeasuredRun) -> str:
    return load_gpu(run.gpu).family


def current(run: MeasuredRun) -> bool:
    release = tuple(int(p) for p in run.engine_version.split(".")[:2] if p.isdigit())
    return not release or release >= CURRENT.get(run.engine, (0, 0))


def collect(per_sweep: int) -> tuple[list[MeasuredRun], dict[str, str]]:
    runs, source = [], {}
    if DATASET.is_file():
        published, _ = load_dataset(DATASET)
        runs += published
        source.update({r.run_id: "published" for r in published})
    sample, _ = aic_runs()
    by_sweep: dict[str, list[MeasuredRun]] = defaultdict(list)
    for run in sample:
        by_sweep[run.sweep].append(run)
    for sweep in sorted(by_sweep):
        mine = by_sweep[sweep]
        chosen = mine[:: max(1, len(mine) // per_sweep)][:per_sweep]
        runs += chosen
        source.update({r.run_id: "aiconfigurator" for r in chosen})
    return runs, source


def _record(run: MeasuredRun) -> tuple[str, Replay | None, str]:
    try:
        return run.run_id, record(run), ""
    except ValueError as err:  # a run kvplan cannot size (no room, a TP the heads refuse)
        return run.run_id, None, str(err).splitlines()[0][:160]


def record_all(runs: list[MeasuredRun]) -> tuple[dict[str, Replay], list[tuple[str, str]]]:
    replays, refused = {}, []
    with ProcessPoolExecutor(2) as pool:
        for index, (run_id, replay, why) in enumerate(pool.map(_record, runs, chunksize=4)):
            if replay is None:
                refused.append((run_id, why))
            else:
                replays[run_id] = replay
            if index % 50 == 0:
                print(f"  recorded {index} / {len(runs)}", file=sys.stderr, flush=True)
    return replays, refused


def errors(
    runs: Iterable[MeasuredRun],
    replays: dict[str, Replay],
    overheads: dict[str, EngineOverhead],
    source: dict[str, str],
) -> list[Error]:
    out = []
    for run in runs:
        ov = overhead_for(overheads, run)
        factors = {"base_s": ov.base_s, "per_seq_s": ov.per_seq_s, "gpu_factor": ov.gpu_factor}
        predicted = replays[run.run_id].predict(factors)
        for metric in compared(run):
            if math.isfinite(predicted.get(metric, math.nan)):
                out.append(Error(run, source[run.run_id], metric, run.measured[metric],
                                 predicted[metric]))  # fmt: skip
    return out


def _fold(args: tuple[str, list[MeasuredRun], dict[str, Replay]]) -> dict[str, EngineOverhead]:
    left_out, runs, replays = args
    return fit_recorded([r for r in runs if model_of(r) != left_out], replays)


def leave_one_model_out(
    runs: list[MeasuredRun], replays: dict[str, Replay], source: dict[str, str]
) -> list[Error]:
    models = sorted({model_of(r) for r in runs})
    with ProcessPoolExecutor(2) as pool:
        fits = list(pool.map(_fold, [(m, runs, replays) for m in models]))
    held: list[Error] = []
    for model, fitted in zip(models, fits):
        held += errors([r for r in runs if model_of(r) == model], replays, fitted, source)
    return held


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)]


def bands(held: list[Error]) -> dict[tuple[str, str], dict[str, float]]:
    """(kind, family or ANY_FAMILY) -> {figure_error, figure_runs}: the BAND_QUANTILE of the
    group's held-out absolute errors, for groups of at least MIN_BAND_RUNS runs."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for e in held:
        if e.metric in BAND_FIGURES:
            kind = kind_of(e.run)
            groups[(kind, family_of(e.run), e.metric)].append(abs(e.error))
            groups[(kind, ANY_FAMILY, e.metric)].append(abs(e.error))
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (kind, family, metric), values in sorted(groups.items()):
        if len(values) >= MIN_BAND_RUNS:
            out[(kind, family)][f"{metric}_error"] = round(quantile(values, BAND_QUANTILE), 4)
            out[(kind, family)][f"{metric}_runs"] = len(values)
    return dict(out)


def band_of(table: dict[tuple[str, str], dict[str, float]], run: MeasuredRun, metric: str):
    for key in ((kind_of(run), family_of(run)), (kind_of(run), ANY_FAMILY)):
        value = table.get(key, {}).get(f"{metric}_error")
        if value is not None:
            return value
    return None


def nested_coverage(held: list[Error]) -> list[tuple[Error, float]]:
    """Each model's held-out errors against bands made from the other models' only."""
    by_model: dict[str, list[Error]] = defaultdict(list)
    for e in held:
        by_model[model_of(e.run)].append(e)
    pairs = []
    for model, mine in by_model.items():
        table = bands([e for e in held if model_of(e.run) != model])
        for e in mine:
            band = band_of(table, e.run, e.metric)
            if band is not None:
                pairs.append((e, band))
    return pairs


def write_toml(fitted: dict[str, EngineOverhead], table, runs: int, source: dict[str, str]) -> None:
    published = sum(1 for s in source.values() if s == "published")
    lines = [
        "# The operator step model's fitted part: each engine era's CPU time per step",
        "# (kvplan/sim/ops/overhead.py), fitted by benchmarks/serving_fidelity.py; and the error",
        "# bands kvplan prints beside modeled figures. Regenerate with that script; do not edit.",
        f'format = "{FILE_FORMAT}"',
        f'source = "{runs} measured runs ({published} published, {runs - published} from '
        "aiconfigurator-core's silicon sample)\"",
        f'band_basis = "leave one model out: {round(100 * BAND_QUANTILE)}% of the held-out runs '
        'of the kind on the family were within"',
        "",
    ]
    for key, ov in sorted(fitted.items()):
        lines += [f'[eras."{key}"]', f"base_s = {ov.base_s:.6g}", f"per_seq_s = {ov.per_seq_s:.6g}",
                  f"gpu_factor = {ov.gpu_factor:.4g}", f'source = "{ov.source}"', ""]  # fmt: skip
    for (kind, family), values in sorted(table.items()):
        lines += ["[[bands]]", f'kind = "{kind}"', f'gpu_family = "{family}"']
        lines += [f"{k} = {v:g}" for k, v in values.items()] + [""]
    (ROOT / "profiles" / "step_overheads.toml").write_text("\n".join(lines))


def write_records(zero: list[Error], in_sample: list[Error], held: list[Error]) -> None:
    """One `fidelity` record per run and figure, as `kvplan report` charts them."""

    def keyed(rows: list[Error]) -> dict[tuple[str, str], float]:
        return {(e.run.run_id, e.metric): e.predicted for e in rows}

    fit, out = keyed(in_sample), keyed(held)
    records = []
    for e in zero:
        key = (e.run.run_id, e.metric)
        values = {"measured": e.measured, "zero_overhead": e.predicted,
                  "in_sample": fit[key], "held_out_model": out[key]}  # fmt: skip
        values.update({f"{k}_error": v / e.measured - 1.0 for k, v in list(values.items())
                       if k != "measured"})  # fmt: skip
        params = {"record": e.run.run_id, "source": e.source, "sweep": e.run.sweep,
                  "engine": e.run.engine, "engine_version": e.run.engine_version or "current",
                  "kind": kind_of(e.run), "family": family_of(e.run),
                  "setup": f"{e.run.model} {e.run.tp}x{e.run.gpu}",
                  "benchmark": e.run.benchmark, "metric": e.metric}  # fmt: skip
        records.append(make_record("fidelity", "serving-fidelity", "simulated",
                                   f"{e.run.run_id}:{e.metric}", params, values, {},
                                   baseline=False))  # fmt: skip
    write_jsonl(ROOT / "benchmarks" / "serving_fidelity.jsonl", records)


def _pct(values: list[float]) -> str:
    if not values:
        return "-"
    a = [abs(v) for v in values]
    within = sum(v <= 0.2 for v in a)
    return f"{statistics.median(a):.0%} ({within}/{len(a)} within 20%)"


def print_summary(label: str, rows: list[Error]) -> None:
    print(f"\n== {label}: median |error| (runs within 20%)")
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for e in rows:
        era = "current" if current(e.run) else "older"
        for kind in (kind_of(e.run), "all"):
            groups[(f"{e.source} {era}", kind, e.metric)].append(e.error)
            groups[(f"both {era}", kind, e.metric)].append(e.error)
    shown = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "latency_avg_s")
    print(f"{'runs':24s} {'kind':7s} " + " ".join(f"{m:>26s}" for m in shown))
    for where in sorted({k[0] for k in groups}):
        for kind in ("all", "dense", "moe", "mla", "hybrid"):
            cells = [_pct(groups.get((where, kind, m), [])) for m in shown]
            if any(c != "-" for c in cells):
                print(f"{where:24s} {kind:7s} " + " ".join(f"{c:>26s}" for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-sweep", type=int, default=PER_SWEEP)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    start = time.time()
    runs, source = collect(args.per_sweep)
    if not runs:
        print("no measured runs: ../shared/data and aiconfigurator-core are both missing")
        return 1
    replays, refused = record_all(runs)
    runs = [r for r in runs if r.run_id in replays]
    print(f"{len(runs)} runs recorded, {len(refused)} refused by kvplan's sizing "
          f"({time.time() - start:.0f} s)", file=sys.stderr)  # fmt: skip
    zero = errors(runs, replays, {}, source)
    fitted = fit_overheads(runs, replays)
    for key, ov in sorted(fitted.items()):
        print(f"{key:14s} base {ov.base_s * 1e3:6.2f} ms  per sequence {ov.per_seq_s * 1e6:6.1f} us"
              f"  GPU factor {ov.gpu_factor:.2f}  ({ov.source})")  # fmt: skip
    in_sample = errors(runs, replays, fitted, source)
    held = leave_one_model_out(runs, replays, source)
    print_summary("zero overhead", zero)
    print_summary("in-sample", in_sample)
    print_summary("leave one model out", held)
    pairs = nested_coverage(held)
    covered = [abs(e.error) <= band for e, band in pairs]
    print(f"\nbands (nested: each model against the other models' bands): cover "
          f"{sum(covered)}/{len(covered)} = {sum(covered) / max(1, len(covered)):.0%} of held-out "
          f"figures, median band {statistics.median(b for _, b in pairs):.0%}")  # fmt: skip
    table = bands(held)
    if not args.no_write:
        write_toml(fitted, table, len(runs), source)
        write_records(zero, in_sample, held)
    print(f"({time.time() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
