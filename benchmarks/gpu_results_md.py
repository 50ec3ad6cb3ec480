"""Turn a gpu_check.sh output folder into a benchmarks/RESULTS.md section (markdown on stdout).

Run: python benchmarks/gpu_results_md.py FOLDER >> benchmarks/RESULTS.md
Reads env.txt, pytest.txt, decode.csv, prefill.csv and real_bench.jsonl (any may be
missing: the section says so), and checks the targets: decode at batch 64, context
8k, bf16 at >= 70% of HBM peak and faster than SDPA; fp8 >= 1.6x bf16 there; split-KV at
batch 1, context 32k >= 3x faster than without.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open())) if path.is_file() else []


def table(rows: list[dict[str, str]], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    return lines


def find(rows: list[dict[str, str]], **want: str) -> dict[str, str] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in want.items()):
            return row
    return None


def targets(decode: list[dict[str, str]]) -> list[str]:
    out = []
    bf16 = find(decode, batch="64", context="8192", kv="bf16", split_kv="auto")
    fp8 = find(decode, batch="64", context="8192", kv="fp8-e4m3", split_kv="auto")
    if bf16:
        frac, vs = float(bf16["hbm_fraction"]), float(bf16["vs_sdpa"])
        out.append(
            f"- decode batch 64, 8k, bf16: {frac:.0%} of HBM peak (target >= 70%: "
            f"{'met' if frac >= 0.7 else 'missed'}), {vs:.2f}x SDPA's speed (target > 1: "
            f"{'met' if vs > 1 else 'missed'})"
        )
    if bf16 and fp8:
        ratio = float(bf16["ms"]) / float(fp8["ms"])
        out.append(
            f"- fp8 KV vs bf16 at that shape: {ratio:.2f}x faster (target >= 1.6x: "
            f"{'met' if ratio >= 1.6 else 'missed'})"
        )
    on = find(decode, batch="1", context="32768", kv="bf16", split_kv="auto")
    off = find(decode, batch="1", context="32768", kv="bf16", split_kv="off")
    if on and off:
        ratio = float(off["ms"]) / float(on["ms"])
        out.append(
            f"- split-KV at batch 1, 32k, bf16: {ratio:.2f}x faster than one split (target >= 3x: "
            f"{'met' if ratio >= 3 else 'missed'})"
        )
    return out or ["- no decode rows: targets not checked"]


def real_bench(path: Path) -> list[str]:
    if not path.is_file():
        return ["(no real_bench.jsonl: the real-mode bench did not finish; see real_bench.txt)"]
    rows = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        m = record.get("metrics", {})
        rows.append(
            {
                "optimization": record.get("optimization"),
                **{
                    k: (f"{m[k]:.4g}" if isinstance(m.get(k), float) else m.get(k, ""))
                    for k in (
                        "output_tokens_per_s",
                        "ttft_s_p50",
                        "tpot_s_p50",
                        "kv_cache_usage_peak",
                        "waste",
                        "preemptions",
                    )
                },
            }
        )
    return table(rows, list(rows[0])) if rows else ["(empty real_bench.jsonl)"]


def main(folder: Path) -> None:
    env = (
        (folder / "env.txt").read_text().strip()
        if (folder / "env.txt").is_file()
        else "(no env.txt)"
    )
    pytest_tail = (
        (folder / "pytest.txt").read_text().strip().splitlines()[-1:]
        if (folder / "pytest.txt").is_file()
        else ["(no pytest.txt)"]
    )
    decode, prefill = read_csv(folder / "decode.csv"), read_csv(folder / "prefill.csv")
    lines = [
        "",
        "## GPU check (benchmarks/gpu_check.sh)",
        "",
        "```",
        env,
        "```",
        "",
        f"pytest -m gpu: {pytest_tail[0] if pytest_tail else '(empty)'}",
        "",
        "Targets:",
        "",
        *targets(decode),
        "",
        "### Decode: kvplan paged kernel vs torch SDPA on contiguous bf16 KV",
        "",
        *table(
            decode,
            [
                "batch",
                "context",
                "kv",
                "split_kv",
                "ms",
                "gb_per_s",
                "hbm_fraction",
                "sdpa_ms",
                "vs_sdpa",
                "rel_err",
            ],
        ),
        "",
        "### Prefill (causal, fresh prompts)",
        "",
        *table(
            prefill, ["batch", "context", "kv", "ms", "tflops", "sdpa_ms", "sdpa_tflops", "rel_err"]
        ),
        "",
        "### Real mode: random-weight Llama-3.1-8B shape, 4 layers, bf16",
        "",
        *real_bench(folder / "real_bench.jsonl"),
        "",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
