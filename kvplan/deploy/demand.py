"""What a plan is asked: the model, the traffic and its SLO, how it is simulated (`Demand`),
and one deployment it may answer with (`Candidate`: GPU, TP, KV format, batch limit). The
search (replica_search.py), its trials (trials.py) and the plan (deploy_plan.py) all read
them."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan.bench.config import BenchConfig, ClusterConfig
from kvplan.bench.optimizations import parse_optimization
from kvplan.bench.workloads import VLLM_DATASETS, WorkloadSpec
from kvplan.core.engine_factory import SizingConfig
from kvplan.core.scheduler import SchedulerConfig
from kvplan.deploy.search_status import TRIAL_REQUESTS
from kvplan.deploy.slo import Slo
from kvplan.sim.disagg import Phase
from kvplan.sim.step_models import calibration_file_of, step_model_setting
from kvplan.sizing.operators.profile_table import perf_table_setting
from kvplan.spec.kv_format import parse_kv_format
from kvplan.spec.numbers import check_number
from kvplan.spec.setting_error import SettingError
from kvplan.workload import WORKLOAD_KINDS


@dataclass(frozen=True)
class Candidate:
    gpu: str
    tp: int = 1
    kv_dtype: str = "auto"
    max_num_seqs: int | None = None  # the engine's default

    def __post_init__(self) -> None:
        # bad settings are the user's error, not a candidate that failed
        parse_kv_format(self.kv_dtype)
        check_number("tp", self.tp)
        if self.max_num_seqs is not None:
            check_number("max-num-seqs", self.max_num_seqs)

    @property
    def label(self) -> str:
        seqs = f", max_num_seqs {self.max_num_seqs}" if self.max_num_seqs else ""
        return f"{self.gpu} x{self.tp} TP, KV {self.kv_dtype}{seqs}"


@dataclass(frozen=True)
class Demand:
    """What is to be served: the model, the traffic and its SLO, and how it is simulated."""

    model: str
    rate: float  # requests per second, the whole deployment
    slo: Slo
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)  # its rate is set per trial
    optimization: str = "prefix"  # vLLM V1 and SGLang cache prefixes by default
    num_requests: int = TRIAL_REQUESTS  # per replica and trial
    engine: str | None = None
    engine_version: str | None = None
    step_model: str | None = None  # fitted, roofline or a calibration file (sim.step_models)
    perf_table: str | None = None  # a `kvplan profile` table (plan.operators.profile_table)
    max_model_len: int | None = None  # None: bench's default for the workload (model_len.py)
    seed: int = 0
    trace_rps: float | None = None  # a trace's own request rate (trace_rate), which trials rescale
    phase: Phase = Phase.WHOLE  # a disaggregated pool serves only its part of each request

    def __post_init__(self) -> None:
        # settings every candidate shares fail here, once, rather than as every candidate's failure
        SizingConfig(model=self.model, engine=self.engine, engine_version=self.engine_version)
        if self.workload.trace is None and self.workload.kind not in (
            *WORKLOAD_KINDS,
            *VLLM_DATASETS,
        ):
            raise SettingError(
                "unknown workload '{kind}'; use one of {known} or {trace} FILE",
                kind=self.workload.kind,
                known=", ".join(dict.fromkeys((*WORKLOAD_KINDS, *VLLM_DATASETS))),
            )
        if parse_optimization(self.optimization).policy:  # every build would refuse it
            raise SettingError(
                "{optimization} {got} keeps a KV budget (bench's --kv-budget), which a plan "
                "does not size; plan with prefix, paged or a KV format (e.g. paged+fp8)",
                got=self.optimization,
            )
        calibration = calibration_file_of(self.step_model)  # a misspelled name or a foreign
        step_model_setting(None if calibration else self.step_model, calibration)  # file: refused
        perf_table_setting(self.perf_table)  # an unreadable or foreign table: refused

    def config(
        self,
        candidate: Candidate,
        pods: int = 1,
        router: str | None = None,
        max_concurrency: int | None = None,
    ) -> BenchConfig:
        sizing = SizingConfig(
            model=self.model,
            gpu=candidate.gpu,
            tp=candidate.tp,
            kv_dtype=candidate.kv_dtype,
            engine=self.engine,
            engine_version=self.engine_version,
            max_model_len=self.max_model_len,
        )
        scheduler = SchedulerConfig(
            max_num_seqs=candidate.max_num_seqs, max_num_batched_tokens=None
        )
        cluster = ClusterConfig(pods=pods, routers=(router,) if router else ())
        return BenchConfig(
            sizing=sizing,
            scheduler=scheduler,
            cluster=cluster,
            seed=self.seed,
            step_model=self.step_model,
            perf_table=self.perf_table,
            max_concurrency=max_concurrency,
        )
