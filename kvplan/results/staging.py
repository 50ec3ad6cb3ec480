"""The staging folders a report is built in (atomic.swap_folder), and clearing the ones a
killed run left behind.

A report is built in `.kvplan-staging-<folder>-<pid>-<random>` beside its folder and swapped
in whole; the `finally` that removes the staging folder never runs when the process is
killed (SIGKILL, the OOM killer, a power cut). The pid in the name says whose it is: the next
report into a folder of the same name removes the staging folders whose process is gone and
leaves a running report's alone.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

STAGING_PREFIX = ".kvplan-staging-"
# What follows "<prefix><folder>-": the owner's pid, then tempfile.mkdtemp's random letters
# (which hold no dash, so another folder's name that ends in "-<digits>" never matches).
_OWNED = re.compile(r"(\d+)-[a-z0-9_]+")


def staging_prefix(out_dir: Path) -> str:
    """The name prefix of this process's staging folder for `out_dir`."""
    return f"{STAGING_PREFIX}{out_dir.name}-{os.getpid()}-"


def remove_stale_staging(out_dir: Path) -> list[Path]:
    """Remove the staging folders beside `out_dir` that were building it in a process that has
    ended; returns what was removed. Folders of other names, and without an owner's pid in
    their name, are left alone."""
    if os.name != "posix":  # liveness is asked with kill(pid, 0), which Windows lacks
        return []
    prefix = f"{STAGING_PREFIX}{out_dir.name}-"
    try:
        entries = list(out_dir.parent.iterdir())
    except OSError:  # a folder not made yet, or not readable: nothing to clear
        return []
    removed = []
    for entry in entries:
        owner = (
            _OWNED.fullmatch(entry.name[len(prefix) :]) if entry.name.startswith(prefix) else None
        )
        if owner is None or entry.is_symlink() or not entry.is_dir():
            continue
        if _running(int(owner.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: asks whether the process exists, sends nothing
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    except (OverflowError, OSError):  # not a pid this system can hold: nobody's
        return False
    return True
