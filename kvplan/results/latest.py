"""Result file names that never collide, and the `latest` pointer `kvplan report` reads.

Every default-named bench run gets its own file, `bench-MODEL-GPU-YYYYMMDD-HHMMSS.jsonl`
(UTC; `-2`, `-3` ... when two runs start within one second), so a second run never
overwrites the first. MODEL and GPU are the resolved profile names as slugs (`name_slug`:
lowercase, `[a-z0-9._-]` only), never the text as typed: "NVIDIA L40S" or an `org/name` id
would put a space or a folder in the path. Beside it, a one-line text file `latest` names the
newest results
file (a plain file, not a symlink, so it survives copies and Windows); `kvplan report`
without arguments reads it. The pointer is rewritten atomically, only after the results
were written.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from kvplan.results.atomic import atomic_file

POINTER_NAME = "latest"
DEFAULT_FOLDER = Path("reports")
_NOT_IN_SLUG = re.compile(r"[^a-z0-9._-]+")


def name_slug(name: str) -> str:
    """A model or GPU name as part of a file name: lowercase, only [a-z0-9._-], each run of
    other characters one '-' ('NVIDIA L40S' -> 'nvidia-l40s', 'org/Model 7B' -> 'org-model-7b');
    no leading or trailing '-' or '.', so it never hides the file or walks up a folder."""
    slug = re.sub(r"-{2,}", "-", _NOT_IN_SLUG.sub("-", name.lower())).strip("-.")
    return slug or "unnamed"


def default_stem(kind: str, *names: str) -> str:
    """KIND-NAME-NAME...: the stem of a default results file, each name a slug."""
    return "-".join([kind, *(name_slug(name) for name in names)])


def timestamped_path(
    folder: Path, stem: str, now: dt.datetime | None = None, suffix: str = ".jsonl"
) -> Path:
    """folder/STEM-YYYYMMDD-HHMMSS.jsonl, with -2, -3 ... appended when that name is taken."""
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    candidate = folder / f"{stem}-{stamp}{suffix}"
    count = 2
    while candidate.exists():
        candidate = folder / f"{stem}-{stamp}-{count}{suffix}"
        count += 1
    return candidate


def write_latest(results: Path) -> Path:
    """Point results.parent/latest at `results` (its name, relative to the folder)."""
    pointer = results.parent / POINTER_NAME
    with atomic_file(pointer) as temp:
        temp.write_text(results.name + "\n")
    return pointer


def read_latest(folder: Path = DEFAULT_FOLDER) -> Path:
    """The results file folder/latest names; ValueError naming the fix when there is none."""
    pointer = folder / POINTER_NAME
    if not pointer.is_file():
        raise ValueError(
            f"no results file given and '{pointer}' does not exist; run `kvplan bench` first "
            "or name a results file: kvplan report FILE.jsonl"
        )
    name = pointer.read_text().strip()
    target = folder / name
    if not name or "/" in name or not target.is_file():
        raise ValueError(
            f"'{pointer}' names '{name}', which is not a results file in {folder}; "
            "name a results file: kvplan report FILE.jsonl"
        )
    return target
