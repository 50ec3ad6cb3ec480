"""Compile kvplan's Triton attention kernels for an H100/H200 (sm_90) without a GPU.

Triton's wheel carries ptxas, so `triton.compile` runs the whole pipeline (TTIR, TTGIR,
LLVM IR, PTX, cubin) on a CPU-only machine. This catches what the interpreter cannot:
type errors of fp8/bf16 tensor-core dots, constexpr misuse, register-spill blow-ups.
Run: python benchmarks/gpu_compile_check.py   (about a minute on 2 cores; prints one line per
kernel)
"""

from __future__ import annotations

import inspect
import os
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from kvplan.kernels import jit_on_first_use  # noqa: E402
from kvplan.kernels.triton_decode import decode_kernel, decode_reduce_kernel  # noqa: E402
from kvplan.kernels.triton_prefill import prefill_kernel  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
# (name, storage, query dtype, scale mode, is_int, values per byte, bits, group_len)
FORMATS = [
    ("bf16", "bf16", "bf16", 0, False, 1, 16, 128),
    ("fp8-e4m3", "fp8e4nv", "bf16", 1, False, 1, 8, 128),
    ("int8", "i8", "bf16", 2, True, 1, 8, 128),
    ("int4", "u8", "bf16", 2, True, 2, 4, 128),
    ("int4-g32", "u8", "fp16", 3, True, 2, 4, 32),
    ("fp32", "fp32", "fp32", 0, False, 1, 32, 128),
]
DOT = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}


def signature(fn, pointers: dict[str, str], constexprs: dict) -> dict[str, str]:
    sig = {}
    for name in inspect.signature(fn).parameters:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = pointers.get(name, "*fp32")
        elif name in ("sm_scale", "softcap"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_one(
    fn, pointers: dict[str, str], constexprs: dict, num_warps: int = 4, num_stages: int = 2
) -> None:
    jitted = jit_on_first_use(fn)
    src = triton.compiler.ASTSource(
        fn=jitted, signature=signature(fn, pointers, constexprs), constexprs=constexprs
    )
    triton.compile(src, target=TARGET, options={"num_warps": num_warps, "num_stages": num_stages})


def main() -> int:
    failures = 0
    for name, storage, qdt, mode, is_int, vpb, bits, glen in FORMATS:
        common = dict(
            HEAD_DIM=128,
            HEAD_DIM_PAD=128,
            BLOCK_SIZE=16,
            SCALE_MODE=mode,
            IS_INT=is_int,
            VPB=vpb,
            BITS=bits,
            GROUP_LEN=glen,
            DOT_DTYPE=DOT[qdt],
            PRECISION="ieee" if qdt == "fp32" else "tf32",
        )
        pointers = {
            "out_ptr": f"*{qdt}",
            "q_ptr": f"*{qdt}",
            "k_ptr": f"*{storage}",
            "v_ptr": f"*{storage}",
            "table_ptr": "*i32",
            "lens_ptr": "*i32",
            "qstart_ptr": "*i32",
        }
        jobs = [
            (
                "decode",
                decode_kernel,
                dict(
                    common,
                    GROUP=4,
                    GROUP_PAD=16,
                    BLOCK_N=64,
                    HAS_SOFTCAP=False,
                    HAS_SINKS=False,
                    NUM_SPLITS=1,
                ),
            ),
            (
                "decode split+sinks+softcap",
                decode_kernel,
                dict(
                    common,
                    GROUP=8,
                    GROUP_PAD=16,
                    BLOCK_N=128,
                    HAS_SOFTCAP=True,
                    HAS_SINKS=True,
                    NUM_SPLITS=8,
                ),
            ),
            (
                "prefill",
                prefill_kernel,
                dict(common, GROUP=4, BLOCK_M=128, BLOCK_N=64, HAS_SOFTCAP=True, HAS_SINKS=True),
            ),
        ]
        for label, fn, constexprs in jobs:
            started = time.perf_counter()
            try:
                compile_one(fn, pointers, constexprs, num_warps=8 if label == "prefill" else 4)
                print(
                    f"ok   {name:9s} {label:28s} {time.perf_counter() - started:5.1f}s", flush=True
                )
            except Exception as err:  # report every failure, not just the first
                failures += 1
                first = str(err).strip().splitlines()
                print(
                    f"FAIL {name:9s} {label:28s} {type(err).__name__}: {' | '.join(first[-6:])}",
                    flush=True,
                )
    try:
        compile_one(
            decode_reduce_kernel,
            {"out_ptr": "*bf16"},
            dict(HEAD_DIM=128, HEAD_DIM_PAD=128, NUM_SPLITS=8, HAS_SINKS=True),
        )
        print("ok   reduce", flush=True)
    except Exception as err:
        failures += 1
        print(f"FAIL reduce {type(err).__name__}: {str(err)[-400:]}", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
