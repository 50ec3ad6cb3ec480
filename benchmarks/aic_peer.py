"""kvplan beside NVIDIA's aiconfigurator, on the same measured runs and the same planning
question, in one process run.

1. The planning question: Llama-3.1-70B, 4,000-token prompts and 500-token answers at
   4 req/s, TTFT 1 s and TPOT 20 ms, on H100 and H200 at TP 1/2/4/8. aiconfigurator answers
   with `aiconfigurator cli default` once per GPU type (it sizes aggregated and disaggregated
   deployments for a GPU budget; 32 here); kvplan with `kvplan plan` (its SLO by percentile:
   p50 stands for the mean aiconfigurator targets). Printed: each tool's answer and its CPU
   seconds (children's user + system time), and their ratio.
2. The same runs: rows of aiconfigurator-core's silicon sample (whole-server TPOT measured by
   NVIDIA), each estimated by `aiconfigurator cli estimate` in aggregated mode at the row's
   own TP, batch (its concurrency), lengths and quant modes, beside kvplan's prediction of
   that row held out by model (benchmarks/serving_fidelity.jsonl: its fit never saw the
   row's model). A row aiconfigurator refuses is shown with its reason.

Needs `aiconfigurator` (the CLI distribution, e.g. in its own venv: `python -m venv v &&
v/bin/pip install aiconfigurator==0.12.0`); AIC_PEER names its executable (default: on PATH).
Run: python benchmarks/aic_peer.py [--rows N] (about 3 minutes at 24 rows).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvplan.fit.aic_runs import sample_path

ROOT = Path(__file__).resolve().parents[1]
FIDELITY = ROOT / "benchmarks" / "serving_fidelity.jsonl"
QUESTION = {"isl": 4000, "osl": 500, "rate": 4.0, "ttft_ms": 1000, "tpot_ms": 20}
SYSTEMS = {"h100_sxm": "h100-80gb", "h200_sxm": "h200"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[str, float, float]:
    """stdout + stderr, CPU seconds and wall seconds of one command."""
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    return done.stdout + done.stderr, _children_cpu() - cpu, time.perf_counter() - wall


def aic_plan(aic: str, system: str, out: Path) -> tuple[str, float]:
    q = QUESTION
    text, cpu, _ = timed([aic, "cli", "default", "--model-path", "meta-llama/Meta-Llama-3.1-70B",
                          "--total-gpus", "32", "--system", system, "--backend", "vllm",
                          "--isl", str(q["isl"]), "--osl", str(q["osl"]),
                          "--ttft", str(q["ttft_ms"]), "--tpot", str(q["tpot_ms"]),
                          "--target-request-rate", str(q["rate"]),
                          "--save-dir", str(out)])  # fmt: skip
    agg = re.search(r"agg Top Configurations.*?\n\|\s+1\s+\|(.*?)\n", text, re.S)
    answer = "no aggregated configuration"
    if agg:
        cells = [c.strip() for c in agg.group(1).split("|")]
        # rank 1 row: backend, tokens/s/gpu, tokens/s/user, req/s, TTFT, latency, concurrency,
        # total gpus, replicas, gpus/replica, gpus/worker, parallel, bs
        per_replica = float(cells[3]) / float(cells[8])
        replicas = -(-q["rate"] // per_replica)
        answer = (f"aggregated {cells[11]}: {per_replica:.2f} req/s per replica, so "
                  f"{replicas:.0f} x {cells[9]} GPUs for {q['rate']:g} req/s")  # fmt: skip
    return answer, cpu


def kvplan_plan(out: Path) -> tuple[str, float]:
    q = QUESTION
    slo = f"ttft_p50={q['ttft_ms'] / 1000:g}s,tpot_p50={q['tpot_ms']}ms"
    env = {**os.environ, "COLUMNS": "120"}
    text, cpu, _ = timed([sys.executable, "-m", "kvplan", "plan", "llama-3.1-70b", "--workload",
                          "random", "--input-len", str(q["isl"]), "--output-len", str(q["osl"]),
                          "--rate", str(q["rate"]), "--slo", slo,
                          "--gpus", ",".join(SYSTEMS.values()),
                          "--tp", "1,2,4,8", "--out", str(out)], env)  # fmt: skip
    winner = re.search(r"winner: (.*?)\.(?: |$)", " ".join(text.split()))
    return (winner.group(1) if winner else text.strip().splitlines()[-1][:200]), cpu


def held_out_tpot() -> dict[str, float]:
    """kvplan's leave-one-model-out TPOT per silicon-sample row (serving_fidelity.jsonl)."""
    out = {}
    for line in FIDELITY.read_text().splitlines():
        record = json.loads(line)
        params = record["params"]
        if params.get("source") == "aiconfigurator" and params["metric"] == "mean_tpot_ms":
            out[params["record"]] = record["metrics"]["held_out_model"]
    return out


def aic_estimate(aic: str, row: dict[str, str]) -> float | str:
    command = [aic, "cli", "estimate", "--model-path", row["model_path"], "--system",
               row["system"], "--backend", row["backend"], "--isl", row["isl"], "--osl",
               row["osl"], "--batch-size", row["batch_size"], "--tp", row["tp_size"],
               "--estimate-mode", "agg"]  # fmt: skip
    for column, flag in (("moe_tp_size", "--moe-tp-size"), ("moe_ep_size", "--moe-ep-size")):
        if row[column]:
            command += [flag, row[column]]
    if row["gemm_quant_mode"]:
        command += ["--gemm-quant-mode", row["gemm_quant_mode"]]
    if row["moe_quant_mode"] and row["moe_quant_mode"] != row["gemm_quant_mode"]:
        command += ["--moe-quant-mode", row["moe_quant_mode"]]
    text, _, _ = timed(command)
    found = re.search(r"TPOT:\s+([0-9.]+) ms", text)
    if found:
        return float(found.group(1))
    errors = [ln for ln in text.splitlines() if "Error" in ln or "error:" in ln]
    return (errors[-1] if errors else text.strip().splitlines()[-1])[:90]


def same_runs(aic: str, rows: int) -> None:
    kvplan = held_out_tpot()
    path = sample_path()
    if path is None or not kvplan:
        print("same runs: aiconfigurator-core's sample or serving_fidelity.jsonl missing")
        return
    with path.open(newline="") as handle:
        sample = [r for r in csv.DictReader(handle) if r["id"] in kvplan]
    step = max(1, len(sample) // rows)
    chosen = sample[::step][:rows]
    print(f"\n== the same runs: {len(chosen)} rows of the silicon sample, mean TPOT")
    print(f"{'row':58s} {'measured':>9s} {'kvplan':>8s} {'aic':>8s}")
    errors: dict[str, list[float]] = {"kvplan": [], "aiconfigurator": [], "kvplan, same rows": []}
    for row in chosen:
        measured = float(row["silicon_tpot_ms"])
        mine = kvplan[row["id"]]
        theirs = aic_estimate(aic, row)
        errors["kvplan"].append(mine / measured - 1)
        shown = f"{theirs:8.2f}" if isinstance(theirs, float) else "refused"
        if isinstance(theirs, float):
            errors["aiconfigurator"].append(theirs / measured - 1)
            errors["kvplan, same rows"].append(mine / measured - 1)
        print(f"{row['id'][:58]:58s} {measured:9.2f} {mine:8.2f} {shown:>8s}")
        if not isinstance(theirs, float):
            print(f"    aiconfigurator: {theirs}")
    for tool, values in errors.items():
        if values:
            a = [abs(v) for v in values]
            print(f"{tool}: median |error| {statistics.median(a):.0%} over {len(a)} rows, "
                  f"{sum(v <= 0.2 for v in a)} within 20%, median signed "
                  f"{statistics.median(values):+.0%}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=24)
    args = parser.parse_args()
    aic = os.environ.get("AIC_PEER") or shutil.which("aiconfigurator")
    if not aic:
        print("aiconfigurator is not installed (AIC_PEER names its executable); nothing to compare")
        return 1
    with tempfile.TemporaryDirectory() as folder:
        print("== the planning question: Llama-3.1-70B, 4000/500 tokens, 4 req/s, TTFT 1 s, "
              "TPOT 20 ms")  # fmt: skip
        total = 0.0
        for system in SYSTEMS:
            answer, cpu = aic_plan(aic, system, Path(folder) / system)
            total += cpu
            print(f"aiconfigurator on {system}: {answer} ({cpu:.1f} s CPU)")
        answer, cpu = kvplan_plan(Path(folder) / "kvplan")
        print(f"kvplan on {', '.join(SYSTEMS.values())}: {answer} ({cpu:.1f} s CPU)")
        print(f"CPU: kvplan / aiconfigurator = {cpu / total:.2f} (both GPU types)")
    same_runs(aic, args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
