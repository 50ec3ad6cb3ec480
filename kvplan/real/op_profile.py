"""`kvplan profile`: the operators one forward pass of a model runs at a tensor-parallel degree
(kvplan.sizing.operators.shapes.model_ops), measured on this machine's CPU or CUDA GPU into a
`kvplan.perf-table/1` table (kvplan.sizing.operators.profile_table) the simulator's step model
reads (`kvplan bench --perf-table FILE`).

What is measured, each on its grid (ProfileGrid):

- every 16-bit GEMM at M = 1 .. 16 exactly, then geometric to --max-tokens; the LM head to
  --max-seqs (it multiplies the sequences that sample);
- the routed experts at the same token grid;
- decode attention per attention group on a batch x context grid, prefill attention on a
  new-tokens x tokens-before grid;
- memory-bound passes on a bytes grid;
- all-reduces on CUDA with at least tp devices (all_reduce_timing.py); otherwise none.

The dtype: on CUDA bf16, what vLLM serves a 16-bit model in. On CPU bf16 as well, since vLLM's
CPU backend serves a bf16 model in bf16 (its CPU platform lists bf16 first; our vLLM CPU runs
store the model in bf16). Where the CPU has no bf16 instructions (AVX2 only, no AVX512-BF16 or
AMX) torch runs bf16 GEMMs on a fallback: on the 2-core AMD EPYC (AVX2) this was written on,
F.linear at 1 thread took 0.31 ms in bf16 against 0.20 in fp32 at M = 1 (1536 x 1024), and
9.5 ms against 1.1 at M = 16, 5 to 10 times fp32 beyond a few rows, and oneDNN refuses a
bf16 inner product there, so vLLM's CPU linear layers take that same torch path.
`--dtype fp32` measures fp32 (a model served in fp32, or to compare).

Threads: CPU measurements run on --threads intra-op threads (torch.set_num_threads; default
1, as a vLLM CPU run with OMP_NUM_THREADS=1); CUDA's kernels do not depend on them.

Not measured (the next source times them, and the table's notes say so): GEMMs and experts in a
quantized weight format (fp8, int8, int4 ...), MLA, the sparse-attention indexer, linear
attention and state-space layers, a KV format kvplan's kernels do not store, a fractional
number of heads per GPU.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvplan import GIB, MIB
from kvplan.engines.engine_releases import SAMPLER_BYTES_PER_LOGIT
from kvplan.kernels import select_backend
from kvplan.kernels.quant import get_format
from kvplan.quality.torch_threads import intra_op_threads
from kvplan.real.op_timer import Timer
from kvplan.real.op_workloads import Tick, Workbench
from kvplan.sizing.operators.attention import OPS_BY_NAME, FullAttention, SlidingAttention
from kvplan.sizing.operators.profile_table import (
    AllReduceShape,
    AttentionShape,
    Curve,
    Device,
    ExpertsShape,
    GemmShape,
    PerfTable,
    Surface,
)
from kvplan.sizing.operators.shapes import ModelOps
from kvplan.spec.setting_error import SettingError

# the attention operators kvplan's paged kernels run (a chunked one is a sliding one)
MEASURED_OPS = (FullAttention, SlidingAttention)
NOT_MEASURED = "not measured (the next source times it)"
MEASURED_FORMAT = "bf16"  # GEMMs and experts in 16-bit weights: torch runs them as they are
BLOCK_SIZE = {"cuda": 16, "cpu": 128}  # vLLM's default KV block, on GPUs and its CPU backend
FLUSH_BYTES = {"cuda": 256 * MIB, "cpu": 64 * MIB}  # twice a large last-level cache
KV_CAP_BYTES = {"cuda": 8 * GIB, "cpu": GIB}  # KV of one decode point, per copy
MIN_BYTES = 2**10


def geometric(low: int, high: int, points: int) -> list[int]:
    """`points` whole numbers from low to high, evenly spaced in log, without repeats."""
    if high <= low or points < 2:
        return sorted({low, high})
    values = [round(low * (high / low) ** (i / (points - 1))) for i in range(points)]
    return sorted(set(values))


@dataclass(frozen=True)
class ProfileGrid:
    max_tokens: int  # GEMMs, experts, all-reduces and prefill chunks: the largest step
    max_seqs: int  # decode batches and the LM head
    max_context: int  # decode context and the tokens before a prefill chunk
    points: int = 6  # per geometric axis

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_seqs", "max_context", "points"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 2**24:
                raise SettingError(
                    "{%s} must be a whole number from 2 to 16,777,216, got {got}" % name, got=value
                )

    def tokens(self, top: int | None = None) -> list[int]:
        """1 .. 16 exactly, then geometric to `top` (default max_tokens)."""
        top = top or self.max_tokens
        return sorted({*range(1, min(top, 16) + 1), *geometric(min(top, 16), top, self.points)})

    def batches(self) -> list[int]:
        return geometric(1, self.max_seqs, self.points)

    def contexts(self) -> list[int]:
        return geometric(1, self.max_context, self.points)

    def news(self) -> list[int]:
        return geometric(1, self.max_tokens, self.points)

    def befores(self) -> list[int]:
        return [0, *geometric(1, self.max_context, self.points - 1)]

    def sizes(self, ops: ModelOps) -> list[int]:
        """Bytes of the memory passes a step of the model makes, up to the largest: an
        elementwise kernel over max_tokens tokens, or the sampler's read of max_seqs rows of
        logits."""
        per_token = max([e.bytes_per_token for e in ops.elementwise], default=0.0)
        per_token = max(per_token, ops.embedding_bytes_per_token)
        logits = ops.vocab_per_gpu * ops.tp * max(SAMPLER_BYTES_PER_LOGIT.values())
        top = max(self.max_tokens * per_token, self.max_seqs * logits)
        return geometric(MIN_BYTES, max(2 * MIN_BYTES, int(top)), self.points + 2)


@dataclass(frozen=True)
class Measurement:
    """One curve to measure: where it goes in the table, its key, its points."""

    section: str
    key: Any
    label: str
    points: int
    run: Callable[[Tick], Curve | Surface]


@dataclass(frozen=True)
class Profile:
    """What `kvplan profile` will measure, and what it will leave to other sources."""

    device: Device
    measured_for: dict[str, Any]
    measurements: tuple[Measurement, ...]
    notes: tuple[str, ...]

    @property
    def points(self) -> int:
        return sum(m.points for m in self.measurements)

    def run(self, tick: Tick, announce: Callable[[str], None] = lambda _: None) -> PerfTable:
        sections: dict[str, dict[Any, Any]] = {}
        # CPU kernels run on the threads asked for; CUDA's do not depend on them
        threads = self.device.threads if self.device.kind == "cpu" else None
        with intra_op_threads(threads):
            for measurement in self.measurements:
                announce(measurement.label)
                curve = measurement.run(tick)
                sections.setdefault(measurement.section, {})[measurement.key] = curve
        memory = sections.pop("memory", {}).get("memory")
        return PerfTable(
            self.device, self.measured_for, **sections, memory=memory, notes=self.notes
        )


def plan_profile(
    ops: ModelOps,
    measured_for: dict[str, Any],
    device: str,
    grid: ProfileGrid,
    dtype: str = "bf16",
    threads: int = 1,
    repeats: int = 5,
) -> Profile:
    """The measurements of `ops` on `device` ("cpu" or "cuda"; resolved by the caller)."""
    timer = Timer(device, repeats, flush_bytes=FLUSH_BYTES[device])
    bench = Workbench(timer, device, dtype, select_backend(None, device == "cuda"),
                      BLOCK_SIZE[device], KV_CAP_BYTES[device])  # fmt: skip
    notes: list[str] = []
    found: list[Measurement] = []
    gemms = {GemmShape.of(g): (g.name, grid.tokens()) for g in ops.gemms}
    head = GemmShape.of(ops.lm_head)
    gemms.setdefault(head, ("lm_head", grid.tokens(grid.max_seqs)))
    for shape, (name, ms) in gemms.items():
        if shape.format != MEASURED_FORMAT:
            notes.append(f"gemm {name} ({shape.format} weights): {NOT_MEASURED}")
            continue
        found.append(Measurement("gemm", shape, f"gemm {name} {shape.n}x{shape.k}", len(ms),
                                 _curve(ms, _gemm_run(bench, shape, ms))))  # fmt: skip
    if ops.experts is not None:
        found += _experts(bench, ExpertsShape.of(ops.experts), grid, notes)
    for attention in dict.fromkeys(AttentionShape.of(op) for op in ops.attention):  # once a shape
        found += _attention(bench, attention, grid, notes)
    sizes = grid.sizes(ops)
    found.append(Measurement("memory", "memory", "memory", len(sizes),
                             _curve(sizes, lambda tick: bench.memory(sizes, tick))))  # fmt: skip
    found += _all_reduce(ops, device, dtype, grid, repeats, notes)
    return Profile(
        device_header(device, dtype, threads, bench.backend),
        measured_for,
        tuple(found),
        tuple(notes),
    )


def _gemm_run(bench: Workbench, shape: GemmShape, ms: list[int]) -> Callable[[Tick], list[float]]:
    return lambda tick: bench.gemm(shape.n, shape.k, ms, tick)


def _curve(x: list[int], measure: Callable[[Tick], list[float]]) -> Callable[[Tick], Curve]:
    return lambda tick: Curve(_floats(x), _seconds(measure(tick)))


def _experts(
    bench: Workbench, shape: ExpertsShape, grid: ProfileGrid, notes: list[str]
) -> list[Measurement]:
    if shape.format != MEASURED_FORMAT:
        notes.append(f"experts ({shape.format} weights): {NOT_MEASURED}")
        return []
    tokens = grid.tokens()
    notes.append(f"experts: {bench.expert_kernel(shape.hidden).name}")
    label = f"experts {shape.experts} x {shape.hidden}x{shape.inter}, top {shape.topk}"
    curve = _curve(tokens, lambda tick: bench.experts(shape, tokens, tick))
    return [Measurement("experts", shape, label, len(tokens), curve)]


def _attention(
    bench: Workbench, shape: AttentionShape, grid: ProfileGrid, notes: list[str]
) -> list[Measurement]:
    why = _unmeasured(shape)
    if why:
        notes.append(f"{shape.kind} ({shape.kv_format} KV): {NOT_MEASURED}, {why}")
        return []
    batches, contexts, news, befores = grid.batches(), grid.contexts(), grid.news(), grid.befores()
    label = f"{shape.kind} {shape.heads_per_gpu:g}/{shape.kv_heads_per_gpu} heads"

    def decode(tick: Tick) -> Surface:
        seconds = bench.decode(shape, batches, contexts, tick)
        return Surface(_floats(batches), _floats(contexts), tuple(map(_seconds, seconds)))

    def prefill(tick: Tick) -> Surface:
        seconds = bench.prefill(shape, news, befores, tick)
        return Surface(_floats(news), _floats(befores), tuple(map(_seconds, seconds)))

    return [
        Measurement("decode_attention", shape, f"decode {label}",
                    len(batches) * len(contexts), decode),
        Measurement("prefill_attention", shape, f"prefill {label}",
                    len(news) * len(befores), prefill),
    ]  # fmt: skip


def _unmeasured(shape: AttentionShape) -> str:
    """Why kvplan's kernels cannot time this attention ('' when they can)."""
    op = OPS_BY_NAME.get(shape.kind)
    if op is None or not issubclass(op, MEASURED_OPS):
        return "kvplan's paged kernels run full, sliding and chunked attention only"
    if not float(shape.heads_per_gpu).is_integer():
        return f"{shape.heads_per_gpu:g} heads per GPU is not a whole number"
    if shape.heads_per_gpu % shape.kv_heads_per_gpu:
        return "the heads per GPU are not a multiple of the KV heads"
    try:
        layout = get_format(shape.kv_format, torch.bfloat16)
    except ValueError as err:
        return str(err).splitlines()[0]
    if layout.scale not in ("none", "tensor", "token-head", "group"):
        return f"kvplan's kernels do not store {shape.kv_format}"
    return ""


def _all_reduce(
    ops: ModelOps, device: str, dtype: str, grid: ProfileGrid, repeats: int, notes: list[str]
) -> list[Measurement]:
    if ops.tp <= 1:
        return []
    visible = torch.cuda.device_count() if device == "cuda" else 0
    if visible < ops.tp:
        notes.append(
            f"all-reduce at tp {ops.tp}: {NOT_MEASURED}, it needs {ops.tp} CUDA devices and "
            f"{visible} are visible"
        )
        return []
    from kvplan.real.all_reduce_timing import all_reduce_seconds

    tokens, shape = grid.tokens(), AllReduceShape(ops.hidden, ops.tp)

    def measure(tick: Tick) -> list[float]:
        seconds = all_reduce_seconds(ops.hidden, ops.tp, tokens, dtype, repeats)
        for _ in tokens:
            tick()
        return seconds

    return [Measurement("all_reduce", shape, f"all-reduce tp {ops.tp}", len(tokens),
                        _curve(tokens, measure))]  # fmt: skip


def _floats(values: list[int]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _seconds(values: list[float]) -> tuple[float, ...]:
    """Four significant digits: a repeat's spread is wider than that."""
    return tuple(float(f"{v:.4g}") for v in values)


def device_header(device: str, dtype: str, threads: int, backend: str) -> Device:
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        name, capability = torch.cuda.get_device_name(), f"sm_{major}{minor}"
    else:
        name, capability = cpu_name(), str(torch.backends.cpu.get_cpu_capability())
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Device(device, name, torch.__version__, threads, when, dtype, capability, backend)


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (elsewhere: platform's processor)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or "cpu"
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
