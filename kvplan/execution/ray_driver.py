"""The Ray executor of `kvplan sweep`: a child process drives Ray, so Ctrl-C returns at once.

Tearing down a local Ray cluster takes ~3 s: Ray's exit hook sleeps 0.5 s, then SIGTERMs
the raylet, GCS, monitor and the rest one after another, waiting up to 1 s for each, and
the core worker's own shutdown adds ~0.8 s at interpreter exit. Skipping that teardown
is no answer either: the raylet dies with its driver, but its agents stay up for a
minute. So the sweep never imports Ray itself. A child process (`python -m
kvplan.execution.ray_driver`) starts or joins the cluster, runs the points and sends each
finished record back through a pipe. On Ctrl-C or SIGTERM the sweep sends the child
SIGTERM and returns at once; the child cancels the sweep's tasks and shuts Ray down
properly on its own. If the sweep is killed outright, the child notices it was orphaned
and does the same. benchmarks/sweep_interrupt.py measures the stop.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from kvplan.spec.setting_error import SettingError

POLL_S = 0.1  # longest wait for a Ray result before the driver checks for a stop request
INIT_GRACE_S = (
    20.0  # how long an orphaned driver waits for ray.init before it exits without Ray's teardown
)
RESULT, DONE, FAILED = "result", "done", "failed"


class _Stop(BaseException):
    """The sweep asked the driver to stop (SIGTERM), or went away."""


def run_on_ray(
    items: Sequence[Any],
    address: str | None,
    on_result: Callable[[Any], None],
    work: Callable[[Any], Any],
) -> None:
    """Call on_result(work(item)) for every item, in completion order, on Ray; `work` is a
    module-level function (pickled by name)."""
    if importlib.util.find_spec("ray") is None:
        raise SettingError("{executor} ray needs Ray: pip install 'kvplan[ray]'")
    read_fd, write_fd = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "kvplan.execution.ray_driver", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            pass_fds=(write_fd,),
        )
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as messages:
        try:
            assert child.stdin is not None
            with child.stdin:
                pickle.dump((work, list(items), address), child.stdin)
            _receive(messages, on_result)
            child.wait()
        except (
            BaseException
        ):  # Ctrl-C / SIGTERM / a failing callback: the child cleans up without us
            if child.poll() is None:
                child.terminate()
            raise


def _receive(messages: BinaryIO, on_result: Callable[[Any], None]) -> None:
    while True:
        try:
            kind, payload = pickle.load(messages)
        except EOFError:
            raise ValueError(
                "the Ray driver process ended without finishing the sweep; "
                "re-run to resume (finished points are kept)"
            ) from None
        if kind == DONE:
            return
        if kind == FAILED:
            raise ValueError(f"Ray executor: {payload}")
        on_result(payload)


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop


def _drive(
    work: Callable[[Any], Any], items: list[Any], address: str | None, out: BinaryIO
) -> None:
    import ray

    parent = os.getppid()
    pending: list[Any] = []
    initialized = threading.Event()
    # ray.init installs Ray's C++ failure-signal handler, which prints a stack dump on SIGTERM;
    # a stop that arrives before ours replaces it would dump onto the sweep's stderr. So SIGTERM
    # is held pending in every thread (the watcher and Ray's own inherit the mask) until our
    # handler is in place, then delivered to it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=_watch_init, args=(parent, initialized), daemon=True).start()
    try:
        # Ray's INFO chatter ("Started a local Ray instance") would land on the sweep's stderr,
        # after the sweep's own last line when a stop races the start; its warnings still show.
        ray.init(
            address=None if address in (None, "local") else address,
            ignore_reinit_error=True,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        initialized.set()
        signal.signal(signal.SIGTERM, _raise_stop)  # ray.init installed its own (sys.exit)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        remote = ray.remote(work)
        pending = [remote.remote(item) for item in items]
        while pending:
            if os.getppid() != parent:  # the sweep stopped (it sent SIGTERM and left) or was killed
                raise _Stop
            ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            if ready:
                _send(out, RESULT, ray.get(ready[0]))
        _send(out, DONE, None)
    except (_Stop, BrokenPipeError, KeyboardInterrupt, SystemExit):
        pass
    except Exception as err:  # e.g. no cluster at --address: one line for the sweep to print
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        try:
            _send(out, FAILED, message)
        except BrokenPipeError:
            pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # nothing interrupts the teardown
        for ref in pending:
            ray.cancel(ref, force=True)
        ray.shutdown()


def _watch_init(parent: int, initialized: threading.Event) -> None:
    """ray.init blocks in C++ where no Python signal handler runs (connecting to a cluster
    that does not answer, it retries for minutes). If the sweep goes away meanwhile, give
    init INIT_GRACE_S to finish (then the main thread shuts Ray down properly), else exit."""
    while not initialized.wait(POLL_S):
        if os.getppid() != parent:
            if not initialized.wait(INIT_GRACE_S):
                os._exit(1)
            return


def _send(out: BinaryIO, kind: str, payload: Any) -> None:
    pickle.dump((kind, payload), out)
    out.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's; it stops us with SIGTERM
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        work, items, address = pickle.load(sys.stdin.buffer)
    except _Stop:
        return
    out = os.fdopen(int(sys.argv[1]), "wb")
    try:
        _drive(work, items, address, out)
    finally:
        try:
            out.close()
        except (
            BrokenPipeError
        ):  # the sweep stopped reading: a last buffered message has nowhere to go
            pass


if __name__ == "__main__":
    main()
