"""How a model name was resolved, shown the same way by every command that takes one."""

from __future__ import annotations

from typing import Any

from kvplan.cli.common import console, escape
from kvplan.spec.resolve import ResolvedModel

VIA_LABELS = {
    "profile": "shipped profile",
    "path": "local config",
    "hf-cache": "Hugging Face cache",
    "hub": "Hugging Face Hub",
    "catalog-match": "catalog match",
}


def resolution_record(resolved: ResolvedModel) -> dict[str, Any]:
    files = resolved.checkpoint
    return {
        "via": resolved.via,
        "source": resolved.spec.source,
        "note": resolved.note,
        "weight_dtype_from_name": resolved.weight_hint,
        "checkpoint_bytes": files.total_bytes if files else None,
        "checkpoint_elements": files.elements if files else None,
    }


def render_resolution(resolved: ResolvedModel) -> None:
    """One dim line for a model found outside the shipped profiles; the note in full when a
    catalog entry stands in for what was asked."""
    if resolved.via == "profile":
        return
    line = f"model: {VIA_LABELS[resolved.via]}, {resolved.spec.source}"
    if resolved.note:
        line = f"model: {resolved.note}"
    console.print(f"[dim]{escape(line)}[/]")
