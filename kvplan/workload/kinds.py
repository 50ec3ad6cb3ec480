"""What each synthetic workload reads: its generator settings (--workload-param, each
checked by its rule in kvplan.spec.numbers) and what its rate counts. No numpy here: the
help text and the settings' checks read this before any generator loads (catalog.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.spec.numbers import SHOWN_CHARS, check_number
from kvplan.spec.setting_error import SettingError


@dataclass(frozen=True)
class WorkloadKind:
    name: str
    params: tuple[str, ...] = ()  # the generator settings it takes (make_workload's keywords)
    rate_unit: str = "requests"  # what its rate counts per second

    def describe_params(self) -> str:
        return ", ".join(self.params) if self.params else "none"


CATALOG: dict[str, WorkloadKind] = {
    kind.name: kind
    for kind in (
        WorkloadKind("sharegpt"),
        WorkloadKind("alpaca"),
        WorkloadKind("sharegpt-stats"),
        WorkloadKind("long-reasoning"),
        WorkloadKind(
            "system-prompt",
            ("system_prompt_len", "num_system_prompts", "vocab_size"),
        ),
        WorkloadKind(
            "rag",
            ("num_documents", "doc_len", "docs_per_request", "zipf_s", "vocab_size"),
        ),
        # a session's later turns follow its first one: the rate starts sessions
        WorkloadKind(
            "chat",
            ("turns_per_session", "think_time", "vocab_size"),
            "sessions",
        ),
        WorkloadKind(
            "few-shot",
            ("num_templates", "template_len", "zipf_s", "vocab_size"),
        ),
    )
}
WORKLOAD_KINDS: tuple[str, ...] = tuple(CATALOG)
SETTINGS = frozenset(name for kind in CATALOG.values() for name in kind.params)


def workload_kind(kind: str) -> WorkloadKind:
    if kind not in CATALOG:
        raise ValueError(f"unknown workload kind {kind!r}; use one of {', '.join(WORKLOAD_KINDS)}")
    return CATALOG[kind]


def rate_unit(kind: str) -> str:
    """What a workload's rate counts per second: requests, or sessions for chat (the request
    streams of vLLM's benchmark client and of traces count requests)."""
    return CATALOG[kind].rate_unit if kind in CATALOG else "requests"


def rate_units_help() -> str:
    """'requests (chat: sessions)': the --rate help, from the catalog."""
    others = [f"{k.name}: {k.rate_unit}" for k in CATALOG.values() if k.rate_unit != "requests"]
    return f"requests ({'; '.join(others)})" if others else "requests"


def checked_params(kind: str, params: dict[str, Any], *, flag: bool = False) -> dict[str, Any]:
    """`params` refused unless `kind` reads each one and its value keeps the setting's rule
    (kvplan.spec.numbers: finite, whole where a count is meant, at most the bound that keeps a
    corpus in memory); whole floats (1e3) come back as ints. flag: name them as the
    --workload-param setting (SettingError), else by the parameter (ValueError)."""
    entry = workload_kind(kind)
    checked = {}
    for name, value in params.items():
        if name not in entry.params:
            problem = (
                f"{quoted(name)} is not a setting of the {kind} workload, which would ignore "
                f"it; its settings: {entry.describe_params()}"
            )
            if flag:
                raise SettingError("{params} {problem}", problem=problem)
            raise ValueError(problem)
        checked[name] = check_number(
            name, value, label=None if flag else name, within="params" if flag else None
        )
    return checked


def quoted(text: str) -> str:
    """User text in a message, in quotes and shortened: a name of 200 KB is not repeated."""
    return f"'{text}'" if len(text) <= SHOWN_CHARS else f"'{text[: SHOWN_CHARS - 1]}…'"
