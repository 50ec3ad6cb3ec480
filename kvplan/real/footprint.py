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

from kvplan import GIB
from kvplan.spec import ModelSpec
from kvplan.spec.setting_error import SettingError

WARN_BYTES = 2 * GIB  # beyond this, building takes long enough to deserve a word
SAVING = 0.75  # fewer layers are offered when they leave at most this share of the weights
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
) -> SettingError | None:
    """A one-line warning for a large build (None for a small one), or a SettingError raised
    when it cannot fit in memory; either names fixes that differ from the settings given."""
    need = model_footprint(spec, layers, dtype)
    if need.weight_bytes < WARN_BYTES:
        return None
    fixes = quicker_builds(spec, layers, dtype, need)
    what = (
        "real mode builds {name} ({kept}) in {precision}: about {gib:.1f} GiB of weights in host "
        "memory"
    )
    values = {
        "name": spec.name,
        "kept": f"{need.layers} layer" + ("s" if need.layers != 1 else ""),
        "precision": dtype,
        "gib": need.weight_bytes / GIB,
        "device": device,
    }
    free = available_bytes()
    if free is not None and need.weight_bytes > free:
        raise SettingError(
            what + ", but only {free:.1f} GiB is available; " + fixes, free=free / GIB, **values
        )
    return SettingError(
        what + " before moving to {device}; this can take minutes (for a quick run: " + fixes + ")",
        **values,
    )


def quicker_builds(spec: ModelSpec, layers: int | None, dtype: str, need: Footprint) -> str:
    """What makes the build smaller, as a SettingError template: fewer layers than kept when
    that saves at least a quarter (the embeddings and LM head stay whatever --layers keeps),
    bf16 for fp32, and a smaller model."""
    fixes = []
    fewer = 2 if layers is None or layers > 2 else 1
    smaller = model_footprint(spec, fewer, dtype)
    offered = fewer < need.layers and smaller.weight_bytes <= SAVING * need.weight_bytes
    if offered:
        fixes.append("{layers} " + f"{fewer} ({smaller.weight_bytes / GIB:.1f} GiB)")
    if dtype == "fp32":
        half = model_footprint(spec, layers, "bf16").weight_bytes
        fixes.append("{model_dtype} bf16 " + f"({half / GIB:.1f} GiB)")
    fixes.append("a smaller {model}")
    text = ", ".join(fixes[:-1]) + " or " + fixes[-1] if len(fixes) > 1 else fixes[0]
    if layers is not None and not offered:
        embeddings = (spec.params.embedding + spec.params.lm_head) * DTYPE_BYTES.get(dtype, 4)
        text += f"; the embeddings and LM head take {embeddings / GIB:.1f} GiB at any " + "{layers}"
    return text
