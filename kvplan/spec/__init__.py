"""Specs: what is being planned for (model KV layout, GPU, KV format), HF config parsing,
parameter counts and the shipped profiles. Pure data and parsing; no heavy imports."""

from kvplan.spec.attention_group import AttentionGroup, AttentionKind
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.kv_format import KV_FORMAT_NAMES, KVFormat, dtype_bytes, parse_kv_format
from kvplan.spec.model import ModelSpec, ParamCount

__all__ = [
    "AttentionGroup",
    "AttentionKind",
    "GpuSpec",
    "KVFormat",
    "KV_FORMAT_NAMES",
    "ModelSpec",
    "ParamCount",
    "dtype_bytes",
    "parse_kv_format",
]
