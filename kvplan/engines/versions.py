"""Engine release numbers as logs and pages write them, and comparisons between them."""

from __future__ import annotations

import re

Version = tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    """'0.10.1.1', 'v0.6.4.post1', '0.9.1.dev705+g01220ce89' -> (major, minor, patch)."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def on_or_after(version: Version | None, release: Version) -> bool:
    """Whether a release has a change; an unknown version (None) is the newest behaviour."""
    return version is None or version >= release


def released_before(text: str | None, release: tuple[int, int, int]) -> bool:
    """Whether version `text` precedes `release` (PEP 440: '0.6.4.dev4' and '0.6.4rc1' come
    before 0.6.4). False when `text` names no version."""
    parsed = parse_version(text)
    if parsed is None:
        return False
    return parsed < release or (
        parsed == release and re.search(r"(dev|rc|a|b)\d", (text or "").split("+")[0]) is not None
    )
