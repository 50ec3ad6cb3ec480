"""Memory, speed and quality per eviction policy at budgets of 25%, 50% and 75% of the
full cache (issue 16's trade-off table).

Simulated half: the long-reasoning workload on llama-3.1-8b / one L4 (a pool small enough
to bind), the budget a share of its mean final sequence length; the simulator's per-policy memory model gives
mean KV usage, mean concurrency and output tokens/s (modeled). Quality half: stories260K
on TinyStories validation story 0 (171 tokens), the budget the same share of the text;
perplexity, KL(full || policy) and greedy agreement (real). Writes a CSV beside printing.

  python benchmarks/policy_tradeoff.py [--requests 200] [--out policy_tradeoff.csv]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORIES = ROOT.parent / "shared" / "data" / "models" / "stories260K"
POLICIES = ("sliding-window", "streaming", "h2o", "snapkv", "paged-eviction")
SHARES = (0.25, 0.5, 0.75)


def simulated(requests: int) -> list[dict[str, object]]:
    from kvplan.bench import BenchConfig, SizingConfig, run_matrix
    from kvplan.workload import make_workload

    workload = make_workload("long-reasoning", requests, rate=None, arrival="burst", seed=0, max_model_len=8192)
    mean_len = sum(r.prompt_len + r.output_len for r in workload) / len(workload)
    rows = []
    for share in SHARES:
        budget = int(share * mean_len)
        config = BenchConfig(SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=8192), kv_budget=budget)
        for record in run_matrix(config, workload, ["paged", *POLICIES]):
            m = record.metrics
            rows.append({"share": share, "budget": budget, "policy": record.optimization,
                         "kv_usage_mean": m["kv_cache_usage_mean"], "running_mean": m["running_mean"],
                         "output_tokens_per_s": m["output_tokens_per_s"]})
    return rows


def quality() -> list[dict[str, object]]:
    import torch

    from kvplan.core.policies import PolicySpec
    from kvplan.quality.evaluate import evaluate, run_policy
    from kvplan.quality.tokenizer import Llama2cTokenizer
    from kvplan.real.model import load_causal_lm

    text = (STORIES / "tinystories_validation_0.txt").read_text().strip()
    tokens = Llama2cTokenizer(STORIES / "tok512.bin").encode(text)
    model, _ = load_causal_lm("stories260K", str(STORIES / "hf"), None, "fp32", "cpu")
    reference, _ = run_policy(model, tokens, PolicySpec("full"))
    with torch.inference_mode():
        greedy = model.generate(torch.tensor([tokens[:1]]), max_new_tokens=99, min_new_tokens=99,
                                do_sample=False)[0].tolist()
    rows = []
    for share in SHARES:
        budget = int(share * len(tokens))
        for name in POLICIES:
            result = evaluate(model, tokens, PolicySpec(name, budget), reference=reference, greedy=greedy)
            rows.append({"share": share, "budget": budget, "policy": name, "perplexity": result.perplexity,
                         "kl_mean": result.kl_mean, "greedy_agreement": result.greedy_agreement,
                         "kv_bytes_per_seq": result.kv_bytes_per_seq})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("policy_tradeoff.csv"))
    args = parser.parse_args()
    rows = simulated(args.requests)
    if STORIES.is_dir():
        rows += quality()
    fields = sorted({key for row in rows for key in row}, key=lambda k: (k not in ("share", "budget", "policy"), k))
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
