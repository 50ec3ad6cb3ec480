"""The max_model_len a run's request stream gets when none is set, and the refusal of a
stream the engine would reject for its length (`kvplan plan`: a plan serves the whole
workload). bench, sweep and plan build their streams through kvplan.bench.workloads, which
reads the default here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.engines.pool_sizing import DEFAULT_MAX_MODEL_LEN, model_max_len
from kvplan.spec import ModelSpec
from kvplan.spec.setting_error import SettingError

if TYPE_CHECKING:  # workloads.py reads the default from here when it builds a stream
    from kvplan.bench.workloads import Workload, WorkloadSpec


def default_max_model_len(model: ModelSpec, mode: str, spec: WorkloadSpec) -> int:
    """4096 for synthetic workloads (or the model's maximum if lower): kvplan's generators cap
    their lengths at it and contiguous-max reserves it whole, so the default run compares the
    optimizations on chat-length requests, not 128K reservations. vLLM's own default, the
    model's maximum (kvplan/spec/max_len.py), for traces (their requests are as long as they
    are) and for a random stream whose requests are longer than 4096 (vLLM's random dataset
    sends its lengths whatever the server takes). At most 4096 in real mode (this machine's
    memory)."""
    model_max = model.max_position_embeddings or DEFAULT_MAX_MODEL_LEN
    if mode == "real":
        return min(model_max, DEFAULT_MAX_MODEL_LEN)
    if spec.trace is not None:
        return model.max_position_embeddings
    longest = spec.longest_request
    if longest is not None and longest > min(model_max, DEFAULT_MAX_MODEL_LEN):
        return model_max_len(model) or DEFAULT_MAX_MODEL_LEN
    return min(model_max, DEFAULT_MAX_MODEL_LEN)


def check_admitted(spec: WorkloadSpec, built: Workload, model: ModelSpec) -> None:
    """Refuse a stream with requests longer than its max_model_len, which the engine would
    reject (a plan must serve the whole workload, not the requests that happen to fit): raise
    max_model_len where the model takes them, else shorten them."""
    longest = max([r.total_len for r in built.requests] + [spec.longest_request or 0])
    if longest <= built.max_model_len:
        return
    most = model_max_len(model)
    if most is None or longest <= most:
        raise SettingError(
            "{max_model_len} {got:,} is shorter than the workload's longest request ({longest:,} "
            "tokens, prompt + output), which the engine would refuse: raise it to at least "
            "{longest}",
            got=built.max_model_len,
            longest=longest,
        )
    raise SettingError(
        "the workload's longest request needs {longest:,} tokens (prompt + output), above "
        "{name}'s maximum of {most:,}, the longest {max_model_len} vLLM accepts: it would refuse "
        "it; shorten the requests",
        longest=longest,
        name=model.name,
        most=most,
    )
