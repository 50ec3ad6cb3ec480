"""Outputs that appear whole or not at all, and strict JSON.

- `atomic_file(path)`: write a temporary file beside `path`, rename it into place only
  when the block succeeded; on any exception (Ctrl-C and SIGTERM included, see
  kvplan.cli.interrupts) the temporary file is removed and `path` is untouched.
- `restore_on_failure(*paths)`: for a command that writes several outputs in turn (bench
  JSONL then its report): if a later step fails, the earlier outputs get their previous
  content back (or are removed again when they did not exist).
- `swap_folder(out_dir, build)`: build a whole folder in a staging folder beside it and
  exchange the two in one rename (renameat2 RENAME_EXCHANGE on Linux), so a reader or a
  kill never sees half a report.
- `strict_json(obj)`: JSON without NaN/Infinity (strict readers reject them): non-finite
  floats become null, and json's allow_nan=False guards the rest.

File-system errors are raised as ValueError naming the user's path, not the temporary one.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kvplan.results.staging import STAGING_PREFIX, remove_stale_staging, staging_prefix

T = TypeVar("T")
REPORT_SUFFIXES = (".html", ".png", ".csv", ".prom")  # what a kvplan report folder holds


def finite(value: Any) -> Any:
    """value with every NaN/inf float (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def strict_json(obj: Any, **options: Any) -> str:
    return json.dumps(finite(obj), allow_nan=False, **options)


def _path_error(path: Path, err: OSError) -> ValueError:
    reason = err.strerror or type(err).__name__
    return ValueError(
        f"cannot write '{path}': {reason}; check that the folder exists, is writable and that "
        f"'{path}' is not a folder"
    )


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside `path`; renamed onto `path` only if the block succeeds."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(handle)
    except OSError as err:
        raise _path_error(path, err) from None
    temp = Path(name)
    try:
        yield temp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp creates 0600; results are ordinary files
        os.replace(temp, path)
    except OSError as err:
        raise _path_error(path, err) from None
    finally:
        temp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> Path:
    with atomic_file(path) as temp:
        temp.write_text(text, encoding="utf-8")
    return Path(path)


@contextmanager
def restore_on_failure(*paths: str | Path | None) -> Iterator[None]:
    """If the block fails, every path gets back the content it had on entry (and a path
    that did not exist is removed again)."""
    absent = [Path(p) for p in paths if p is not None and not Path(p).exists()]
    with ExitStack() as stack:
        for path in paths:
            if path is not None and Path(path).is_file():
                stack.enter_context(_kept(Path(path)))
        try:
            yield
        except BaseException:
            for path in absent:
                if path.is_file():
                    path.unlink()
            raise


@contextmanager
def _kept(path: Path) -> Iterator[None]:
    backup = path.with_name(f".{path.name}.kvplan-backup")
    backup.unlink(missing_ok=True)
    try:
        os.link(
            path, backup
        )  # a second name for the old content; replacing `path` leaves it intact
    except OSError:  # a file system without hard links
        shutil.copy2(path, backup)
    try:
        yield
    except BaseException:
        os.replace(backup, path)
        raise
    finally:
        backup.unlink(missing_ok=True)


def check_folder_target(out_dir: Path, what: str = "report") -> None:
    """`out_dir` must be absent, empty or a previous kvplan report (it is replaced whole)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(
            f"{what} folder '{out_dir}' exists as a file; pass another --out or remove the file"
        )
    if out_dir.is_dir():
        foreign = [
            p.name
            for p in out_dir.iterdir()
            if not p.name.startswith((".kvplan-", STAGING_PREFIX))
            and not (p.is_file() and p.suffix in REPORT_SUFFIXES)
        ]
        if foreign:
            raise ValueError(
                f"{what} folder '{out_dir}' holds other files ({', '.join(sorted(foreign)[:3])}); "
                "it is replaced as a whole, so pass a new or empty --out folder"
            )


def swap_folder(out_dir: str | Path, build: Callable[[Path], T]) -> T:
    """Run build(staging) and put the staging folder in place of out_dir in one step."""
    out_dir = Path(out_dir)
    check_folder_target(out_dir)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(out_dir)  # what a killed report into this folder left beside it
        staging = Path(tempfile.mkdtemp(prefix=staging_prefix(out_dir), dir=out_dir.parent))
    except OSError as err:
        raise _path_error(out_dir, err) from None
    try:
        result = build(staging)
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp creates 0700; a report is an ordinary folder
        if out_dir.is_dir():
            _exchange(staging, out_dir)  # staging now holds the previous report
        else:
            os.rename(staging, out_dir)
        return result
    except OSError as err:
        raise _path_error(out_dir, err) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _exchange(first: Path, second: Path) -> None:
    """Swap two folders atomically (Linux renameat2); elsewhere, two renames in a row."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        if (
            renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
            == 0
        ):
            return
    aside = second.with_name(f".kvplan-old-{second.name}-{os.getpid()}")
    os.rename(second, aside)
    os.rename(first, second)
    os.rename(aside, first)
