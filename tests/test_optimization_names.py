"""One home per name: an optimization names a KV format exactly where --kv-dtype would take it,
because the optimization parser asks the KV-format parser."""

from __future__ import annotations

import pytest

from kvplan.bench.optimizations import parse_optimization
from kvplan.spec import parse_kv_format


@pytest.mark.parametrize(
    "name", ["int2", "int8-token", "float16", "fp8_e4m3", "int4-g64", "kivi-int2"]
)
def test_every_kv_format_the_kv_dtype_parser_takes_composes(name: str) -> None:
    parse_kv_format(name)  # --kv-dtype takes it
    assert parse_optimization(f"paged+{name}").kv_dtype == name


@pytest.mark.parametrize("name", ["int3", "fp6", "auto"])
def test_a_name_neither_parser_takes_is_unknown(name: str) -> None:
    with pytest.raises(ValueError, match=f"unknown optimization '{name}'"):
        parse_optimization(f"paged+{name}")
