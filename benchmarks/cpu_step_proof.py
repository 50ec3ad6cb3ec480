"""kvplan's operator step model against vLLM 0.32 on this CPU, step for step.

For each proof model (tests/data/step_proof/<name>/config.json: a dense GQA Llama and a
Qwen3-MoE, a few hundred million parameters each, random weights, bfloat16):

1. vLLM's real CPU engine, one thread, runs the scenario (tests/vllm_driver.py --engine real
   --timing): each step's scheduled requests and its wall-clock seconds. The same driver
   process first measures the engine's own time per step on the model's tiny twin
   (cpu_engine_overhead.py), unless --overhead gives a saved result.
2. kvplan schedules the same scenario (`kvplan bench --step-trace`), which must decide every
   step as vLLM did (the pairing is then one to one).
3. `kvplan profile` measures the model's operators on this CPU, one thread, after vLLM has
   finished (the two never share the cores), unless --perf-table NAME=FILE gives a table.
4. predict_step_seconds() times kvplan's steps: each step's operators read off that table
   plus the measured engine time per step.
5. Per model: the median over steps of |predicted - measured| / measured (target <= 25%) and
   the whole run's error (target within 20%).

Run (one command; about 4 minutes on a quiet 2-core machine):
    python benchmarks/cpu_step_proof.py [--quick] [--clock wall|cpu] [--work DIR]
        [--perf-table NAME=FILE ...] [--overhead FILE] [--no-profile]
Writes benchmarks/cpu_step_proof.json (--out): every step measured and predicted. The
timings are wall clock (vLLM's): on a machine busy with other work, --clock cpu scores the
process's CPU time instead (the same on a quiet machine: the run is one thread).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cpu_engine_overhead import overhead_jobs
from cpu_steps import (
    CLOCKS,
    MODELS,
    PROOF_MODELS,
    OverheadFit,
    Score,
    StepShape,
    decode_only,
    decode_points,
    first_difference,
    fit_overhead,
    proof_scenario,
    read_steps,
    run_driver,
    run_kvplan,
    run_profile,
    score,
    step_shapes,
    vllm_python,
)
from rich.console import Console
from rich.table import Table

DEFAULT_OUT = Path(__file__).resolve().parent / "cpu_step_proof.json"
STEP_TARGET = 0.25  # median |error| per step
RUN_TARGET = 0.20  # whole run


@dataclass(frozen=True)
class Size:
    """A proof run's scenario: requests, prompt and output length ranges, token budget."""

    requests: int
    prompt: tuple[int, int]
    output: tuple[int, int]
    max_num_batched_tokens: int


# The models are bfloat16, as vLLM serves a 16-bit model on CPUs. On a CPU without native
# bf16 (AVX2 only) vLLM's oneDNN linear refuses bf16 and falls back to torch's linear, which
# computes at ~10 GFLOP/s on one thread: a prefill token of the dense model costs ~40 ms.
# The full run: 8 requests of 96-256 prompt tokens through a 512-token budget (chunked
# prefill steps, then steps mixing the last chunks with decodes) and 32-64 outputs; about a
# minute of steps for the dense model, half that for the MoE, on one such thread.
FULL = Size(8, (96, 256), (32, 64), 512)
# The test's: 4 requests through a 256-token budget (chunked and mixed steps too), ~20 s.
QUICK = Size(4, (48, 128), (8, 16), 256)


# ----------------------------------------------------------------------------------------
# THE PREDICTION: kvplan's operator step model (kvplan/sim/ops) over the profile's table.
# ----------------------------------------------------------------------------------------
def predict_step_seconds(
    model_config: Path,
    spec: dict[str, Any],
    kvplan_steps: list[dict[str, Any]],
    shapes: list[StepShape],
    overhead: OverheadFit,
    perf_table: Path | None,
) -> list[float]:
    """kvplan's time for each of its steps of the scenario, in seconds, one per line of
    `kvplan_steps` (its `kvplan bench --step-trace` lines, already checked to decide every
    step as vLLM did).

    model_config: the proof model's config.json; spec: the scenario (vllm_driver format:
    block size, pool, batch limits, requests); shapes[i]: what step i computes (decodes and
    their summed context, prefill chunks as (new, before), the sequences that sample: the
    fields of kvplan.core.scheduler.StepPlan the operator model reads); overhead: vLLM's
    measured time per step on this CPU, base_s + per_seq_s x scheduled sequences;
    perf_table: the `kvplan profile` table of this CPU (None: not given).

    Each step: OperatorStepRunner.gpu_time (the step's operators, each read off the table)
    plus the engine's time, added (vLLM's CPU engine runs the step synchronously) and without
    CUDA-graph padding (the driver runs eager). Done here until `kvplan bench` takes a CPU
    device and a measured engine overhead (then: its step trace's t_s differences).
    """
    if perf_table is None:
        raise NotImplementedError("no kvplan profile table to time the operators with")
    from kvplan.core.scheduler import StepPlan
    from kvplan.engines.engine_releases import SAMPLER_BYTES_PER_LOGIT
    from kvplan.sim.ops.build import SAMPLER_PATH
    from kvplan.sim.ops.overhead import EngineOverhead
    from kvplan.sim.ops.profile_source import ProfileSource
    from kvplan.sim.ops.sources import Sources
    from kvplan.sim.ops.step import OperatorStepRunner
    from kvplan.sizing.operators.shapes import model_ops
    from kvplan.spec import parse_kv_format
    from kvplan.spec.resolve import load_gpu, load_model
    from kvplan.spec.roofline import Roofline

    model = load_model(str(model_config))
    kv_format = parse_kv_format("auto", model)  # the model's bf16, as vLLM's "auto" cache
    # The table alone: an operator it lacks fails here instead of falling to a GPU's roofline.
    sources = Sources((ProfileSource.read(perf_table),))
    # The runner's base class wants a roofline; with the table as the only source its GPU
    # (a placeholder) times nothing.
    roofline = Roofline(model, load_gpu("h100-80gb"), 1, kv_format)
    engine = EngineOverhead(overhead.base_s, overhead.per_seq_s, source="measured")
    runner = OperatorStepRunner(
        roofline,
        model_ops(model, 1, kv_format),
        sources,
        engine,
        spec["max_num_batched_tokens"],
        spec["max_num_seqs"],
        spec["max_model_len"],
        SAMPLER_BYTES_PER_LOGIT[SAMPLER_PATH],
        graphs=False,
    )
    seconds = []
    for shape in shapes:
        plan = StepPlan(
            [],
            shape.tokens,
            decode_pairs=shape.decode_context,
            decodes=shape.decodes,
            prefill_chunks=list(shape.chunks),
            samples=shape.samples,
        )
        seconds.append(engine.step(runner.gpu_time(plan), shape.sequences))
    return seconds


# ----------------------------------------------------------------------------------------


@dataclass
class ModelRun:
    """One proof model's run: vLLM's steps, kvplan's schedule, the prediction if wired."""

    name: str
    summary: dict[str, str]
    overhead: OverheadFit
    measured_s: list[float]
    cpu_s: list[float]
    measured_run_s: float
    shapes: list[StepShape]
    schedule_difference: str | None
    predicted_s: list[float] | None = None
    score: Score | None = None
    missing: str | None = None  # why there is no prediction
    decode_steps: list[int] = field(default_factory=list)  # indexes of decode-only steps


def fit_from_file(path: Path, name: str) -> OverheadFit:
    """A saved cpu_engine_overhead.py result's fit for the model, refitted from its points."""
    points = json.loads(path.read_text())["models"][name]["points"]
    return fit_overhead([n for n, _ in points], [t for _, t in points])


def prove(
    size: Size,
    folder: Path,
    models: tuple[str, ...] = MODELS,
    overhead_file: Path | None = None,
    perf_tables: dict[str, Path] | None = None,
    overhead_requests: int = 32,
    overhead_repeats: int = 2,
    clock: str = "wall",
    profile: bool = True,
) -> dict[str, ModelRun]:
    """Measure every model on vLLM (one driver process), profile its operators with `kvplan
    profile` (after vLLM, so the two never share the cores; unless perf_tables holds its
    table, or profile is False: no prediction), schedule it with kvplan, predict."""
    perf_tables = dict(perf_tables or {})
    jobs, overhead_traces = overhead_jobs(models, overhead_requests, overhead_repeats, folder)
    if overhead_file is not None:
        jobs, overhead_traces = jobs[:1], {}  # the warm-up only
    specs = {}
    for name in models:
        # each model's own requests, the same whichever models run beside it
        seed = MODELS.index(name) if name in MODELS else len(MODELS)
        spec = proof_scenario(
            name, size.requests, size.prompt, size.output, size.max_num_batched_tokens, seed
        )
        specs[name] = spec
        jobs.append((spec, folder / f"proof-{name}.jsonl"))
    summaries = run_driver(jobs, folder)[-len(models) :]
    for name in models:
        if name not in perf_tables and profile:
            longest = size.prompt[1] + size.output[1]
            perf_tables[name] = run_profile(
                PROOF_MODELS / name / "config.json",
                folder / f"perf-{name}.json",
                size.max_num_batched_tokens,
                size.requests,
                longest,
            )
    runs = {}
    for name, summary in zip(models, summaries):
        if overhead_file is not None:
            overhead = fit_from_file(overhead_file, name)
        else:
            overhead = fit_overhead(*decode_points(overhead_traces[name], clock))
        theirs = read_steps(folder / f"proof-{name}.jsonl")
        run_cpu = [s["cpu_s"] for s in theirs]
        kv_folder = folder / f"kvplan-{name}"
        kv_folder.mkdir(exist_ok=True)
        config = PROOF_MODELS / name / "config.json"
        ours = run_kvplan(specs[name], config, kv_folder)
        run = ModelRun(
            name=name,
            summary=summary,
            overhead=overhead,
            measured_s=[s[CLOCKS[clock]] for s in theirs],
            cpu_s=run_cpu,
            # the wall clock's run ends at the last step's end; the CPU clock's is its steps
            measured_run_s=theirs[-1]["t_s"] if clock == "wall" else sum(run_cpu),
            shapes=step_shapes(theirs, specs[name]),
            schedule_difference=first_difference(theirs, ours),
            decode_steps=[i for i, s in enumerate(theirs) if decode_only(s)],
        )
        if run.schedule_difference is None:
            try:
                shapes = step_shapes(ours, specs[name])
                table = perf_tables.get(name)
                run.predicted_s = predict_step_seconds(
                    config, specs[name], ours, shapes, overhead, table
                )
                run.score = score(run.measured_s, run.predicted_s, run.measured_run_s)
            except NotImplementedError as e:
                run.missing = str(e)
        else:
            run.missing = f"kvplan's schedule differs from vLLM's: {run.schedule_difference}"
        runs[name] = run
    return runs


def show(runs: dict[str, ModelRun], console: Console) -> None:
    table = Table(
        title="vLLM 0.32 on this CPU (one thread) against kvplan's prediction",
        caption="run: measured; decode: median decode-only step; engine: the measured engine "
        "time per step's share of the run; step err: median |predicted - measured| / measured",
    )
    columns = ("model", "steps", "run (s)", "decode (ms)", "engine")
    columns += ("predicted (s)", "run err", "step err")
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for run in runs.values():
        decodes = [run.measured_s[i] for i in run.decode_steps]
        # what the measured engine time per step makes of the run: the operators' complement
        engine = sum(run.overhead(s.sequences) for s in run.shapes) / sum(run.measured_s)
        row = [run.name, str(len(run.measured_s)), f"{run.measured_run_s:.2f}"]
        row += [f"{statistics.median(decodes) * 1e3:.1f}" if decodes else "-", f"{engine:.0%}"]
        if run.score is not None:
            sc = run.score
            row += [f"{sc.predicted_run_s:.2f}", f"{sc.run_error:+.1%}"]
            row += [f"{sc.median_step_error:.1%}"]
        else:
            row += ["-", "-", "-"]
        table.add_row(*row)
    console.print(table)
    for run in runs.values():
        o = run.overhead
        console.print(
            f"{run.name}: engine time per step {o.base_s * 1e3:.2f} ms + "
            f"{o.per_seq_s * 1e6:.1f} us/seq (scatter {o.scatter_s * 1e3:.2f} ms, "
            f"{o.points} points); CPU / wall {run.summary['cpu_per_wall']}"
        )
        if run.score is not None:
            sc = run.score
            ok = sc.median_step_error <= STEP_TARGET and abs(sc.run_error) <= RUN_TARGET
            console.print(f"  targets (step <= 25%, run within 20%): {'met' if ok else 'MISSED'}")
        if run.missing:
            console.print(f"  no prediction: {run.missing}")


def to_json(runs: dict[str, ModelRun]) -> dict[str, Any]:
    out = {}
    for name, run in runs.items():
        steps = []
        for i, shape in enumerate(run.shapes):
            step = {"step": i + 1, **asdict(shape), "measured_s": run.measured_s[i]}
            step["cpu_s"] = run.cpu_s[i]
            if run.predicted_s is not None:
                step["predicted_s"] = run.predicted_s[i]
            steps.append(step)
        out[name] = {
            "vllm": run.summary["vllm"],
            "measured_run_s": run.measured_run_s,
            "overhead": asdict(run.overhead),
            "score": asdict(run.score) if run.score else None,
            "missing": run.missing,
            "steps": steps,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the test's small scenarios")
    ap.add_argument("--models", default=",".join(MODELS), help="proof models (comma list)")
    ap.add_argument(
        "--perf-table",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a model's `kvplan profile` table to use (default: profile it now)",
    )
    ap.add_argument("--no-profile", action="store_true", help="measure only; predict nothing")
    ap.add_argument("--work", type=Path, help="keep the traces and tables in this folder")
    ap.add_argument("--overhead", type=Path, help="a cpu_engine_overhead.py result to use")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="the step times measured and fitted: wall (vLLM's; the targets') or cpu (the "
        "process's CPU time: the same when the machine is quiet, steadier when it is not)",
    )
    args = ap.parse_args()
    console = Console()
    console.print(f"vLLM python: {vllm_python()}")
    models = tuple(m for m in args.models.split(",") if m)
    tables = {}
    for given in args.perf_table:
        name, sep, path = given.partition("=")
        if not sep:
            ap.error(f"--perf-table takes NAME=FILE, got {given!r}")
        tables[name] = Path(path)
    size = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="kvplan-step-proof-") as scratch:
        folder = args.work or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        runs = prove(size, folder, models, args.overhead, tables, clock=args.clock,
                     profile=not args.no_profile)  # fmt: skip
    show(runs, console)
    args.out.write_text(json.dumps(to_json(runs), indent=1) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
