"""Specs: what is being planned for (model KV layout, GPU, KV format), HF config parsing,
parameter counts and the shipped profiles. Pure data and parsing; no heavy imports."""

from kvplan.spec.attention_group import GROUP_TYPES, AttentionGroup
from kvplan.spec.gpu import GpuSpec
from kvplan.spec.kv_format import KV_FORMAT_NAMES, KVFormat, dtype_bytes, parse_kv_format
from kvplan.spec.model import ModelSpec, ParamCount

__all__ = [
    "GROUP_TYPES",
    "AttentionGroup",
    "GpuSpec",
    "KVFormat",
    "KV_FORMAT_NAMES",
    "ModelSpec",
    "ParamCount",
    "dtype_bytes",
    "parse_kv_format",
]
