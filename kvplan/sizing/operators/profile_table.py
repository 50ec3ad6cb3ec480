"""A measured operator table, `kvplan.perf-table/1`: what `kvplan profile` (kvplan.real.op_profile)
writes and the step model's ProfileSource (kvplan.sim.ops.profile_source) reads. docs/profile.md
describes the file field by field.

Curves are keyed by an operator's shape, never by a model's name, so one table serves every
model with the same shapes (a Llama and its fine-tunes; two models sharing a GEMM):

- gemm, by (n, k, weight format label): seconds of one call against M (the rows it multiplies);
- experts, by (hidden, inter, experts, topk, format): one routed-expert layer against its tokens;
- decode_attention, by the attention kind's class name and (heads_per_gpu, kv_heads_per_gpu,
  head_dim, kv_format, window): one layer against a batch x context grid;
- prefill_attention, likewise: one chunk of `new` tokens after `before` ones, one layer;
- all_reduce, by (hidden, tp): one all-reduce of tokens x hidden activations;
- memory: one memory-bound pass against the bytes it reads and writes.

The reader is strict: a file kvplan did not write, a missing or unknown field, a grid that is
not increasing, a time that is not a positive finite number are refused in one line naming
the file, the place and the fix, before any run starts (profile_writer.py writes the file).
Pure: JSON and dataclasses only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from kvplan import MIB
from kvplan.sizing.operators.attention import AttentionOp
from kvplan.sizing.operators.shapes import Experts, Gemm
from kvplan.spec.capped_read import read_capped
from kvplan.spec.setting_error import SettingError

FORMAT = "kvplan.perf-table/1"
MAX_FILE_BYTES = 64 * MIB  # far above any profile (a few hundred KiB); /dev/zero is refused
DEVICE_KINDS = ("cpu", "cuda")
DTYPES = ("bf16", "fp16", "fp32")
NAME_CHARS = 200
FIX = "write it again with `kvplan profile MODEL --output FILE`"


@dataclass(frozen=True)
class Device:
    """Where and how the table was measured."""

    kind: str  # cpu | cuda
    name: str  # the CPU's model name or the GPU's (torch.cuda.get_device_name)
    torch: str  # torch.__version__
    threads: int  # torch's intra-op threads (CPU: --threads; CUDA: what the host used)
    when: str  # ISO-8601 UTC time the profile started
    dtype: str  # activations and 16-bit weights were measured in this dtype: bf16, fp16, fp32
    capability: str  # cpu: torch's CPU capability (AVX2, AVX512, ...); cuda: sm_XY
    attention: str  # the kvplan attention backend measured: triton or torch


@dataclass(frozen=True)
class Curve:
    """Seconds measured at increasing points of one axis."""

    x: tuple[float, ...]
    seconds: tuple[float, ...]


@dataclass(frozen=True)
class Surface:
    """Seconds on a grid: seconds[i][j] at (a[i], b[j]), both axes increasing."""

    a: tuple[float, ...]
    b: tuple[float, ...]
    seconds: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class GemmShape:
    n: int
    k: int
    format: str  # kvplan.sizing.operators.shapes.WeightFormat.label

    @classmethod
    def of(cls, gemm: Gemm) -> GemmShape:
        return cls(gemm.n, gemm.k, gemm.fmt.label)


@dataclass(frozen=True)
class ExpertsShape:
    hidden: int
    inter: int
    experts: int
    topk: int
    format: str

    @classmethod
    def of(cls, experts: Experts) -> ExpertsShape:
        return cls(experts.hidden, experts.inter, experts.experts, experts.topk, experts.fmt.label)


@dataclass(frozen=True)
class AttentionShape:
    kind: str  # the AttentionOp subclass: FullAttention, SlidingAttention, ChunkedAttention ...
    heads_per_gpu: float
    kv_heads_per_gpu: int
    head_dim: int
    kv_format: str  # kvplan.spec.KVFormat.name
    window: int  # the sliding window or chunk; 0 for none

    @classmethod
    def of(cls, op: AttentionOp) -> AttentionShape:
        return cls(
            type(op).__name__,
            float(op.heads_per_gpu),
            op.kv_heads_per_gpu,
            op.group.head_dim,
            op.kv_format.name,
            op.group.window or 0,
        )


@dataclass(frozen=True)
class AllReduceShape:
    hidden: int
    tp: int


@dataclass(frozen=True)
class Section:
    """One list of curves in the file: its key's fields and its axes (with their lowest value)."""

    key: type
    axes: tuple[tuple[str, float], ...]


SECTIONS: dict[str, Section] = {
    "gemm": Section(GemmShape, (("m", 1),)),
    "experts": Section(ExpertsShape, (("tokens", 1),)),
    "decode_attention": Section(AttentionShape, (("batch", 1), ("context", 1))),
    "prefill_attention": Section(AttentionShape, (("new", 1), ("before", 0))),
    "all_reduce": Section(AllReduceShape, (("tokens", 1),)),
}
MEMORY_AXIS = ("bytes", 1)
TOP_KEYS = ("format", "device", "measured_for", *SECTIONS, "memory", "notes")

K = TypeVar("K")


@dataclass(frozen=True)
class PerfTable:
    device: Device
    # what the profile was taken for ({"model": ..., "tp": ...}): shown, never a key
    measured_for: Mapping[str, Any] = field(default_factory=dict)
    gemm: Mapping[GemmShape, Curve] = field(default_factory=dict)
    experts: Mapping[ExpertsShape, Curve] = field(default_factory=dict)
    decode_attention: Mapping[AttentionShape, Surface] = field(default_factory=dict)
    prefill_attention: Mapping[AttentionShape, Surface] = field(default_factory=dict)
    all_reduce: Mapping[AllReduceShape, Curve] = field(default_factory=dict)
    memory: Curve | None = None
    notes: tuple[str, ...] = ()  # what was not measured, and why

    def counts(self) -> dict[str, int]:
        """Curves per section (memory: 0 or 1)."""
        counts = {name: len(getattr(self, name)) for name in SECTIONS}
        return {**counts, "memory": int(self.memory is not None)}


def perf_table_setting(value: Any) -> str | None:
    """A run's perf_table setting (bench's --perf-table, plan's, a sweep file's key): None, or
    a file read and checked now, so a bad one fails before any work."""
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SettingError(
            "{perf_table} must name a file written by `kvplan profile`, got {got!r}", got=value
        )
    read_table(value)
    return str(value)


class _Refused(Exception):
    """A problem at a place in the file; read_table words it with the file's name."""


def read_table(path: str | Path) -> PerfTable:
    """The checked table (SettingError naming the file, the problem and the fix)."""
    path = Path(path)
    try:
        raw = read_capped(path, MAX_FILE_BYTES)
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise SettingError(
            "{perf_table} file '{path}' cannot be read ({why}); check the path or write one "
            "with `kvplan profile MODEL`",
            path=str(path),
            why=reason,
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise _refusal(path, f"larger than {MAX_FILE_BYTES // MIB} MiB, not one kvplan wrote")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as err:  # bad JSON, bad UTF-8, 5,000-digit numbers
        raise _refusal(path, f"not JSON ({str(err).splitlines()[0][:120]})") from None
    return read_dict(data, path)


def read_dict(data: Any, path: Path) -> PerfTable:
    """A parsed file's checked table (`path` only names it in a refusal)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise SettingError(
            "{perf_table} file '{path}' is not a kvplan perf table (format {found}, expected "
            "{expected}); write one with `kvplan profile MODEL`",
            path=str(path),
            found=_shown(found),
            expected=FORMAT,
        )
    try:
        return _table(data)
    except _Refused as err:
        raise _refusal(path, str(err)) from None


def _refusal(path: Path, problem: str) -> SettingError:
    return SettingError(
        "{perf_table} file '{path}': {problem}; {fix}", path=str(path), problem=problem, fix=FIX
    )


def _table(data: dict[str, Any]) -> PerfTable:
    _known(data, TOP_KEYS, "the file")
    _need(data, TOP_KEYS, "the file")
    header = _mapping(data["device"], "device")
    names = tuple(f.name for f in fields(Device))
    _known(header, names, "device")
    _need(header, names, "device")
    device = _record(Device, header, "device")
    if device.kind not in DEVICE_KINDS:
        raise _Refused(f"device.kind must be cpu or cuda, got {_shown(device.kind)}")
    if device.dtype not in DTYPES:
        raise _Refused(f"device.dtype must be one of {', '.join(DTYPES)}, got {device.dtype!r}")
    measured_for = _mapping(data["measured_for"], "measured_for")
    sections: dict[str, Any] = {
        name: _section(data[name], name, section) for name, section in SECTIONS.items()
    }
    memory = None
    if data["memory"] is not None:
        table = _mapping(data["memory"], "memory")
        _known(table, ("bytes", "seconds"), "memory")
        _need(table, ("bytes", "seconds"), "memory")
        memory = _curve(table, MEMORY_AXIS, "memory")
    notes = data["notes"]
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise _Refused("notes must be a list of text")
    return PerfTable(
        device, measured_for, **sections, memory=memory, notes=tuple(str(n) for n in notes)
    )


def _section(entries: Any, name: str, section: Section) -> dict[Any, Curve | Surface]:
    if not isinstance(entries, list):
        raise _Refused(f"{name} must be a list of curves, got {type(entries).__name__}")
    keys = [f.name for f in fields(section.key)]
    allowed = (*keys, *(axis for axis, _ in section.axes), "seconds")
    curves: dict[Any, Curve | Surface] = {}
    for index, entry in enumerate(entries):
        where = f"{name}[{index}]"
        entry = _mapping(entry, where)
        _known(entry, allowed, where)
        _need(entry, allowed, where)
        key: Any = _record(section.key, {k: entry[k] for k in keys}, where)
        if key in curves:
            raise _Refused(f"{where} repeats the shape of an earlier entry; keep one")
        if len(section.axes) == 1:
            curves[key] = _curve(entry, section.axes[0], where)
        else:
            curves[key] = _surface(entry, section.axes, where)
    return curves


def _curve(entry: dict[str, Any], axis: tuple[str, float], where: str) -> Curve:
    x = _axis(entry[axis[0]], axis, where)
    seconds = _times(entry["seconds"], len(x), f"{where}.seconds")
    return Curve(x, seconds)


def _surface(entry: dict[str, Any], axes: tuple[tuple[str, float], ...], where: str) -> Surface:
    a, b = (_axis(entry[axis[0]], axis, where) for axis in axes)
    rows = entry["seconds"]
    if not isinstance(rows, list) or len(rows) != len(a):
        raise _Refused(
            f"{where}.seconds must be {len(a)} rows (one per {axes[0][0]} point) of {len(b)} times"
        )
    seconds = tuple(_times(row, len(b), f"{where}.seconds[{i}]") for i, row in enumerate(rows))
    return Surface(a, b, seconds)


def _axis(values: Any, axis: tuple[str, float], where: str) -> tuple[float, ...]:
    name, lowest = axis
    label = f"{where}.{name}"
    if not isinstance(values, list) or len(values) < 2:
        raise _Refused(f"{label} must list at least two points to interpolate between")
    for value in values:
        if not _number(value) or value < lowest:
            raise _Refused(f"{label} must hold finite numbers >= {lowest:g}, got {_shown(value)}")
    if any(low >= high for low, high in zip(values, values[1:])):
        raise _Refused(f"{label} must be strictly increasing, got {_shown(values)}")
    return tuple(float(value) for value in values)


def _times(values: Any, count: int, label: str) -> tuple[float, ...]:
    if not isinstance(values, list) or len(values) != count:
        raise _Refused(f"{label} must list {count} times, one per point")
    for value in values:
        if not _number(value) or value <= 0:
            raise _Refused(f"{label} must hold finite seconds > 0, got {_shown(value)}")
    return tuple(float(value) for value in values)


def _record(kind: type[K], values: dict[str, Any], where: str) -> K:
    """A dataclass of text, whole-number and number fields, each checked by its type."""
    checked: dict[str, Any] = {}
    for f in fields(kind):  # type: ignore[arg-type]
        value: Any = values.get(f.name)
        label = f"{where}.{f.name}"
        if f.type == "str":
            if not isinstance(value, str) or not value.strip() or len(value) > NAME_CHARS:
                raise _Refused(f"{label} must be a name, got {_shown(value)}")
        elif f.type == "int":
            lowest = 0 if f.name == "window" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise _Refused(f"{label} must be a whole number >= {lowest}, got {_shown(value)}")
            if value > 2**40:
                raise _Refused(f"{label} is too large to be a shape, got {_shown(value)}")
        elif not _number(value) or value <= 0:
            raise _Refused(f"{label} must be a finite number > 0, got {_shown(value)}")
        else:
            value = float(value)
        checked[f.name] = value
    return kind(**checked)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Refused(f"{where} must be a table, got {type(value).__name__}")
    return value


def _known(table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(key) for key in set(table) - set(allowed))
    if unknown:
        raise _Refused(f"{where} has an unknown field {unknown[0][:40]!r}")


def _need(table: dict[str, Any], needed: tuple[str, ...], where: str) -> None:
    missing = [key for key in needed if key not in table]
    if missing:
        raise _Refused(f"{where} misses the field {missing[0]!r}")


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
