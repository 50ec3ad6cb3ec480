"""Every synthetic workload by name: the one entry point the CLI, bench and sweep use
(what each one reads is kinds.py's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvplan.workload import shared_prefix
from kvplan.workload.kinds import CATALOG, SETTINGS, WORKLOAD_KINDS, checked_params, workload_kind
from kvplan.workload.request import Request
from kvplan.workload.synthetic import alpaca, long_reasoning, sharegpt, sharegpt_stats

__all__ = ["CATALOG", "GENERATORS", "WORKLOAD_KINDS", "make_workload"]

GENERATORS: dict[str, Callable[..., list[Request]]] = {
    "sharegpt": sharegpt,
    "alpaca": alpaca,
    "sharegpt-stats": sharegpt_stats,
    "long-reasoning": long_reasoning,
    "system-prompt": shared_prefix.system_prompt,
    "rag": shared_prefix.rag,
    "chat": shared_prefix.chat,
    "few-shot": shared_prefix.few_shot,
}


def make_workload(
    kind: str,
    num_requests: int,
    *,
    rate: float | None,
    arrival: str = "poisson",
    cv: float = 1.0,
    seed: int = 0,
    max_model_len: int = 2048,
    stats_path: str | Path | None = None,
    **settings: Any,
) -> list[Request]:
    """Build a synthetic workload by name: the one entry point the CLI and bench use.

    kind is one of WORKLOAD_KINDS, arrival one of ARRIVALS (see arrivals.py).
    Returns requests sorted by arrival with ids 0..num_requests-1; bad input raises
    ValueError with a one-line message naming the fix. `settings` are generator settings
    (CATALOG lists each kind's; defaults are its generator's, e.g. num_documents 200): the
    kind's own are checked by their rules (checked_params), another kind's are not read.
    The shared-prefix kinds (system-prompt, rag, chat, few-shot; see shared_prefix.py) carry
    real token ids; for chat, rate is session starts per second.
    """
    entry = workload_kind(kind)
    unknown = sorted(set(settings) - SETTINGS)
    if unknown:
        raise TypeError(f"make_workload() got unexpected keyword argument(s) {', '.join(unknown)}")
    chosen = checked_params(kind, {k: v for k, v in settings.items() if k in entry.params})
    if kind == "sharegpt-stats":
        chosen["stats_path"] = stats_path
    return GENERATORS[entry.name](
        num_requests,
        rate=rate,
        arrival=arrival,
        cv=cv,
        seed=seed,
        max_model_len=max_model_len,
        **chosen,
    )
