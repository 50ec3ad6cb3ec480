"""A local process pool whose workers never outlive the sweep that started them.

concurrent.futures' pool leaves its workers blocked forever (parent pid 1) when the
parent is killed, and on Ctrl-C it waits for every running point to finish. Here the
pool is terminated (SIGTERM to every worker) as soon as the parent is interrupted
(Ctrl-C, or SIGTERM which kvplan.cli.interrupts turns into an exception), and on Linux
each worker also asks the kernel to send it SIGTERM when its parent dies, so even a
SIGKILL of the parent leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
PR_SET_PDEATHSIG = 1


def _worker_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Pool.terminate() ends a worker at once
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):  # no prctl: terminate() on interrupts still applies
            pass


def run_pool(
    work: Callable[[Any], T], items: Iterable[Any], workers: int, on_result: Callable[[T], None]
) -> None:
    """Call on_result(work(item)) for every item, in completion order, on `workers` processes."""
    pool = multiprocessing.get_context().Pool(workers, initializer=_worker_init)
    try:
        for result in pool.imap_unordered(work, items, chunksize=1):
            on_result(result)
        pool.close()
    except BaseException:  # Ctrl-C, SIGTERM or a failing callback: stop every worker now
        pool.terminate()
        raise
    finally:
        pool.join()
