"""What a measured benchmark run may claim, checked before a fit replays it.

One check for every run `kvplan calibrate` reads, a `vllm bench serve --save-result` JSON or a
pasted "Serving Benchmark Result" block (kvplan/fit/measured.py):

- each figure keeps its rule in kvplan/spec/numbers.py: a whole, positive request count no
  larger than a replay can hold, a positive duration and throughput, token totals and
  latencies that are finite and not negative; null only where vLLM writes it (a setting the
  run was not given), never a word, a list or a table where a figure belongs;
- the figures agree with each other as vLLM computes them: throughput = tokens / duration,
  requests = completed / duration, no mean or median latency longer than the whole run, at
  least one token in and out per completed request, no per-request list shorter than the
  requests it lists;
- the settings the caller gives (`kvplan calibrate --tp --input-len ...`) keep their rules
  as on every command, and an `--input-len` / `--output-len` that applies to every file must
  agree with each file's own token totals.

A refusal names the file and the key and says what the value must be.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Protocol

from kvplan.engines.engine_releases import engine_generation
from kvplan.engines.pool_sizing import model_max_len
from kvplan.engines.versions import parse_version
from kvplan.spec import parse_kv_format
from kvplan.spec.numbers import RULES, _show, check_number
from kvplan.spec.resolve import load_model
from kvplan.spec.setting_error import SettingError


class ReplayedRun(Protocol):
    """What run_problem reads of a measured run (measured.py's MeasuredRun, which reads runs
    through these checks), besides the settings RUN_RULES names, read by name."""

    @property
    def num_prompts(self) -> int: ...
    @property
    def output_len(self) -> int | None: ...
    @property
    def request_rate(self) -> float: ...
    @property
    def measured(self) -> dict[str, float]: ...


# vLLM's result keys -> the numbers.RULES entry each keeps.
RESULT_RULES: dict[str, str] = {
    "completed": "measured_requests",
    "num_prompts": "measured_requests",
    "duration": "duration_s",
    "total_input_tokens": "token_total",
    "total_output_tokens": "token_total",
    "request_throughput": "throughput",
    "output_throughput": "throughput",
    "total_token_throughput": "throughput",
    "max_concurrency": "max_concurrency",
    "burstiness": "burstiness",
    "request_rate": "offered_rate",
}
LATENCY_KEY = re.compile(r"(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms")
NULLABLE = ("max_concurrency", "burstiness", "request_rate")  # vLLM's null: not given
PER_REQUEST_LISTS = ("input_lens", "output_lens", "ttfts", "itls")  # --save-detailed
# (throughput, the total it divides by the duration): vLLM computes each exactly so.
RATES = (
    ("output_throughput", ("total_output_tokens",)),
    ("request_throughput", ("completed",)),
    ("total_token_throughput", ("total_input_tokens", "total_output_tokens")),
)
# A pasted block prints two decimals: a throughput may be off by the duration's rounding.
PRINTED_DURATION_STEP = 0.005
AGREEMENT = 0.02  # relative slack on top of that rounding
# The caller's settings, each checked by its RUN_RULES rule (SettingError names the
# setting: the CLI words the flag).
SETTING_KEYS = (
    "tp",
    "input_len",
    "output_len",
    "range_ratio",
    "max_concurrency",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
)
DATASETS = ("random", "sharegpt")
MEAN_LEN_SLACK = 0.1  # a file's mean length may stray this far past the range --input-len gives


def _refused(path: Path, key: str, value: Any, must: str) -> ValueError:
    shown = "null" if value is None else _show(value)  # as the JSON wrote it
    return ValueError(
        f"{path}: '{key}' is {shown}, but it must be {must}; pass the result file "
        "vLLM wrote, as it wrote it"
    )


def _rule_name(key: str) -> str | None:
    return RESULT_RULES.get(key) or ("latency_ms" if LATENCY_KEY.fullmatch(key) else None)


def check_result(path: Path, values: dict[str, Any]) -> dict[str, float | int | None]:
    """The figures of one result, checked (see the module docstring); returns them as numbers
    (request_rate: inf for "inf"; None where vLLM wrote null)."""
    checked: dict[str, float | int | None] = {}
    for key, value in values.items():
        name = _rule_name(str(key))
        if name is None:
            continue
        if key in NULLABLE and (value is None or value in ("None", "null")):
            checked[key] = None
            continue
        if key == "request_rate" and (
            value == "inf" or (isinstance(value, float) and value == math.inf)
        ):
            checked[key] = math.inf
            continue
        rule = RULES[name]
        if not rule.admits(value):
            raise _refused(path, key, value, rule.describe())
        checked[key] = rule.convert(value)
    for key in PER_REQUEST_LISTS:
        if key in values and not isinstance(values[key], list):
            raise _refused(path, key, values[key], "a list, one entry per request")
    _agree(path, values, checked)
    return checked


def _agree(path: Path, values: dict[str, Any], checked: dict[str, Any]) -> None:
    completed = checked.get("completed")
    if completed is not None:
        if checked.get("num_prompts") is not None and completed > checked["num_prompts"]:
            raise _refused(
                path, "completed", completed, f"at most num_prompts, {checked['num_prompts']:,}"
            )
        for key in ("total_input_tokens", "total_output_tokens"):
            if checked.get(key) is not None and checked[key] < completed:
                raise _refused(
                    path,
                    key,
                    checked[key],
                    f"at least one token per completed request, {completed:,}",
                )
        for key in PER_REQUEST_LISTS:
            if key in values and len(values[key]) < completed:
                raise ValueError(
                    f"{path}: '{key}' lists {len(values[key]):,} requests, but the result "
                    "completed "
                    f"{completed:,}; pass the result file vLLM wrote, as it wrote it"
                )
    duration = checked.get("duration")
    if duration is None:
        return
    for key, totals in RATES:
        parts = [checked.get(total) for total in totals]
        rate = checked.get(key)
        if rate is None or None in parts:
            continue
        total = float(sum(part or 0 for part in parts))
        low = total / (duration + PRINTED_DURATION_STEP) * (1 - AGREEMENT) - 0.01
        high = total / max(duration - PRINTED_DURATION_STEP, duration / 2) * (1 + AGREEMENT) + 0.01
        if not low <= rate <= high:
            over = " + ".join(totals)
            raise _refused(
                path, key, rate, f"{over} / duration = {total / duration:,.2f}, as vLLM computes it"
            )
    longest_ms = duration * 1000 * (1 + AGREEMENT) + 10 * 1000 * PRINTED_DURATION_STEP
    for key, value in checked.items():
        match = LATENCY_KEY.fullmatch(key)
        if match and match.group(1) in ("mean", "median") and value > longest_ms:
            raise _refused(path, key, value, f"within the run's duration, {duration:,.2f} s")


def check_settings(settings: dict[str, Any]) -> None:
    """The caller's settings by their rules, the engine, its version and the dataset
    (SettingError naming the setting)."""
    for key in SETTING_KEYS:
        if settings.get(key) is not None:
            check_number(RUN_RULES[key], settings[key])
    engine_generation(settings.get("engine"), settings.get("engine_version") or None)
    version = settings.get("engine_version") or ""
    if version and parse_version(version) is None:
        raise SettingError(
            "{engine_version} must be a version such as 0.6.3 or 0.10.1.1, got '{got}'",
            got=version,
        )
    dataset = settings.get("dataset") or "random"
    if dataset not in DATASETS:
        raise SettingError("{dataset} must be random or sharegpt, got '{got}'", got=dataset)
    if settings.get("model"):  # before any run is read: a typo is not found after a fit
        parse_kv_format(settings.get("kv_dtype") or "auto", load_model(settings["model"]))


def check_lengths(path: Path, settings: dict[str, Any], checked: dict[str, Any]) -> None:
    """An `--input-len` / `--output-len` given for every file must fit each file's own totals:
    the mean prompt within the range vLLM's random dataset draws from (a little slack for
    tokenization), the mean output no longer than the longest it asks for (outputs may stop
    early at an end-of-sequence token)."""
    completed = checked.get("completed")
    if (settings.get("dataset") or "random") != "random" or not completed:
        return
    ratio = settings.get("range_ratio") or 0.0
    for key, total_key in (
        ("input_len", "total_input_tokens"),
        ("output_len", "total_output_tokens"),
    ):
        given, total = settings.get(key), checked.get(total_key)
        if given is None or total is None:
            continue
        mean = total / completed
        low = 0.0 if key == "output_len" else given * (1 - ratio) * (1 - MEAN_LEN_SLACK)
        high = given * (1 + ratio) * (1 + MEAN_LEN_SLACK)
        if not low <= mean <= high:
            raise SettingError(
                "{" + key + "} {given} applies to every result file, but {where}'s "
                "{total:,} {kind} tokens over {completed:,} requests are {mean:,.0f} per request; "
                "leave it out to read each file's own totals, or calibrate the files apart",
                given=given,
                where=path,
                total=int(total),
                kind="input" if key == "input_len" else "output",
                completed=completed,
                mean=mean,
            )


def check_request_length(
    path: Path, model: str, max_model_len: int | None, input_len: int | None, output_len: int | None
) -> None:
    """A request's prompt and output fit the longest sequence the server could serve: its
    --max-model-len where given, else the model's own maximum (vLLM refuses longer)."""
    longest = max_model_len or model_max_len(load_model(model))
    if longest and input_len and output_len and input_len + output_len > longest:
        raise ValueError(
            f"{path}: requests of {input_len:,} prompt + {output_len:,} output tokens (the "
            "result's "
            f"token totals / completed requests) are longer than {model} serves ({longest:,}); "
            "pass the result of a run on this model, or its --input-len and --output-len"
        )


# MeasuredRun field -> its rule: what a replay reads, whichever reader made the run.
RUN_RULES = {
    "num_prompts": "measured_requests",
    "tp": "tp",
    "input_len": "input_len",
    "output_len": "output_len",
    "range_ratio": "random_range_ratio",
    "max_concurrency": "max_concurrency",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "num_scheduler_steps": "num_scheduler_steps",
    "total_input_tokens": "token_total",
    "total_output_tokens": "token_total",
    "saturation_rate": "throughput",
}


# Output tokens one replay simulates (a step per token at concurrency 1), several times a fit:
# the published runs hold at most 640,000; beyond this a fit would take hours.
REPLAY_TOKENS_MAX = 2**27


def run_problem(run: ReplayedRun) -> str | None:
    """What makes a measured run unfit to replay (a user's file or a dataset record alike),
    or None: every setting by its rule, the offered rate positive or inf, every measured
    figure finite and positive."""
    for name, rule_name in RUN_RULES.items():
        value, rule = getattr(run, name), RULES[rule_name]
        if value is not None and not rule.admits(value):
            return f"{name} is {_show(value)}, but it must be {rule.describe()}"
    replayed = run.num_prompts * (run.output_len or 0)
    if replayed > REPLAY_TOKENS_MAX:
        return (
            f"{run.num_prompts:,} requests of {run.output_len:,} output tokens are {replayed:,} "
            f"tokens to replay, more than a fit replays ({REPLAY_TOKENS_MAX:,}): pass a shorter run"
        )
    if not (run.request_rate == math.inf or RULES["offered_rate"].admits(run.request_rate)):
        return f"request_rate is {_show(run.request_rate)}, but it must be > 0 (or inf)"
    for key, value in run.measured.items():
        rule = RULES["duration_s" if key == "latency_avg_s" else _rule_name(key) or "throughput"]
        if not rule.admits(value) or value <= 0:
            return f"{key} is {_show(value)}, but it must be {rule.describe()}"
    return None
