"""All-reduce times for `kvplan profile`: tp processes, one per CUDA device, joined by
torch.distributed (NCCL), each all-reducing tokens x hidden activations as a tensor-parallel
layer does; rank 0 reports the median of repeats at each token count.

Spawned processes (not forked: CUDA cannot be initialized twice in a forked child) meet at a
free local TCP port. The gloo backend runs the same code on CPU tensors, which is how the
tests exercise it on a machine without GPUs.
"""

from __future__ import annotations

import queue
import socket
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

TIMEOUT_S = 600
LAUNCHES = 10  # all-reduces per repeat, back to back
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def all_reduce_seconds(
    hidden: int,
    tp: int,
    tokens: Sequence[int],
    dtype: str,
    repeats: int = 5,
    backend: str = "nccl",
) -> list[float]:
    """Seconds of one all-reduce of t x hidden activations across tp ranks, for each t."""
    context = torch.multiprocessing.get_context("spawn")
    results: Any = context.Queue()
    port = _free_port()
    workers = [
        context.Process(
            target=_rank,
            args=(rank, tp, port, backend, hidden, list(tokens), dtype, repeats, results),
        )
        for rank in range(tp)
    ]
    for worker in workers:
        worker.start()
    try:
        outcome = results.get(timeout=TIMEOUT_S)
    except queue.Empty:
        outcome = f"no result within {TIMEOUT_S} s"
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.terminate()
    if isinstance(outcome, str):
        raise ValueError(f"all-reduce profile at tp {tp} failed: {outcome}")
    return [float(seconds) for seconds in outcome]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _rank(
    rank: int,
    tp: int,
    port: int,
    backend: str,
    hidden: int,
    tokens: list[int],
    dtype: str,
    repeats: int,
    results: Any,
) -> None:
    import torch.distributed as dist

    try:
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=tp
        )
        cuda = backend == "nccl"
        device = torch.device("cuda", rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize(device)
            dist.barrier()

        seconds = []
        for count in tokens:
            activations = torch.ones(count, hidden, dtype=DTYPES[dtype], device=device)
            for _ in range(3):  # warm-up: the communicator's buffers and channels
                dist.all_reduce(activations)
            samples = []
            for _ in range(repeats):
                sync()
                started = time.perf_counter()
                for _ in range(LAUNCHES):
                    dist.all_reduce(activations)
                sync()
                samples.append((time.perf_counter() - started) / LAUNCHES)
            seconds.append(statistics.median(samples))
        if rank == 0:
            results.put(seconds)
        dist.destroy_process_group()
    except Exception as err:  # reported by rank 0's parent in one line
        results.put(f"rank {rank}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
