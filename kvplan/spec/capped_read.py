"""Reading a file a user names without trusting its size: at most one byte past a limit is
read, so /dev/zero or a 10 GB file is refused after `limit` bytes, not read whole."""

from __future__ import annotations

from pathlib import Path


def read_capped(path: Path, limit: int) -> bytes:
    """The file's first `limit + 1` bytes: more than `limit` means the file is larger than
    the caller takes, which it refuses in its own words. OSError (and ValueError for a path
    the OS cannot take) as open and read raise them."""
    with path.open("rb") as handle:
        return handle.read(limit + 1)
