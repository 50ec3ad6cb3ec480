"""Names a reader can tell apart, and bounded.

A run is named by the settings that differ between the report's runs (its sweep axes
first, then model, GPU, rate, workload ...); its hash is added only where no setting tells
two runs apart. Any text from a results file is shortened before it reaches a chart (a
200 KB name would exhaust the renderer) or the page (where it is escaped and clipped with
a note saying how long it was).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CHART_CHARS = 48  # a label, legend entry or title from a results file, in a chart
PAGE_CHARS = 200  # a name from a results file on the page

# (setting, how a run name shows its value); the order is the order in a name, what a run
# is (model, GPU, workload) before how it was driven. A sweep's axes come first, its rate
# leading. The rate, workload kind and arrival process live in params["workload"]; the rest
# are params keys.
SETTINGS: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("model", str),
    ("gpu", lambda v: f"gpu {v}"),
    ("tp", lambda v: f"tp {v}"),
    ("workload", str),
    ("trace", lambda v: f"trace {v}"),
    ("pods", lambda v: "1 pod" if v == 1 else f"{v} pods"),
    ("rate", lambda v: f"rate {v:g}" if isinstance(v, (int, float)) else f"rate {v}"),
    ("arrival", lambda v: f"{v} arrivals"),
    ("num_requests", lambda v: f"{v:,} requests" if isinstance(v, int) else f"{v} requests"),
    ("kv_cache_gib", lambda v: f"KV {v:g} GiB" if isinstance(v, (int, float)) else f"KV {v}"),
    ("gpu_memory_utilization", lambda v: f"memory utilization {v}"),
    ("kv_format", lambda v: f"KV {v}"),
    ("kv_budget", lambda v: f"budget {v}"),
    ("max_model_len", lambda v: f"max len {v}"),
    ("block_size", lambda v: f"block {v}"),
    ("cpu_cache_gb", lambda v: f"cpu tier {v:g} GB" if isinstance(v, (int, float)) else f"cpu {v}"),
    (
        "disk_cache_gb",
        lambda v: f"disk tier {v:g} GB" if isinstance(v, (int, float)) else f"disk {v}",
    ),
    ("tier_policy", lambda v: f"tier {v}"),
    ("scheduler_max_num_seqs", lambda v: f"max seqs {v}"),
    ("scheduler_max_num_batched_tokens", lambda v: f"batched tokens {v}"),
    ("scheduler_preemption", lambda v: f"{v} preemption"),
    ("step_model", lambda v: f"step model {v}"),
    ("mode", lambda v: f"{v} mode"),
    ("seed", lambda v: f"seed {v}"),
)
WORKLOAD_SETTINGS = {"rate": "rate", "workload": "kind", "arrival": "arrival"}


def clip(text: Any, limit: int = CHART_CHARS) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def page_text(text: Any, limit: int = PAGE_CHARS) -> str:
    """`text` for the page: whole up to `limit` characters, else cut with a note of its length
    (the CSV files keep it whole)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 (cut: {len(text):,} characters)"


def setting(params: dict[str, Any], name: str) -> Any:
    """One run setting from a record's params (None when the run does not say)."""
    workload = params.get("workload")
    if name in WORKLOAD_SETTINGS:
        if isinstance(workload, dict):
            return workload.get(WORKLOAD_SETTINGS[name])
        return workload if name == "workload" else None
    return params.get(name)


def described(name: str, value: Any) -> str:
    """One setting as a run name shows it ("gpu l4", "rate 4"); a setting SETTINGS does not
    list, or a value of an unexpected type, as "name value"."""
    show = dict(SETTINGS).get(name)
    try:
        return show(value) if show else f"{name} {value}"
    except (TypeError, ValueError):
        return f"{name} {value}"


def axis_order(key: str) -> tuple[int, int]:
    """A sweep axis's place in a name: the rate first, then the SETTINGS order."""
    order = [name for name, _ in SETTINGS]
    return (key != "rate", order.index(key) if key in order else len(order))


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def run_names(
    params: dict[str, dict[str, Any]],
    runs: list[str] | None = None,
    shortest: bool = False,
    stated: tuple[str, ...] = (),
    members: dict[str, set[str]] | None = None,
) -> dict[str, str]:
    """Per run id (of `runs`, default all), the settings that differ between those runs
    ("rate 4, gpu h100-80gb"); "" for a lone run. A sweep's axes lead. `shortest`: only the
    settings needed to tell the runs apart, taken in order (for a chart's labels); `stated`:
    settings the caller shows anyway (a heading's model and GPU), left out. Runs no setting
    tells apart add their hash, unless `members` (each run's optimizations, shown beside
    the name) tells them apart: two sweep points that differ only in the optimization."""
    runs = list(dict.fromkeys(params if runs is None else runs))
    if len(runs) < 2:
        return {run: "" for run in runs}
    axes = list(
        dict.fromkeys(
            key
            for run in runs
            for key in (params.get(run, {}).get("sweep") or {})
            if key not in ("optimization", "optimizations")
        )
    )
    order = [name for name, _ in SETTINGS]
    axes.sort(key=axis_order)
    values = {
        name: {run: _hashable(setting(params.get(run, {}), name)) for run in runs}
        for name in dict.fromkeys([*axes, *order])
    }
    differing = [name for name, by_run in values.items() if len(set(by_run.values())) > 1]
    if shortest:
        differing = _telling_apart(differing, values, runs)
    differing = [name for name in differing if name not in stated]
    names = {}
    for run in runs:
        shown = ((name, setting(params.get(run, {}), name)) for name in differing)
        names[run] = ", ".join(described(name, value) for name, value in shown if value is not None)

    def clashes(run: str) -> bool:
        return any(
            other != run
            and names[other] == names[run]
            and (members is None or members.get(run, set()) & members.get(other, set()))
            for other in runs
        )

    return {
        run: (f"{name}, run {run[:6]}" if name else f"run {run[:6]}") if clashes(run) else name
        for run, name in names.items()
    }


def _telling_apart(
    candidates: list[str], values: dict[str, dict[str, Any]], runs: list[str]
) -> list[str]:
    """The candidates, in order, that each split some runs the earlier ones left together."""
    chosen: list[str] = []
    groups = [runs]
    for name in candidates:
        split = [
            [run for run in group if values[name][run] == value]
            for group in groups
            for value in dict.fromkeys(values[name][run] for run in group)
        ]
        if len(split) > len(groups):
            chosen.append(name)
            groups = split
        if all(len(group) == 1 for group in groups):
            break
    return chosen


def members(bench: Any) -> dict[str, set[str]]:
    """Each run's optimizations (bench: the report's frame of bench rows)."""
    return {run: set(group["optimization"]) for run, group in bench.groupby("run_id", sort=False)}


def qualified(optimization: Any, run_name: str | None) -> str:
    """An optimization with its run's name where runs need telling apart: 'paged (rate 4)'."""
    return f"{optimization} ({run_name})" if run_name else str(optimization)
