"""vLLM's benchmark figures, under vLLM's names, from a simulated client run.

The one home of these figures. Definitions follow vllm/benchmarks/serve.py
(calculate_metrics) so a user can lay kvplan's block beside a measured one line by line:

- duration: from the benchmark's start (t = 0) to the last response;
- request / output / total token throughput: completed, output tokens, input + output
  tokens over that duration;
- TTFT: first token minus the request's send time; TPOT per request:
  (latency - TTFT) / (output tokens - 1), requests with one output token left out;
  ITL: every gap between consecutive tokens of a request, pooled over requests;
  E2EL: last token minus send time. Mean, median and P99 (numpy percentile), in ms.

`vllm bench throughput` reports requests/s, total tokens/s and output tokens/s over the
elapsed time of one offline batch (everything submitted at t = 0); `vllm bench latency`
reports the average time of one batch of --batch-size requests end to end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvplan.sim.bench_client import ClientRun

TIMED = (
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)


def _stats(name: str, values: list[float]) -> dict[str, float | None]:
    if not values:
        return {f"mean_{name}_ms": None, f"median_{name}_ms": None, f"p99_{name}_ms": None}
    data = np.asarray(values, dtype=float) * 1000.0
    return {
        f"mean_{name}_ms": float(data.mean()),
        f"median_{name}_ms": float(np.median(data)),
        f"p99_{name}_ms": float(np.percentile(data, 99)),
    }


def serving_metrics(run: ClientRun) -> dict[str, Any]:
    """The keys `vllm bench serve --save-result` writes, for the simulated run."""
    finished = run.finished
    duration = run.duration_s or 1e-12
    total_input = sum(s.request.prompt_len for s in finished)
    total_output = sum(s.request.output_len for s in finished)
    ttfts, tpots, e2els = [], [], []
    for seq in finished:
        sent = seq.request.arrival_s
        first, finish = seq.served
        ttfts.append(first - sent)
        e2els.append(finish - sent)
        if seq.request.output_len > 1:
            tpots.append((finish - first) / (seq.request.output_len - 1))
    metrics: dict[str, Any] = {
        "duration": run.duration_s,
        "completed": len(finished),
        "failed": len(run.rejected),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(finished) / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_concurrency": run.max_concurrency,
        "request_rate": run.request_rate,
    }
    metrics.update(_stats("ttft", ttfts))
    metrics.update(_stats("tpot", tpots))
    if run.itls is not None:
        metrics.update(_stats("itl", run.itls))
    else:  # without token times only the pooled mean is known: total decode time over gaps
        gaps = sum(s.request.output_len - 1 for s in finished)
        metrics.update(
            {
                "mean_itl_ms": 1000.0 * sum(s.served[1] - s.served[0] for s in finished) / gaps
                if gaps
                else None,
                "median_itl_ms": None,
                "p99_itl_ms": None,
            }
        )
    metrics.update(_stats("e2el", e2els))
    return metrics


def offline_metrics(run: ClientRun) -> dict[str, Any]:
    """`vllm bench throughput` and `vllm bench latency` figures for a batch sent at t = 0."""
    finished = run.finished
    elapsed = run.duration_s or 1e-12
    prompt = sum(s.request.prompt_len for s in finished)
    output = sum(s.request.output_len for s in finished)
    return {
        "elapsed_time": run.duration_s,
        "num_requests": len(finished),
        "requests_per_second": len(finished) / elapsed,
        "tokens_per_second": (prompt + output) / elapsed,
        "output_tokens_per_second": output / elapsed,
        "avg_latency": run.duration_s,
    }


def format_serving_block(metrics: dict[str, Any], label: str = "modeled by kvplan") -> str:
    """vLLM's printed "Serving Benchmark Result" block, same labels and layout."""
    row = "{:<40} {:<10}".format
    num = "{:<40} {:<10.2f}".format
    lines = [
        "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
        f"({label})",
        row("Successful requests:", metrics["completed"]),
        row("Failed requests:", metrics["failed"]),
    ]
    if metrics.get("max_concurrency") is not None:
        lines.append(row("Maximum request concurrency:", metrics["max_concurrency"]))
    rate = metrics.get("request_rate")
    if rate is not None and rate != float("inf"):
        lines.append(num("Request rate configured (RPS):", rate))
    lines += [
        num("Benchmark duration (s):", metrics["duration"]),
        row("Total input tokens:", metrics["total_input_tokens"]),
        row("Total generated tokens:", metrics["total_output_tokens"]),
        num("Request throughput (req/s):", metrics["request_throughput"]),
        num("Output token throughput (tok/s):", metrics["output_throughput"]),
        num("Total token throughput (tok/s):", metrics["total_token_throughput"]),
    ]
    for key, name, header in TIMED:
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        for stat, word in (("mean", "Mean"), ("median", "Median"), ("p99", "P99")):
            value = metrics.get(f"{stat}_{key}_ms")
            lines.append(
                num(f"{word} {name} (ms):", value)
                if value is not None
                else row(f"{word} {name} (ms):", "n/a")
            )
    lines.append("=" * 50)
    return "\n".join(lines)
