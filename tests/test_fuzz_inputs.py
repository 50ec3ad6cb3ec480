"""Fuzzing: random config fields, numbers and trace lines either work or fail with
a ValueError (library) / the one-line contract (CLI); never another exception, never a
nonsense result. Example counts are modest so the suite stays fast; the CLI-level
variants of the big ones are marked slow."""

from __future__ import annotations

import json
import math
import string
from pathlib import Path
from typing import Any

import pytest
from hardening_helpers import assert_clean_failure, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.sizing.capacity_sweep import parse_axis
from kvplan.spec import parse_kv_format
from kvplan.spec.config_checks import FIELD_RULES
from kvplan.spec.hf_config import model_spec_from_config
from kvplan.spec.numbers import RULES, check_number
from kvplan.spec.profiles import model_profiles, read_config
from kvplan.workload import load_trace

FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
BASES = {
    name: read_config(model_profiles()[name].path)
    for name in ("llama-3.1-8b", "deepseek-v3", "mixtral-8x7b")
    if name in model_profiles()
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _sane(spec: Any) -> None:
    """What a spec that was accepted must satisfy."""
    fmt = parse_kv_format("bf16")
    assert spec.params.total > 0 and 0 < spec.params.active <= spec.params.total
    assert math.isfinite(spec.kv_bytes_per_token(fmt)) and spec.kv_bytes_per_token(fmt) >= 0
    assert spec.max_position_embeddings >= 0 and spec.head_dim > 0
    assert math.isfinite(spec.weight_bytes()) and spec.weight_bytes() > 0


@FAST
@given(
    base=st.sampled_from(sorted(BASES)),
    field=st.sampled_from(sorted(FIELD_RULES)),
    value=json_values,
)
def test_any_value_in_any_config_field(base: str, field: str, value: Any) -> None:
    config = {**BASES[base], field: value}
    try:
        spec = model_spec_from_config(config, "fuzz", "fuzz.json")
    except ValueError as err:
        assert "\n" not in str(err) and "fuzz" in str(err)
        return
    _sane(spec)


@FAST
@given(
    base=st.sampled_from(sorted(BASES)),
    fields=st.dictionaries(
        st.sampled_from(sorted(FIELD_RULES)),
        st.integers(-3, 300) | st.floats(-1, 3e5),
        min_size=1,
        max_size=4,
    ),
)
def test_numeric_field_combinations(base: str, fields: dict[str, Any]) -> None:
    try:
        spec = model_spec_from_config({**BASES[base], **fields}, "fuzz", "fuzz.json")
    except ValueError:
        return
    _sane(spec)


numbers_as_text = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "1e300", "-1", "0", "0.5", "1.5", "1e15", "1e-300", "abc", "", "1k"]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
)


@FAST
@given(
    name=st.sampled_from(sorted(RULES)),
    value=st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(2**70), 2**70)
    | st.booleans()
    | st.text(max_size=4),
)
def test_number_rules_accept_only_finite_values_in_range(name: str, value: Any) -> None:
    try:
        checked = check_number(name, value)
    except ValueError as err:
        assert str(err).startswith(name)  # the setting; the command line words it as the flag
        return
    rule = RULES[name]
    assert math.isfinite(checked) and rule.low <= checked <= rule.high
    assert isinstance(checked, rule.kind)


@FAST
@given(
    axis=st.sampled_from(["context", "batch", "block-size", "gpu-memory-utilization", "tp"]),
    values=st.lists(numbers_as_text, min_size=1, max_size=3),
    as_range=st.booleans(),
)
def test_sweep_axis_text(axis: str, values: list[str], as_range: bool) -> None:
    text = f"{values[0]}..{values[-1]}" if as_range and len(values) > 1 else ",".join(values)
    try:
        name, points = parse_axis(f"{axis}={text}")
    except ValueError as err:
        assert str(err).startswith("sweep")
        return
    assert points and all(math.isfinite(p) and p > 0 for p in points)
    assert len(set(points)) == len(points)
    if axis == "gpu-memory-utilization":
        assert all(p <= 1 for p in points)
    else:
        assert all(float(p).is_integer() for p in points)


trace_fields = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": json_values | st.integers(0, 10**6),
        "input_length": json_values | st.integers(1, 5000),
        "output_length": json_values | st.integers(1, 50),
        "hash_ids": json_values | st.lists(st.integers(0, 9), max_size=10),
        "arrival_s": json_values,
        "prompt_len": json_values | st.integers(1, 100),
        "output_len": json_values,
    },
)
trace_line = st.one_of(
    trace_fields.map(json.dumps),
    st.text(alphabet=string.printable, max_size=40),
    st.binary(max_size=20).map(lambda b: b.decode("latin-1")),
)


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(trace_line, min_size=1, max_size=6),
    skip=st.booleans(),
    fmt=st.sampled_from([None, "mooncake", "generic"]),
)
def test_trace_lines(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], skip: bool, fmt: str | None
) -> None:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    try:
        loaded = load_trace(path, fmt, skip_bad_lines=skip)
    except ValueError as err:
        assert str(path) in str(err)
        return
    assert loaded.requests and loaded.requests[0].arrival_s == 0
    assert all(
        r.prompt_len >= 1 and r.output_len >= 1 and math.isfinite(r.arrival_s)
        for r in loaded.requests
    )


# --- the same at the CLI: exit code 2 and one line, or success ----------------------------------


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(sorted(FIELD_RULES)), value=json_values)
def test_estimate_cli_on_fuzzed_configs(
    tmp_path_factory: pytest.TempPathFactory, field: str, value: Any
) -> None:
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps({**BASES["llama-3.1-8b"], field: value}))
    result = invoke(["estimate", path, "--json"])
    if result.exit_code != 0:
        assert_clean_failure(result)


FLOAT_FLAGS = [
    "--kv-cache-gib",
    "--reserve-gib",
    "--gpu-mem-gib",
    "--params-b",
    "--gpu-memory-utilization",
]
INT_FLAGS = ["--tp", "--batch", "--context", "--block-size", "--kv-budget"]


@settings(max_examples=30, deadline=None)
@given(flag=st.sampled_from(FLOAT_FLAGS + INT_FLAGS), value=numbers_as_text)
def test_estimate_cli_numbers(flag: str, value: str) -> None:
    result = invoke(["estimate", "llama-3.1-8b", flag, value, "--json"])
    if result.exit_code != 0:
        assert_clean_failure(result)
    else:
        json.loads(result.stdout)  # strict JSON: NaN/Infinity would not parse with a strict reader
        assert "NaN" not in result.stdout and "Infinity" not in result.stdout


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    flag=st.sampled_from(
        [
            "--rate",
            "--cv",
            "--num-requests",
            "--max-model-len",
            "--block-size",
            "--w-hit",
            "--time-scale",
            "--max-num-seqs",
            "--kv-cache-gib",
            "--seed",
        ]
    ),
    value=numbers_as_text,
)
def test_bench_cli_numbers(tmp_path_factory: pytest.TempPathFactory, flag: str, value: str) -> None:
    out = tmp_path_factory.mktemp("b") / "r.jsonl"
    args = ["bench", "--num-requests", "8", "--optimizations", "paged", flag, value, "--out", out]
    result = invoke(args)
    if result.exit_code != 0:
        assert_clean_failure(result)
        assert not out.exists()


def test_fuzz_examples_cover_every_field() -> None:
    """The config table names every field the estimator reads (hf_config.py, params.py)."""
    import re

    spec_dir = Path(__file__).resolve().parents[1] / "kvplan" / "spec"
    modules = ("hf_config", "params", "layers", "layer_plans", "state_layers", "family_defaults")
    sources = "".join((spec_dir / f"{name}.py").read_text() for name in modules)
    read = set(re.findall(r'cfg(?:\.get)?\(?\[?"([a-z_0-9]+)"', sources))
    read -= {"text_config"} & read  # read through text_config(), checked as a dict
    unchecked = sorted(name for name in read if name not in FIELD_RULES)
    assert unchecked == [], f"add these fields to config_checks.FIELD_RULES: {unchecked}"
