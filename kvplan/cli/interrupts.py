"""SIGTERM handled like Ctrl-C, so `finally` blocks (temporary files, worker pools) run.

Python's default SIGTERM action kills the process on the spot: no cleanup, temporary
files left behind, a process pool's workers orphaned. While a command runs, SIGTERM
raises `Terminated` (a KeyboardInterrupt, so every `except KeyboardInterrupt` cleanup
path handles both) in the main thread instead.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
