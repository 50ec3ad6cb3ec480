"""The refusal of a request stream the engine would reject for its length (`kvplan plan`: a
plan serves the whole workload, not the requests that happen to fit). The max_model_len a
stream gets when none is set is kvplan.bench.workloads' (default_max_model_len)."""

from __future__ import annotations

from kvplan.bench.workloads import Workload, WorkloadSpec
from kvplan.engines.pool_sizing import model_max_len
from kvplan.spec import ModelSpec
from kvplan.spec.setting_error import SettingError


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
