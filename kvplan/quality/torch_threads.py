"""torch's intra-op thread count for one block of work: small tensors (one token at a time,
a narrow model) only pay the threads' synchronization, so the evaluator and the real
runner's CPU steps run them on one thread and give the count back after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `threads` for the block (None: left as they are)."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
