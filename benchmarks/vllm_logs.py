"""kvplan's memory model against real vLLM / SGLang startup logs.

For each log in ../shared/data/serving/vllm_startup_logs.jsonl (plus the vLLM issue #12330
fixture in tests/data): what `kvplan explain` parsed, kvplan's prediction of the KV capacity
the server printed ("GPU KV cache size" tokens, "# GPU blocks", the refusal's token count or
SGLang's #tokens) from the model name, the GPU and the logged settings, and the error.

Fitting (`--fit` rewrites profiles/memory_model.toml): each mechanism parameter is fitted on
the logs that print that component directly (activation peak, non-torch memory, CUDA-graph
memory), never on the KV figure being predicted. Every scored row is also predicted
leave-one-out (the parameters refitted without anything that log printed): the LOO column,
which the summary line uses. (An earlier per-extra-TP-rank non-torch term,
which no log prints, was fitted on the TP > 1 logs' KV figures themselves; it is gone: V1 takes
its baseline after NCCL is set up, so NCCL memory is outside what it counts.)

Run: python benchmarks/vllm_logs.py [--fit]
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from kvplan import GIB
from kvplan.engines.memory_model import (
    MemoryFit,
    activation_elements_per_token,
    dequantized_weight_bytes,
    load_memory_fit,
)
from kvplan.logs.log_capacity import (
    capacity_from_log,
    in_unit,
    logged_capacity,
    logged_kv_bytes,
)
from kvplan.logs.log_setup import ServerSetup, predict_capacity, server_setup
from kvplan.spec import parse_kv_format
from kvplan.spec.profiles import profiles_dir
from kvplan.spec.resolve import resolve_model
from kvplan.spec.roofline import Roofline
from kvplan.spec.server_log import ServerLog, parse_server_log

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT.parent / "shared" / "data" / "serving" / "vllm_startup_logs.jsonl"
FIXTURE = ROOT / "tests" / "data" / "vllm_issue_12330.log"
# Physical bytes per logit element in v0's sampler pass (not fitted): v0 sorts fp32 logits
# for top-k/top-p (values 4 + int64 indices 8) and keeps fp32 logits, probs and logprobs
# (4 + 4 + 4). V1's bytes per top-k/top-p path are kvplan/engines/engine_releases.py's.
SAMPLER_V0 = 24.0
# The #12330 fixture is kvplan's own explain test input (a bug report's log, activation peak
# 9.37 GiB for an 8B model), scored beside the dataset but never a calibration source.
FIXTURE_ID = "issue12330"
_CAPACITY_FIELDS = (
    "gpu_kv_cache_tokens",
    "num_gpu_blocks",
    "max_tokens_in_kv_from_error",
    "sglang_kv_tokens_allocated",
    "sglang_max_total_num_tokens",
)


def records() -> list[dict]:
    rows = [json.loads(line) for line in LOGS.read_text().splitlines() if line.strip()]
    fixture = {
        "id": FIXTURE_ID,
        "quote": FIXTURE.read_text(),
        "model": "meta-llama/Meta-Llama-3-8B",
        "gpu": "A100 40GB",
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": None,
        "max_model_len": None,
        "caveats": "",
        "notes": "vLLM issue #12330 (Jan 2025)",
    }
    return rows + [fixture]


def _named_model(annotation: str | None) -> str | None:
    """The model a record names, as a user would pass it. The dataset follows a name with its
    caveats ("Llama 3.1 8B (user-stated ...)", "MiniMax-M2 series (PR adds ...)"): the text
    before the parenthesis, else its first word, whichever resolves."""
    if not annotation or not annotation.strip():
        return None
    before = annotation.split(" (")[0].strip()
    for name in (before, before.split()[0]):
        try:
            resolve_model(name)
        except ValueError:
            continue
        return name
    return before


def setup_for(record: dict) -> tuple[ServerLog, ServerSetup]:
    log = parse_server_log(record["quote"])
    tp = log.tensor_parallel_size or record.get("tensor_parallel_size") or record.get("num_gpus")
    filled = replace(
        log,
        tensor_parallel_size=tp,
        gpu_memory_utilization=log.gpu_memory_utilization or record.get("gpu_memory_utilization"),
        max_model_len=log.max_model_len or record.get("max_model_len"),
        # the record's names fill the log's as text the log printed (resolved leniently: a
        # name that does not resolve leaves the log unsized, with the reason), not as names a
        # user typed, which must resolve
        model=log.model or _named_model(record.get("model")),
        gpu_name=record.get("gpu") or log.gpu_name,
    )
    return log, server_setup(
        filled,
        version=record.get("engine_version"),
        date=record.get("source_date"),
    )


def logged_figures(log: ServerLog, reported: dict | None) -> ServerLog:
    """The log with the record's `reported` capacity figures where it shows several (rec005
    prints the blocks before and after a fix; the record names the one that stands)."""
    if not reported:
        return log
    return replace(
        log, **{k: v for k, v in reported.items() if k in _CAPACITY_FIELDS and v is not None}
    )


def weights_bytes(setup: ServerSetup) -> float:
    gpu = setup.gpu
    return Roofline(
        setup.model, gpu, setup.tp, parse_kv_format("bf16"), setup.weight_dtype
    ).weight_bytes_per_gpu


def fit(rows: list[tuple[dict, ServerLog, ServerSetup]], skip: str | None = None) -> MemoryFit:
    """Each parameter from the logs that print its component (see module docstring)."""
    scales, non_torch, graphs = [], [], []
    for record, log, setup in rows:
        if record["id"] in (skip, FIXTURE_ID):
            continue
        if log.non_torch_gib is not None:
            non_torch.append(log.non_torch_gib)
        if log.cuda_graph_gib is not None:
            graphs.append(log.cuda_graph_gib)
        activation = log.peak_activation_gib
        if (
            activation is None
            and log.peak_torch_memory_gib is not None
            and log.weights_gib is not None
        ):
            activation = (
                log.peak_torch_memory_gib - log.weights_gib
            )  # the ~0.6.4 line counts weights in
        if activation is None or setup.model is None or setup.engine != "vllm-v0":
            continue
        tokens = max(setup.max_model_len or 2048, 2048)
        sampler = 256 * setup.model.vocab_size * SAMPLER_V0
        forward = activation * GIB - sampler - dequantized_weight_bytes(setup.model, setup.tp)
        scales.append(forward / (tokens * activation_elements_per_token(setup.model, setup.tp) * 2))
    return MemoryFit(
        statistics.median(scales),
        SAMPLER_V0,
        statistics.median(non_torch),
        statistics.median(graphs),
        "",
    )


def evaluate(rows, fit_now: MemoryFit) -> list[dict]:
    results = []
    for record, log, setup in rows:
        log = logged_figures(log, record.get("reported"))
        row = {
            "id": record["id"],
            "engine": setup.engine,
            "model": setup.model_match or "-",
            "gpu": setup.gpu.name
            if setup.gpu
            else ("log total" if setup.logged_total_bytes else "-"),
            "tp": setup.tp,
            "status": "",
            "unit": "",
            "logged": None,
            "predicted": None,
            "error": None,
            "loo_error": None,
            "kv_gib_logged": log.available_kv_gib,
            "kv_gib_predicted": None,
            "kv_arith_error": None,
            "shown_error": None,  # from what the log shows: arithmetic on its KV memory, else LOO
            "shown_basis": "",
            "caveats": record.get("caveats") or "",
        }
        figure = logged_capacity(log)
        if setup.model is None:
            row["status"] = (
                "not sizeable: " + (setup.model_failure or "no model named").split(": tried")[0]
            )
        elif not setup.known and logged_kv_bytes(log) is None:
            row["status"] = (
                f"not sizeable: GPU '{record.get('gpu') or log.gpu_name}' unknown and no total "
                "memory logged"
            )
        elif figure is None:
            row["status"] = "no KV capacity figure printed"
        shown = capacity_from_log(log, setup, fit=fit_now)
        if shown is not None and shown.basis == "logged KV memory":
            # The engine's KV arithmetic alone: from the memory the log says it had to the
            # tokens or blocks it printed (needs the model only, not the GPU).
            row.update(kv_arith_error=shown.error_pct, shown_error=shown.error_pct)
            row["shown_basis"] = "KV memory"
            if not setup.known:
                row.update(
                    status="scored from the logged KV memory",
                    unit=figure.unit,
                    logged=figure.value,
                    predicted=shown.predicted,
                    error=shown.error_pct,
                )
        if setup.known and setup.model is not None:
            prediction = predict_capacity(setup, fit=fit_now)
            row["kv_gib_predicted"] = round(prediction.kv_bytes / GIB, 2)
            if figure is not None:
                predicted = in_unit(prediction, figure.unit)
                row.update(
                    unit=figure.unit,
                    logged=figure.value,
                    predicted=predicted,
                    error=_error(predicted, figure.value),
                )
                if not row["status"]:
                    held_out = fit(ROWS, skip=record["id"])
                    redo = in_unit(predict_capacity(setup, fit=held_out), figure.unit)
                    row["loo_error"] = _error(redo, figure.value)
                    if row["shown_error"] is None:
                        row.update(shown_error=row["loo_error"], shown_basis="memory model")
        row["status"] = row["status"] or "scored"
        results.append(row)
    return results


def _error(predicted: float, logged: float) -> float:
    if not logged:
        return 0.0 if predicted == logged else 100.0
    return (predicted - logged) / logged * 100


def write_fit(new: MemoryFit, results: list[dict]) -> None:
    lines = [
        "# vLLM / SGLang startup memory model: fitted mechanism parameters "
        "(kvplan/engines/memory_model.py).",
        "# Written by `python benchmarks/vllm_logs.py --fit` from "
        "../shared/data/serving/vllm_startup_logs.jsonl",
        "# and tests/data/vllm_issue_12330.log. Each parameter is the median of the logs that "
        "print its",
        "# component; sampler bytes per logit are physical counts, not fitted (see the benchmark).",
        "",
        "[fit]",
    ]
    for name in (
        "activation_scale",
        "sampler_bytes_per_logit_v0",
        "non_torch_gib",
        "cuda_graph_gib",
    ):
        lines.append(f"{name} = {getattr(new, name):.4f}")
    lines.append(
        'source = "medians over the shipped vLLM/SGLang startup logs (benchmarks/vllm_logs.py)"'
    )
    lines += [
        "",
        "# Residual per log: predicted - logged KV capacity, % (LOO: refitted without the row)",
        "[residuals]",
    ]
    for row in results:
        if row["error"] is not None:
            loo = f", loo_pct = {row['loo_error']:.2f}" if row["loo_error"] is not None else ""
            lines.append(
                f'{row["id"]} = {{ unit = "{row["unit"]}", logged = {row["logged"]}, predicted = '
                f"{row['predicted']}, "
                f'error_pct = {row["error"]:.2f}{loo}, status = "{row["status"]}" }}'
            )
    (profiles_dir() / "memory_model.toml").write_text("\n".join(lines) + "\n")


def main() -> None:
    global ROWS
    if not LOGS.exists():
        print(f"skipped: {LOGS} is absent")
        return
    ROWS = [(record, *setup_for(record)) for record in records()]
    current = fit(ROWS) if "--fit" in sys.argv else load_memory_fit()
    results = evaluate(ROWS, current)
    if "--fit" in sys.argv:
        write_fit(current, results)
        load_memory_fit.cache_clear()
    print(
        f"{'log':<11} {'engine':<8} {'model':<22} {'gpu':<10} {'tp':>2} {'logged':>10} "
        f"{'kvplan':>10} "
        f"{'err %':>7} {'LOO %':>7} {'shown %':>7} {'KV GiB log/kvplan':>18}  status"
    )
    for r in results:
        err = f"{r['error']:+.1f}" if r["error"] is not None else "-"
        loo = f"{r['loo_error']:+.1f}" if r["loo_error"] is not None else ""
        arith = f"{r['shown_error']:+.1f}" if r["shown_error"] is not None else ""
        kv = "/".join(
            "-" if r[key] is None else str(r[key]) for key in ("kv_gib_logged", "kv_gib_predicted")
        )
        logged = (
            f"{r['logged']:,} {r['unit'][0]}" if r["logged"] is not None else "-"
        )  # t(okens), b(locks), G(iB)
        predicted = f"{r['predicted']:,}" if r["predicted"] is not None else "-"
        print(
            f"{r['id']:<11} {r['engine']:<8} {r['model'][:22]:<22} {r['gpu'][:10]:<10} "
            f"{r['tp']:>2} {logged:>10} "
            f"{predicted:>10} {err:>7} {loo:>7} {arith:>7} {kv:>18}  {r['status']}"
        )
        worst = r["loo_error"] if r["loo_error"] is not None else r["error"]
        if r["caveats"] and (
            not r["status"].startswith("scored") or worst is None or abs(worst) > 10
        ):
            print(
                f"{'':<11} the record says: {r['caveats'][:150]}"
            )  # its own reason, not a verdict here
    shipped = [r for r in results if r["id"] != FIXTURE_ID]
    scored = [r for r in shipped if r["status"].startswith("scored")]
    sizeable = [r for r in shipped if not r["status"].startswith("not sizeable")]
    print(
        f"\nparsed {len(results)} logs without error ({len(shipped)} shipped + the #12330 "
        "fixture); "
        f"sizeable from what they show: {len(sizeable)}/{len(shipped)} = "
        f"{len(sizeable) / len(shipped):.0%} "
        f"(target >= 90%); scored (a KV figure printed): {len(scored)}"
    )
    shown = [r for r in scored if r["shown_error"] is not None]
    if shown:
        within = sum(abs(r["shown_error"]) <= 10 for r in shown)
        by_memory = sum(r["shown_basis"] == "KV memory" for r in shown)
        print(
            "from what each log shows (the engine's arithmetic on its logged KV memory for "
            f"{by_memory}, "
            f"kvplan's memory model, leave-one-out, for {len(shown) - by_memory}): within +-10%: "
            f"{within}/{len(shown)} = {within / len(shown):.0%} (target >= 80%)   median |error| "
            f"{statistics.median(abs(r['shown_error']) for r in shown):.1f}%"
        )
    errors = [abs(r["loo_error"] if r["loo_error"] is not None else r["error"]) for r in scored]
    if errors:
        within = sum(e <= 10 for e in errors)
        print(
            "memory model alone (model, GPU and settings, not the logged KV memory): within "
            "+-10%: "
            f"{within}/{len(errors)} = {within / len(errors):.0%}   median |error| "
            f"{statistics.median(errors):.1f}%   [leave-one-out figures]"
        )
    fixture = next(r for r in results if r["id"] == FIXTURE_ID)
    if fixture["predicted"] is not None:
        print(
            "issue #12330 fixture (Llama-3-8B, A100-40GB, vllm-v0, no overrides): kvplan "
            f"{fixture['predicted']:,} "
            f"blocks vs logged {fixture['logged']:,} ({fixture['error']:+.1f}%)"
        )
    print(f"fit: {current}")


ROWS: list = []

if __name__ == "__main__":
    main()
