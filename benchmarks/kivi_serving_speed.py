"""KIVI in real serving against fp32 and int8 on the same workload, CPU, stories260K.

8 requests of 64 prompt + 128 output tokens, all at t = 0, through the real engine
(paged pool in 32-token blocks, the block size KIVI needs), one torch thread. Formats run
interleaved `--repeat` times and each one's best run counts (other processes on a shared
machine only slow a run down); time is process CPU time, so a loaded machine changes it
little. Printed: output tokens per CPU-second per format and the ratio to fp32.
Run: python benchmarks/kivi_serving_speed.py [MODEL_DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from kvplan.bench import SizingConfig, parse_optimization
from kvplan.core.engine_factory import RealConfig
from kvplan.real.factory import RealEngineFactory
from kvplan.samples import sample_path
from kvplan.workload.request import Request

DEFAULT_MODEL = sample_path("stories260k")  # shipped inside kvplan (kvplan samples)
FORMATS = ("fp32", "int8", "kivi-int4", "kivi-int2")
REQUESTS, PROMPT, OUTPUT = 8, 64, 128


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizing = SizingConfig(
        model=str(args.model),
        gpu="l4",
        kv_dtype="fp32",
        block_size=32,
        kv_cache_gib=0.01,
        max_model_len=512,
    )
    factory = RealEngineFactory(sizing, RealConfig(device="cpu", model_path=str(args.model)))
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for name in FORMATS:
            engine, _ = factory.build(parse_optimization(name))
            started = time.process_time()
            engine.run([Request(i, 0.0, PROMPT, OUTPUT) for i in range(REQUESTS)])
            best[name] = min(best.get(name, float("inf")), time.process_time() - started)
    for name in FORMATS:
        rate = REQUESTS * OUTPUT / best[name]
        print(
            f"{name:10s} {rate:7.0f} output tok/s per CPU-second  "
            f"{best['fp32'] / best[name]:.2f}x fp32"
        )


if __name__ == "__main__":
    main()
