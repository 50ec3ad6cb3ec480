"""Memory, speed and quality per eviction policy at budgets of 25%, 50% and 75% of the
full cache (the trade-off table), written as results files and an HTML report.

Simulated half: the long-reasoning workload on llama-3.1-8b / one L4 (a pool small enough
to bind), the budget a share of its mean final sequence length; the simulator's per-policy
memory model gives KV held, mean concurrency and output tokens/s (modeled); h2o-holes is
H2O with its holes left in place (bounded: no block frees while its sequence lives).
Quality half: stories260K on TinyStories validation story 0 (171 tokens), the budget the
same share of the text; perplexity, KL(full || policy) and greedy agreement (real).
`kvplan report DIR/*.jsonl` joins the two per policy and share (kvplan/report/policies.py).

  python benchmarks/policy_tradeoff.py [--requests 200] [--out-dir reports/policy-tradeoff]
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORIES = ROOT.parent / "shared" / "data" / "models" / "stories260K"
POLICIES = ("sliding-window", "streaming", "h2o", "snapkv", "paged-eviction")
SIMULATED_ONLY = ("h2o-holes",)  # quality equals h2o's: only the memory layout differs
SHARES = (0.25, 0.5, 0.75)


def simulated(requests: int, out_dir: Path) -> list[Path]:
    from kvplan.bench import BenchConfig, SizingConfig, run_matrix
    from kvplan.results import write_jsonl
    from kvplan.workload import make_workload

    workload = make_workload(
        "long-reasoning", requests, rate=None, arrival="burst", seed=0, max_model_len=8192
    )
    mean_len = sum(r.prompt_len + r.output_len for r in workload) / len(workload)
    paths = []
    for share in SHARES:
        budget = int(share * mean_len)
        config = BenchConfig(
            SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=8192), kv_budget=budget
        )
        records = run_matrix(config, workload, ["paged", *POLICIES, *SIMULATED_ONLY])
        paths.append(write_jsonl(out_dir / f"simulated-{round(100 * share)}.jsonl", records))
    return paths


def quality(out_dir: Path) -> list[Path]:
    from kvplan.bench.quality import run_quality_table
    from kvplan.quality.run import load_tokens

    text, tokenizer = STORIES / "tinystories_validation_0.txt", STORIES / "tok512.bin"
    count = len(load_tokens(text, tokenizer, str(STORIES / "hf")))
    paths = []
    for share in SHARES:
        run = run_quality_table(
            "stories260K",
            STORIES / "hf",
            None,
            "cpu",
            "fp32",
            0,
            ["fp32", *POLICIES],
            text,
            tokenizer,
            int(share * count),
            None,
            out_dir / f"quality-{round(100 * share)}.jsonl",
        )
        paths.append(run.out)
    return paths


def main() -> None:
    from kvplan.report import write_report
    from kvplan.report.data import load
    from kvplan.report.policies import policy_tradeoff

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--out-dir", type=Path, default=Path("reports/policy-tradeoff"))
    args = parser.parse_args()
    results = args.out_dir / "results"
    results.mkdir(parents=True, exist_ok=True)
    paths = simulated(args.requests, results)
    if STORIES.is_dir():
        paths += quality(results)
    print(policy_tradeoff(load(paths)).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    written = write_report(paths, args.out_dir / "report")
    print(f"wrote {written.index} (charts: {', '.join(written.charts)})")


if __name__ == "__main__":
    main()
