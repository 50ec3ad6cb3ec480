"""Record or check kvplan's outputs byte for byte, so a refactor provably changes no number.

The snapshot runs the example gallery's commands (estimate sweep, bench comparison,
routing, the stories260K memory/quality table where ../shared/data is present, and the
report over them) plus `kvplan bench` on the shipped Mooncake and Azure traces with a
fixed seed, all into one temporary folder, and hashes every result file (JSONL, CSV,
Prometheus text, the HTML page and the PNG charts).

  python benchmarks/behaviour_snapshot.py --record   # writes benchmarks/behaviour_snapshot.json
  python benchmarks/behaviour_snapshot.py            # compares; exits 1 on any difference

Takes about two minutes on 2 cores. The manifest was recorded before the package layout
moved; any later change that alters a figure must re-record it on purpose.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MANIFEST = Path(__file__).with_name("behaviour_snapshot.json")
STORIES = SHARED / "models" / "stories260K"
TRACES = SHARED / "traces"


def commands(out: Path) -> list[list[str]]:
    runs = [
        [
            "estimate",
            "llama-3.1-70b",
            "--sweep",
            "context=1k..128k",
            "--sweep",
            "kv-dtype=bf16,fp8,int4",
            "--sweep",
            "gpu=h100-80gb,h200,a100-80gb",
            "--sweep",
            "tp=2,4,8",
            "--out",
            f"{out}/estimate.jsonl",
        ],
        [
            "bench",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "l4",
            "--rate",
            "3",
            "--num-requests",
            "1000",
            "--optimizations",
            "contiguous-max,contiguous-pow2,contiguous-oracle,paged,paged+fp8",
            "--out",
            f"{out}/bench.jsonl",
        ],
        [
            "bench",
            "--workload",
            "chat",
            "--pods",
            "4",
            "--optimizations",
            "prefix",
            "--gpu",
            "l4",
            "--rate",
            "4",
            "--num-requests",
            "800",
            "--out",
            f"{out}/routing.jsonl",
        ],
    ]
    reports = [f"{out}/bench.jsonl", f"{out}/routing.jsonl", f"{out}/estimate.jsonl"]
    if STORIES.is_dir():
        runs.append(
            [
                "bench",
                "--mode",
                "real",
                "--device",
                "cpu",
                "--model-path",
                str(STORIES / "hf"),
                "--tokenizer",
                str(STORIES / "tok512.bin"),
                "--quality-text",
                str(STORIES / "tinystories_validation_0.txt"),
                "--kv-budget",
                "32",
                "--optimizations",
                "fp32,int8,int4,kivi-int4,sliding-window,streaming,h2o,snapkv,entropy-budget",
                "--out",
                f"{out}/quality.jsonl",
            ]
        )
        reports.append(f"{out}/quality.jsonl")
    runs.append(["report", *reports, "--out", f"{out}/report"])
    if TRACES.is_dir():
        runs.append(
            [
                "bench",
                "--trace",
                str(TRACES / "mooncake_fast25_synthetic_trace.jsonl"),
                "--gpu",
                "h100-80gb",
                "--num-requests",
                "1000",
                "--seed",
                "7",
                "--optimizations",
                "contiguous-oracle,paged,prefix,paged+fp8",
                "--out",
                f"{out}/mooncake.jsonl",
            ]
        )
        runs.append(
            [
                "bench",
                "--trace",
                str(TRACES / "AzureLLMInferenceTrace_conv.csv"),
                "--gpu",
                "a100-40gb",
                "--num-requests",
                "2000",
                "--seed",
                "7",
                "--optimizations",
                "contiguous-max,contiguous-oracle,paged,prefix,offload-cpu",
                "--out",
                f"{out}/azure.jsonl",
            ]
        )
    return runs


def snapshot() -> dict[str, str]:
    # A fixed folder: results and reports record their input paths, which must not vary.
    # A lock keeps two checkouts on one machine from sharing it at the same time.
    out = Path(tempfile.gettempdir()) / "kvplan-behaviour-snapshot"
    with open(f"{out}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _snapshot_into(out)


def _snapshot_into(out: Path) -> dict[str, str]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        for args in commands(out):
            proc = subprocess.run(
                [sys.executable, "-m", "kvplan", *args], cwd=ROOT, capture_output=True, text=True
            )
            if proc.returncode:
                sys.exit(f"kvplan {' '.join(args[:3])} ... failed:\n{proc.stderr}")
        return {
            str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.rglob("*"))
            if path.is_file()
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    digests = snapshot()
    if "--record" in sys.argv:
        MANIFEST.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(digests)} files in {MANIFEST.name}")
        return 0
    expected = json.loads(MANIFEST.read_text())
    changed = sorted(
        name for name in expected.keys() | digests.keys() if expected.get(name) != digests.get(name)
    )
    for name in changed:
        print(f"differs: {name}")
    print(
        f"{len(digests) - len(set(changed) & digests.keys())}/{len(expected)} files byte-identical"
    )
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
