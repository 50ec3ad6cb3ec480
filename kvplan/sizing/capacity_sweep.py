"""Vectorized estimate sweeps: the same arithmetic as capacity.plan() over a whole grid.

Categorical axes (model, gpu, kv-dtype, tp) are looped; numeric axes (context, batch,
block size, memory utilization) are numpy arrays, so 100,000 points take well under a
second. Every row equals what plan() gives for the same point (tests check this).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace
from typing import Any

from kvplan.engines.pool_sizing import check_max_model_len
from kvplan.results import ResultRecord
from kvplan.sizing.capacity import PlanInputs, engine_memory
from kvplan.sizing.capacity_kernel import pool_capacity
from kvplan.spec import parse_kv_format
from kvplan.spec.comma_list import comma_list
from kvplan.spec.numbers import MAX_GRID_POINTS, check_grid_size, check_number, parse_count
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.setting_error import SettingError

NUMERIC_AXES = {"context": int, "batch": int, "block-size": int, "gpu-memory-utilization": float}
CATEGORICAL_AXES = ("model", "gpu", "kv-dtype", "tp")
_LISTED_EXAMPLES = {
    "kv-dtype": "kv-dtype=fp16,fp8",
    "model": "model=llama-3.1-8b,qwen3-8b",
    "gpu": "gpu=h100-80gb,l40s",
}
# a point's settings (an estimate record's params), then what the estimator computes for it
PARAM_COLUMNS = (
    "model",
    "gpu",
    "tp",
    "kv_dtype",
    "context",
    "batch",
    "block_size",
    "gpu_memory_utilization",
)
COLUMNS = (
    *PARAM_COLUMNS,
    "kv_bytes_per_token",
    "seq_kv_bytes",
    "weight_bytes_per_gpu",
    "kv_budget_bytes_per_gpu",
    "num_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "max_batch_at_context",
    "verdict",
)

_RANGE = re.compile(r"^(?P<start>[^.:]+)\.\.(?P<stop>[^.:]+)(?::(?P<step>.+))?$")


def _number(text: str, kind: type, axis: str) -> float:
    if kind is int:  # the same suffixes (32k) and rules as the flag of the same name
        return parse_count(text, axis, within="sweep")
    try:
        value = float(text.strip())
    except ValueError:
        raise SettingError(
            "{sweep} {axis}: '{text}' is not a number; write e.g. {axis}=0.8,0.9",
            axis=axis,
            text=text.strip(),
        ) from None
    # The same finite range as the flag of the same name
    return check_number(axis, value, within="sweep")


def parse_axis(spec: str) -> tuple[str, list[Any]]:
    """'context=1k..128k' (doubling), 'batch=8..64:8' (stepped), 'kv-dtype=fp16,fp8' (listed)."""
    if "=" not in spec:
        raise SettingError(
            "{sweep} '{spec}' needs NAME=VALUES, e.g. context=1k..128k or kv-dtype=fp16,fp8",
            spec=spec,
        )
    name, values = (part.strip() for part in spec.split("=", 1))
    name = name.replace("_", "-")
    if name in ("kv-dtype", "model", "gpu"):
        takes = f"names separated by commas, e.g. {_LISTED_EXAMPLES[name]}"
        items = comma_list(values, "sweep", takes, spec)
        return name, list(dict.fromkeys(items))  # a repeated value is one point, not two rows
    if name == "tp":
        sizes = comma_list(
            values, "sweep", "whole numbers separated by commas, e.g. tp=1,2,4", spec
        )
        return name, list(dict.fromkeys(int(_number(v, int, name)) for v in sizes))
    if name not in NUMERIC_AXES:
        raise SettingError(
            "{sweep}: unknown axis '{axis}'; use one of: {known}",
            axis=name,
            known=", ".join(sorted([*NUMERIC_AXES, *CATEGORICAL_AXES])),
        )
    kind = NUMERIC_AXES[name]
    match = _RANGE.match(values)
    if not match:
        takes = "numbers separated by commas, or a range START..STOP[:STEP]"
        listed = comma_list(values, "sweep", takes, spec)
        return name, list(dict.fromkeys(_number(v, kind, name) for v in listed))
    start, stop = _number(match["start"], kind, name), _number(match["stop"], kind, name)
    if stop < start:
        raise SettingError(
            "{sweep} {axis}: range {values} runs backwards; write the smaller value first",
            axis=name,
            values=values,
        )
    points: list[float] = []
    step = _number(match["step"], kind, name) if match["step"] else None
    count = (stop - start) / step if step else math.log2(stop / start)
    check_grid_size(
        [int(count) + 2], MAX_GRID_POINTS, f" {name}={values}", "use a larger step", within="sweep"
    )
    value = start
    while value <= stop * (1 + 1e-9):
        points.append(value)
        value = value + step if step else value * 2
    if points[-1] != stop:
        points.append(stop)
    return name, points


def sweep(base: PlanInputs, axes: dict[str, list[Any]]) -> dict[str, Any]:
    """Columns (numpy arrays or lists) for every point of the grid, in COLUMNS order."""
    import numpy as np

    sizes = [len(values) for values in axes.values()]
    check_grid_size(
        sizes, MAX_GRID_POINTS, "", "sweep fewer values or use coarser steps", within="sweep"
    )
    models = [load_model(m) for m in axes.get("model", [])] or [base.model]
    # a context the engine refuses is refused for every model, swept or given with --context
    longest = int(max(axes.get("context", [base.context or 0]))) or None
    for model in models:
        check_max_model_len(model, longest, "context", "sweep" if "context" in axes else None)
    gpus = [load_gpu(g) for g in axes.get("gpu", [])] or [base.gpu]
    formats = [parse_kv_format(f) for f in axes.get("kv-dtype", [])] or [base.kv_format]
    tps = axes.get("tp", [base.tp])
    numeric = [
        np.asarray(axes.get(name, [_base_value(base, name)]), dtype=float) for name in NUMERIC_AXES
    ]
    grids = [g.ravel() for g in np.meshgrid(*numeric, indexing="ij")]
    context, batch, block, util = grids
    n = context.size
    parts: dict[str, list[Any]] = {column: [] for column in COLUMNS}

    for model, gpu, fmt, tp in itertools.product(models, gpus, formats, tps):
        # the grid's contexts go to engine_memory one by one; the point asks for none (a model
        # swept without a context axis is sized at the base model's, as before)
        point = replace(base, model=model, gpu=gpu, kv_format=fmt, tp=int(tp), context=None)
        profiles = {int(c): engine_memory(point, context=int(c)) for c in np.unique(context)}
        weights = next(iter(profiles.values())).weight_bytes  # the weights as the engine loads them
        reserve = (
            np.full(n, base.reserve_bytes)
            if base.reserve_bytes is not None
            else np.array([profiles[int(c)].reserve_bytes for c in context])
        )
        # the engine's share of the GPU at each point (SGLang's is of the memory NCCL leaves)
        usable = profiles[int(context[0])].usable_at(util)
        pool = pool_capacity(
            model,
            fmt,
            point.tp,
            usable=usable,
            weights=weights,
            reserve=reserve,
            kv_cache_bytes=base.kv_cache_bytes,
            context=context,
            batch=batch,
            block=block,
            respect_windows=base.respect_windows,
            kv_budget=base.kv_budget,
            ops=np,
        )
        kv_pool = np.broadcast_to(np.asarray(pool.kv_pool, dtype=float), (n,))
        blocks, seq, allocatable = pool.num_blocks, pool.seq_bytes, pool.allocatable
        values = {
            "model": [model.name] * n,
            "gpu": [gpu.name] * n,
            "tp": np.full(n, point.tp),
            "kv_dtype": [fmt.name] * n,
            "context": context.astype(int),
            "batch": batch.astype(int),
            "block_size": block.astype(int),
            "gpu_memory_utilization": util,
            # Byte counts are whole bytes; integers also keep the CSV small and fast to write.
            "kv_bytes_per_token": np.full(n, round(model.kv_bytes_per_token(fmt)), dtype=np.int64),
            "seq_kv_bytes": np.rint(seq).astype(np.int64),
            "weight_bytes_per_gpu": np.full(n, round(weights), dtype=np.int64),
            "kv_budget_bytes_per_gpu": np.floor(kv_pool).astype(np.int64),
            "num_blocks": blocks.astype(np.int64),
            "kv_cache_tokens": (blocks * block).astype(np.int64),
            "max_concurrency": np.round(allocatable / seq, 4),
            "max_batch_at_context": pool.max_batch.astype(np.int64),
            "verdict": pool.verdict,
        }
        for column in COLUMNS:
            parts[column].append(values[column])
    return {column: _concat(chunks) for column, chunks in parts.items()}


def _base_value(base: PlanInputs, axis: str) -> float:
    return {
        "context": base.max_model_len,
        "batch": base.batch,
        "block-size": base.block_size,
        "gpu-memory-utilization": base.utilization,
    }[axis]


def _concat(chunks: list[Any]) -> Any:
    import numpy as np

    if isinstance(chunks[0], list):
        return [item for chunk in chunks for item in chunk]
    return np.concatenate(chunks)


def write_csv(columns: dict[str, Any], path: Any) -> None:
    import csv

    from kvplan.results.atomic import atomic_file

    plain = [col.tolist() if hasattr(col, "tolist") else col for col in columns.values()]
    with atomic_file(path) as temp, open(temp, "w", newline="") as handle:  # whole file or none
        writer = csv.writer(handle)
        writer.writerow(list(columns))
        writer.writerows(zip(*plain))


def estimate_records(rows_: list[dict[str, Any]], allocation: str) -> list[ResultRecord]:
    """Sweep rows as kvplan.result/1 records (kind "estimate") for `kvplan report`."""
    import hashlib
    import json

    from kvplan.results import make_record

    run_id = hashlib.sha256(
        json.dumps(rows_[:1] + rows_[-1:], sort_keys=True).encode()
    ).hexdigest()[:12]
    records = []
    for row in rows_:
        params = {key: row[key] for key in PARAM_COLUMNS}
        params["allocation"] = allocation
        metrics = {key: value for key, value in row.items() if key not in PARAM_COLUMNS}
        records.append(
            make_record("estimate", run_id, "analytic", row["kv_dtype"], params, metrics)
        )
    return records


def rows(columns: dict[str, Any]) -> list[dict[str, Any]]:
    """Row dicts with plain Python values (for JSON)."""
    count = len(columns["model"])
    plain = {
        name: (col.tolist() if hasattr(col, "tolist") else col) for name, col in columns.items()
    }
    return [{name: plain[name][i] for name in COLUMNS} for i in range(count)]
