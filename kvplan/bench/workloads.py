"""The request stream of a bench run, with the defaults `kvplan bench`, `kvplan sweep` and
`kvplan plan` share: a synthetic generator or a replayed trace, max_model_len defaulting to
4096 for synthetic workloads and to the model's maximum (vLLM's default) for traces and for a
random stream whose requests are longer (capped at 4096 in real mode), --samples parallel
samples per request, and `vllm bench serve`-shaped streams: --workload random (vLLM's random
dataset, its lengths also as --workload-param input_len=...) or --rate inf (every request sent
at t = 0)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from kvplan.bench.mode import Mode, parse_mode
from kvplan.engines.pool_sizing import (
    DEFAULT_MAX_MODEL_LEN,
    check_max_model_len,
    model_max_len,
)
from kvplan.spec import ModelSpec
from kvplan.spec.numbers import check_number
from kvplan.spec.setting_error import SettingError
from kvplan.workload.bench_load import BenchLoad, random_length_bounds
from kvplan.workload.default_rates import default_rate
from kvplan.workload.kinds import checked_params, quoted, rate_unit
from kvplan.workload.request import Request

DEFAULT_NUM_REQUESTS = 1000
# The default stream shares a prefix (one 1,024-token system prompt before each
# ShareGPT-like user message), so prefix caching shows what it buys on the default run.
DEFAULT_WORKLOAD = "system-prompt"
SHARED_VOCAB = 32000  # the shared-prefix generators' default vocabulary
SYSTEM_PROMPT_LEN = 1024  # the generator's default; a quarter of max_model_len at most
VLLM_DATASETS = ("random", "sharegpt")  # the kinds `--rate inf` sends as vLLM's client does
RANDOM_LENGTHS = ("input_len", "output_len", "random_range_ratio")  # vLLM's random dataset's
MAX_MODEL_LEN_HELP = (
    f"Longest request; contiguous-max reserves this. Default {DEFAULT_MAX_MODEL_LEN} for "
    "synthetic workloads, the model's maximum (vLLM's default) for traces and for --workload "
    "random with longer requests."
)


@dataclass(frozen=True)
class WorkloadSpec:
    """How to make the requests: a synthetic kind (with its generator settings) or a trace."""

    kind: str = DEFAULT_WORKLOAD
    trace: str | None = None
    trace_format: str | None = None
    skip_bad_lines: bool = False
    num_requests: int | None = (
        None  # synthetic: DEFAULT_NUM_REQUESTS; trace: the first N (default all)
    )
    rate: float | None = None  # None: the kind's own (kvplan.workload.default_rates)
    # None where not given, so a trace (which keeps its own arrival times) can refuse them
    arrival: str | None = None  # poisson
    cv: float | None = None  # 1.0: gamma arrivals as variable as Poisson's
    stats_path: str | None = None
    # a trace's arrival times multiplied by this; None: as recorded, or rescaled to `rate`
    time_scale: float | None = None
    samples: int = 1
    params: dict[str, Any] = field(default_factory=dict)  # generator settings (--workload-param)
    # vLLM-bench settings, None where not given (vLLM's client's defaults, BenchLoad): the
    # lengths are read by --workload random only, the burstiness by it or --rate inf.
    input_len: int | None = None
    output_len: int | None = None
    random_range_ratio: float | None = None  # None: fixed lengths
    range_below: bool = False  # the benchmark client before vLLM 0.8.4 read the ratio as a floor
    burstiness: float | None = None

    @property
    def vllm_shaped(self) -> bool:
        """Sent the way `vllm bench serve` sends: its random dataset, or all at t = 0."""
        return self.trace is None and (self.kind == "random" or self.arrival_rate == math.inf)

    @property
    def arrival_process(self) -> str:
        return self.arrival or "poisson"

    @property
    def gap_cv(self) -> float:
        return 1.0 if self.cv is None else self.cv

    @property
    def arrival_rate(self) -> float:
        """--rate, or the kind's default: a load the default setup serves."""
        return default_rate(self.kind) if self.rate is None else self.rate

    def __post_init__(self) -> None:
        if self.num_requests is not None and self.num_requests < 1:
            raise SettingError(
                "{num_requests} must be at least 1, got {got}", got=self.num_requests
            )
        if self.samples < 1:
            raise SettingError("{samples} must be at least 1, got {got}", got=self.samples)
        if self.params and self.trace is None and self.kind == "random":
            self._lengths_from_params()
        self._check_read()
        if self.params:  # whole floats (1e3) as ints, each value within its rule
            object.__setattr__(self, "params", self._checked_params())

    @property
    def _described(self) -> str:
        return "a trace" if self.trace is not None else f"the {self.kind} workload"

    def _check_read(self) -> None:
        """A setting this stream would ignore is refused: results would be read as if it acted."""
        if self.trace is not None and self.rate is not None and self.time_scale is not None:
            raise SettingError(
                "{rate} and {time_scale} both set a trace's arrival rate ({rate} rescales its "
                "arrivals to that mean rate, {time_scale} multiplies their times): give one"
            )
        if self.trace is None and self.time_scale is not None:
            raise SettingError(
                "{time_scale} multiplies a trace's arrival times; {what} does not read it: "
                "drop it, and set its arrivals per second with {rate}",
                what=self._described,
            )
        if self.trace is not None and self.arrival is not None:
            raise SettingError(
                "{arrival} draws a synthetic stream's arrival times; a {trace} keeps its own: "
                "drop it, and rescale the trace's arrivals with {rate} or {time_scale}"
            )
        if self.cv is not None and self.arrival_process != "gamma":
            raise SettingError(
                "{cv} sets the variability of gamma arrivals ({arrival} gamma); {what} with "
                "{process} arrivals does not read it: drop it, or add {arrival} gamma",
                what="a trace" if self.trace is not None else f"the {self.kind} workload",
                process="its own" if self.trace is not None else self.arrival_process,
            )
        random = self.trace is None and self.kind == "random"
        for name in RANDOM_LENGTHS:
            if getattr(self, name) is not None and not random:
                raise SettingError(
                    f"{{{name}}} sets the lengths of {{workload}} random (vLLM's random "
                    "dataset); {what} does not read it: drop it, or use {workload} random",
                    what=self._described,
                )
        if self.burstiness is not None and not self.vllm_shaped:
            raise SettingError(
                "{burstiness} shapes the send gaps of {workload} random or {rate} inf (vLLM's "
                "benchmark client); {what} at {got:g} {unit}/s does not read it: drop it",
                what=self._described,
                got=self.arrival_rate,
                unit=rate_unit(self.kind),
            )

    @property
    def longest_request(self) -> int | None:
        """The most tokens (prompt + output) one request of vLLM's random dataset can take;
        None for the other streams (kvplan's generators fit theirs within max_model_len, vLLM's
        ShareGPT filter keeps 2,048, a trace's are its own)."""
        if self.trace is not None or self.kind != "random":
            return None
        (_, prompt), (_, output) = random_length_bounds(
            self.input_len or BenchLoad.input_len,
            self.output_len or BenchLoad.output_len,
            self.random_range_ratio or 0.0,
            self.range_below and self.random_range_ratio is not None,
        )
        return max(prompt, 1) + output

    def _lengths_from_params(self) -> None:
        """--workload random reads vLLM's lengths, given as flags or as generator settings
        (input_len=6000): the settings become the fields, each checked by its rule; any other
        setting is refused, as the generators refuse one they do not read."""
        for name, value in self.params.items():
            if name not in RANDOM_LENGTHS:
                raise SettingError(
                    "{params} set kvplan's workload generators; vLLM's random dataset reads "
                    "only its lengths, so {name} would be ignored: its settings are {known}",
                    name=quoted(name),
                    known=", ".join(RANDOM_LENGTHS),
                )
            if getattr(self, name) is not None:
                raise SettingError(
                    f"{{params}} {{name}} and {{{name}}} both set it; give one", name=quoted(name)
                )
            object.__setattr__(self, name, check_number(name, value, within="params"))
        object.__setattr__(self, "params", {})

    def _checked_params(self) -> dict[str, Any]:
        if self.trace is not None:
            raise SettingError(
                "{params} set kvplan's workload generators; a {trace} replays its own "
                "requests and reads none: drop them"
            )
        if self.vllm_shaped:  # --rate inf (random took its lengths above)
            raise SettingError(
                "{params} set kvplan's workload generators; at {rate} inf the {kind} workload "
                "is vLLM's {kind} dataset, which reads none: drop them",
                kind=self.kind,
            )
        return checked_params(self.kind, self.params, flag=True)


@dataclass(frozen=True)
class Workload:
    requests: list[Request]
    info: dict[str, Any]  # recorded as the run's params["workload"]
    max_model_len: int
    skipped_lines: int = 0  # malformed trace lines skipped (--skip-bad-lines)


def default_max_model_len(model: ModelSpec, mode: Mode, spec: WorkloadSpec) -> int:
    """4096 for synthetic workloads (or the model's maximum if lower): kvplan's generators cap
    their lengths at it and contiguous-max reserves it whole, so the default run compares the
    optimizations on chat-length requests, not 128K reservations. vLLM's own default, the
    model's maximum (kvplan/spec/max_len.py), for traces (their requests are as long as they
    are) and for a random stream whose requests are longer than 4096 (vLLM's random dataset
    sends its lengths whatever the server takes). At most 4096 in real mode (this machine's
    memory)."""
    model_max = model.max_position_embeddings or DEFAULT_MAX_MODEL_LEN
    if mode is Mode.REAL:
        return min(model_max, DEFAULT_MAX_MODEL_LEN)
    if spec.trace is not None:
        return model.max_position_embeddings
    longest = spec.longest_request
    if longest is not None and longest > min(model_max, DEFAULT_MAX_MODEL_LEN):
        return model_max_len(model) or DEFAULT_MAX_MODEL_LEN
    return min(model_max, DEFAULT_MAX_MODEL_LEN)


def build_workload(
    spec: WorkloadSpec,
    model: ModelSpec,
    mode: str | Mode,
    seed: int,
    max_model_len: int | None = None,
) -> Workload:
    """The requests of one run, and its resolved max_model_len."""
    mode = parse_mode(mode)
    # the generators (numpy) load when a workload is built, not for the defaults' help text
    from kvplan.workload import load_trace, make_workload
    from kvplan.workload.shared_prefix import SHARED_PREFIX_KINDS

    if max_model_len is None:
        max_model_len = default_max_model_len(model, mode, spec)
    if max_model_len < 2:
        raise SettingError("{max_model_len} must be at least 2, got {got}", got=max_model_len)
    check_max_model_len(model, max_model_len)  # as vLLM refuses one above the model's maximum
    skipped = 0
    if spec.trace is not None:
        loaded = load_trace(
            spec.trace,
            spec.trace_format,
            skip_bad_lines=spec.skip_bad_lines,
            max_requests=spec.num_requests,
            time_scale=spec.time_scale or 1.0,
        )
        requests, skipped = loaded.requests, loaded.skipped
        info = {
            "kind": "trace",
            "path": str(spec.trace),
            "format": loaded.fmt,
            "skipped_lines": skipped,
            "time_scale": spec.time_scale or 1.0,
        }
        if spec.rate is not None:  # the requests replayed, at the rate asked
            requests, info["time_scale"] = at_rate(requests, spec.rate, spec.trace)
            info["rate"] = spec.rate
    elif spec.vllm_shaped:
        requests, info = _vllm_bench_workload(spec, seed)
    else:
        params = dict(spec.params)
        if (
            spec.kind == "system-prompt"
            and "system_prompt_len" not in params
            and max_model_len < 4 * SYSTEM_PROMPT_LEN
        ):
            # a small model (stories260K: 512 tokens) keeps room for the messages after the prompt
            params["system_prompt_len"] = max(1, max_model_len // 4)
        if (
            spec.kind in SHARED_PREFIX_KINDS
            and "vocab_size" not in params
            and model.vocab_size < SHARED_VOCAB
        ):
            params["vocab_size"] = (
                model.vocab_size
            )  # token ids the model can embed (real mode runs them)
        requests = make_workload(
            spec.kind,
            spec.num_requests or DEFAULT_NUM_REQUESTS,
            rate=spec.arrival_rate,
            arrival=spec.arrival_process,
            cv=spec.gap_cv,
            seed=seed,
            max_model_len=max_model_len,
            stats_path=spec.stats_path,
            **params,
        )
        info = {
            "kind": spec.kind,
            "rate": spec.arrival_rate,
            "arrival": spec.arrival_process,
            "cv": spec.gap_cv,
            **params,
        }
    if spec.samples > 1:  # parallel samples share the prompt's blocks copy-on-write
        requests = [dataclasses.replace(r, n=spec.samples) for r in requests]
        info["samples"] = spec.samples
    return Workload(requests, info, max_model_len, skipped)


def arrivals_rate(arrivals: list[float]) -> float | None:
    """Requests per second of a stream: the arrivals after the first over the span they took
    (as the offered rate of a run is measured, kvplan.core.summary.stream_load); None for
    arrivals with no spread (one request, or all at one time)."""
    span = max(arrivals) - min(arrivals) if len(arrivals) > 1 else 0.0
    return (len(arrivals) - 1) / span if span > 0 else None


def trace_time_scale(native_rate: float, rate: float) -> float:
    """The factor on a trace's arrival times that replays it at `rate` requests/s, given its own
    rate (arrivals_rate); 0 for an infinite rate: every request at t = 0."""
    return native_rate / rate if math.isfinite(rate) else 0.0


def at_rate(requests: list[Request], rate: float, trace: str) -> tuple[list[Request], float]:
    """A trace's requests with their arrivals rescaled so their mean rate is `rate` (the offered
    rate the run then reports), and the factor applied; `kvplan plan` sends a trace at each rate
    it tries by the same factor (kvplan.deploy.trials.sent_at)."""
    native = arrivals_rate([r.arrival_s for r in requests])
    if native is not None or math.isinf(rate):
        scale = trace_time_scale(native or 0.0, rate)
    elif len(requests) > 1:
        raise SettingError(
            "{trace} {path}: its requests arrive all at one time, so there is no rate to "
            "rescale to {rate} {got:g}: drop {rate}",
            path=trace,
            got=rate,
        )
    else:
        scale = 1.0  # one request has no gaps to rescale
    return [dataclasses.replace(r, arrival_s=r.arrival_s * scale) for r in requests], scale


def _vllm_bench_workload(spec: WorkloadSpec, seed: int) -> tuple[list[Request], dict[str, Any]]:
    from kvplan.workload.vllm_bench import bench_requests

    if spec.kind not in VLLM_DATASETS:
        raise SettingError(
            "{rate} inf goes with {workload} random or sharegpt (vLLM's datasets), not {kind}",
            kind=spec.kind,
        )
    load = BenchLoad(
        dataset=spec.kind,
        num_prompts=spec.num_requests or DEFAULT_NUM_REQUESTS,
        input_len=spec.input_len or BenchLoad.input_len,
        output_len=spec.output_len or BenchLoad.output_len,
        range_ratio=spec.random_range_ratio or 0.0,
        range_below=spec.range_below and spec.random_range_ratio is not None,
        request_rate=spec.arrival_rate,
        burstiness=BenchLoad.burstiness if spec.burstiness is None else spec.burstiness,
        seed=seed,
    )
    info = {
        "kind": spec.kind,
        "rate": spec.arrival_rate,
        "input_len": load.input_len,
        "output_len": load.output_len,
        "range_ratio": load.range_ratio,
        "burstiness": load.burstiness,
    }
    return bench_requests(load), info


def parse_workload_params(pairs: list[str]) -> dict[str, Any]:
    """NAME=VALUE generator settings, numbers parsed as int or float; a name given twice is
    refused (the later value would silently win)."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise SettingError(
                "{params} {pair} needs NAME=VALUE, e.g. doc_len=2048", pair=quoted(pair)
            )
        if name in params:
            raise SettingError("{params} names {name} twice; give it once", name=quoted(name))
        params[name] = _value(value, pair)
    return params


def _value(text: str, pair: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text  # refused by the setting's rule, which names what it takes
    if not math.isfinite(number):  # "nan", "inf" and 400 digits parse, but are never a setting
        raise SettingError("{params} {pair}: the value must be a finite number", pair=quoted(pair))
    return number
