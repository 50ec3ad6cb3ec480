"""How much host memory real mode needs to build its model, checked before building it.

Real mode builds a transformers model in host memory first (random weights in a profile's
shape, or a checkpoint), then moves it to the device. The default profile
(llama-3.1-8b) in fp32 is about 30 GiB: on a laptop that is minutes of work and then an
out-of-memory kill. The estimate is the parameter count of the layers kept (--layers)
plus embeddings, times the dtype's bytes; activations and the KV pool come on top.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kvplan.spec import ModelSpec

GIB = 2**30
WARN_BYTES = 2 * GIB  # beyond this, building takes long enough to deserve a word
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class Footprint:
    weight_bytes: float
    layers: int
    dtype: str


def model_footprint(spec: ModelSpec, layers: int | None, dtype: str) -> Footprint:
    p = spec.params
    embeddings = p.embedding + p.lm_head
    per_layer = (p.total - embeddings) / spec.num_layers
    kept = min(layers, spec.num_layers) if layers else spec.num_layers
    return Footprint((embeddings + per_layer * kept) * DTYPE_BYTES.get(dtype, 4), kept, dtype)


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_real_model_memory(
    spec: ModelSpec, layers: int | None, dtype: str, device: str
) -> str | None:
    """A one-line warning for a large build, or ValueError when it cannot fit in memory."""
    need = model_footprint(spec, layers, dtype)
    if need.weight_bytes < WARN_BYTES:
        return None
    small = model_footprint(spec, 2, dtype)
    fix = f"pass --layers 2 ({small.weight_bytes / GIB:.1f} GiB), a smaller --model" + (
        " or --model-dtype bf16" if dtype == "fp32" else ""
    )
    free = available_bytes()
    what = (
        f"real mode builds {spec.name} ({need.layers} layers) in {dtype}: about "
        f"{need.weight_bytes / GIB:.1f} GiB of weights in host memory"
    )
    if free is not None and need.weight_bytes > free:
        raise ValueError(f"{what}, but only {free / GIB:.1f} GiB is available; {fix}")
    return f"{what} before moving to {device}; this can take minutes ({fix} for a quick run)"
