"""Every synthetic workload by name: the one entry point the CLI, bench and sweep use."""

from __future__ import annotations

from pathlib import Path

from kvplan.workload import shared_prefix
from kvplan.workload.request import Request
from kvplan.workload.synthetic import alpaca, long_reasoning, sharegpt, sharegpt_stats

WORKLOAD_KINDS: tuple[str, ...] = (
    "sharegpt",
    "alpaca",
    "sharegpt-stats",
    "long-reasoning",
    "system-prompt",
    "rag",
    "chat",
    "few-shot",
)


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
    system_prompt_len: int = 1024,
    num_system_prompts: int = 1,
    num_documents: int = 200,
    doc_len: int = 1024,
    docs_per_request: int = 1,
    zipf_s: float = 1.1,
    turns_per_session: float = 5.0,
    think_time: float = 10.0,
    num_templates: int = 8,
    template_len: int = 512,
    vocab_size: int = 32000,
) -> list[Request]:
    """Build a synthetic workload by name: the one entry point the CLI and bench use.

    kind is one of WORKLOAD_KINDS, arrival one of ARRIVALS (see arrivals.py).
    Returns requests sorted by arrival with ids 0..num_requests-1; bad input raises
    ValueError with a one-line message naming the fix. The shared-prefix kinds
    (system-prompt, rag, chat, few-shot; see shared_prefix.py) carry real token ids and take
    the keyword arguments after stats_path; for chat, rate is session starts per second.
    """
    common = dict(rate=rate, arrival=arrival, cv=cv, seed=seed, max_model_len=max_model_len)
    if kind == "sharegpt":
        return sharegpt(num_requests, **common)
    if kind == "alpaca":
        return alpaca(num_requests, **common)
    if kind == "long-reasoning":
        return long_reasoning(num_requests, **common)
    if kind == "sharegpt-stats":
        return sharegpt_stats(num_requests, stats_path=stats_path, **common)
    if kind in ("system-prompt", "rag", "chat", "few-shot"):
        common["vocab_size"] = vocab_size
        if kind == "system-prompt":
            return shared_prefix.system_prompt(
                num_requests,
                system_prompt_len=system_prompt_len,
                num_system_prompts=num_system_prompts,
                **common,
            )
        if kind == "rag":
            return shared_prefix.rag(
                num_requests,
                num_documents=num_documents,
                doc_len=doc_len,
                docs_per_request=docs_per_request,
                zipf_s=zipf_s,
                **common,
            )
        if kind == "chat":
            return shared_prefix.chat(
                num_requests, turns_per_session=turns_per_session, think_time=think_time, **common
            )
        return shared_prefix.few_shot(
            num_requests,
            num_templates=num_templates,
            template_len=template_len,
            zipf_s=zipf_s,
            **common,
        )
    raise ValueError(f"unknown workload kind {kind!r}; use one of {', '.join(WORKLOAD_KINDS)}")
