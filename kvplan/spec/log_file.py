"""A startup log's text from its file or stdin, read up to MAX_LOG_BYTES: a startup log is
small, and /dev/zero is not a log (server_log.py reads the figures in it)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import IO

from kvplan import MIB
from kvplan.spec.capped_read import read_capped

MAX_LOG_BYTES = 4 * MIB  # a startup log, debug output included, is well under a megabyte


def log_name(source: str) -> str:
    """How messages name the log: the file, or stdin for "-"."""
    return "the log on stdin" if source == "-" else f"log '{source}'"


def read_log(source: str, stdin: IO[bytes] | None = None) -> str:
    """The text of the log file `source` (or of `stdin` for "-"), refused above MAX_LOG_BYTES
    before more than that is read. Bytes that are not UTF-8 are replaced, not refused."""
    name = log_name(source)
    if source == "-":
        data = stdin.read(MAX_LOG_BYTES + 1) if stdin is not None else b""
    else:
        try:
            data = read_capped(Path(source), MAX_LOG_BYTES)
        except (OSError, ValueError) as err:
            reason = getattr(err, "strerror", None) or str(err)
            raise ValueError(
                f"cannot read {name}: {reason}; pass a vLLM or SGLang startup log file, or - for "
                "stdin"
            ) from None
    if len(data) > MAX_LOG_BYTES:
        shown = "LOG" if source == "-" else shlex.quote(source)
        raise ValueError(
            f"{name} is larger than {MAX_LOG_BYTES // MIB} MiB, and a startup log is far smaller; "
            f"pass the server's startup lines (e.g. head -n 5000 {shown} | kvplan explain -)"
        )
    return data.decode("utf-8", errors="replace")
