"""The `kvplan.perf-table/1` file: a written table reads back equal, and every malformed file is
refused in one line naming the file, the problem and the fix."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from profile_helpers import model_table, write_model_table

from kvplan.sizing.operators.profile_table import FORMAT, PerfTable, perf_table_setting, read_table
from kvplan.sizing.operators.profile_writer import table_dict, write_table
from kvplan.spec.setting_error import SettingError


def test_a_written_table_reads_back_equal(tmp_path: Path) -> None:
    table = model_table(tp=1)
    path = tmp_path / "perf.json"
    write_table(table, path)
    assert read_table(path) == table
    assert json.loads(path.read_text())["format"] == FORMAT


def test_every_section_round_trips(tmp_path: Path) -> None:
    """A TP table holds an all-reduce curve too; the counts say what each section holds."""
    table = model_table("llama-3.1-8b", tp=2)
    path = tmp_path / "perf.json"
    write_table(table, path)
    read = read_table(path)
    assert read == table
    counts = read.counts()
    assert counts["all_reduce"] == 1 and counts["memory"] == 1
    assert counts["gemm"] == 5  # qkv, o, gate_up, down, lm_head
    assert counts["decode_attention"] == counts["prefill_attention"] == 1


def test_a_table_is_written_one_curve_a_line(tmp_path: Path) -> None:
    path = write_model_table(tmp_path / "perf.json")
    lines = path.read_text().splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert sum(line.startswith('  {"n":') for line in lines) == 5
    assert '"m": [1, 2, 16, 512]' in path.read_text()  # whole points without ".0"


def _mutated(tmp_path: Path, change: Any) -> Path:
    data = table_dict(model_table())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


def _set(*keys: Any, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def _drop(*keys: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return change


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_drop("device", "name"), "device misses the field 'name'"),
        (_set("device", "kind", value="tpu"), "device.kind must be cpu or cuda, got 'tpu'"),
        (_set("device", "dtype", value="int8"), "device.dtype must be one of bf16, fp16, fp32"),
        (_set("device", "threads", value=True), "device.threads must be a whole number >= 1"),
        (_set("extra", value=1), "the file has an unknown field 'extra'"),
        (_drop("memory"), "the file misses the field 'memory'"),
        (_drop("gemm", 0, "seconds"), "gemm[0] misses the field 'seconds'"),
        (_set("gemm", 0, "n", value=0), "gemm[0].n must be a whole number >= 1, got 0"),
        (_set("gemm", 0, "format", value=""), "gemm[0].format must be a name, got ''"),
        (_set("gemm", 0, "seconds", 1, value=math.nan), "gemm[0].seconds must hold finite seconds "
                                                        "> 0, got nan"),
        (_set("gemm", 0, "seconds", 1, value=math.inf), "gemm[0].seconds must hold finite seconds "
                                                        "> 0, got inf"),
        (_set("gemm", 0, "seconds", 0, value=0), "gemm[0].seconds must hold finite seconds > 0, "
                                                 "got 0"),
        (_set("gemm", 0, "seconds", 0, value=-1e-3),
         "gemm[0].seconds must hold finite seconds > 0"),
        (_set("gemm", 0, "seconds", value=[1e-3]), "gemm[0].seconds must list 4 times, one per "
                                                   "point"),
        (_set("gemm", 0, "m", value=[1, 16, 2, 512]), "gemm[0].m must be strictly increasing"),
        (_set("gemm", 0, "m", value=[1, 2, 2, 512]), "gemm[0].m must be strictly increasing"),
        (_set("gemm", 0, "m", value=[0, 2, 16, 512]), "gemm[0].m must hold finite numbers >= 1, "
                                                      "got 0"),
        (_set("gemm", 0, "m", value=[1]), "gemm[0].m must list at least two points"),
        (_set("gemm", 1, "n", value="x"), "gemm[1].n must be a whole number >= 1, got 'x'"),
        (_set("decode_attention", 0, "seconds", value=[[1e-3]]), "decode_attention[0].seconds "
                                                                 "must be 3 rows"),
        (_set("decode_attention", 0, "seconds", 0, value=[1e-3]), "decode_attention[0].seconds[0] "
                                                                  "must list 3 times"),
        (_set("prefill_attention", 0, "before", value=[-1, 64, 4096]),
         "prefill_attention[0].before must hold finite numbers >= 0"),
        (_set("decode_attention", 0, "heads_per_gpu", value=0),
         "decode_attention[0].heads_per_gpu must be a finite number > 0"),
        (_set("memory", value=[1, 2]), "memory must be a table, got list"),
        (_set("notes", value="none"), "notes must be a list of text"),
        (_set("gemm", value={}), "gemm must be a list of curves, got dict"),
    ],
)  # fmt: skip
def test_a_malformed_table_is_refused_in_one_line(
    tmp_path: Path, change: Any, problem: str
) -> None:
    path = _mutated(tmp_path, change)
    with pytest.raises(SettingError) as caught:
        read_table(path)
    message = str(caught.value)
    assert message.startswith(f"perf_table file '{path}': {problem}"), message
    assert message.endswith("; write it again with `kvplan profile MODEL --output FILE`")
    assert "\n" not in message and caught.value.setting == "perf_table"


def test_a_repeated_shape_is_refused(tmp_path: Path) -> None:
    path = _mutated(tmp_path, lambda data: data["gemm"].append(data["gemm"][0]))
    with pytest.raises(SettingError, match=r"gemm\[5\] repeats the shape of an earlier entry"):
        read_table(path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"format": "kvplan.perf-table/2"}', "is not a kvplan perf table (format "
                                              "'kvplan.perf-table/2'"),
        ('{"format": "kvplan.calibration/1"}', "is not a kvplan perf table"),
        ("[1, 2]", "is not a kvplan perf table (format None"),
        ("{not json", "': not JSON ("),
    ],
)  # fmt: skip
def test_a_foreign_file_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "other.json"
    path.write_text(text)
    with pytest.raises(SettingError, match=r"kvplan profile") as caught:
        read_table(path)
    assert problem in str(caught.value) and str(path) in str(caught.value)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match=r"file '.*absent.json' cannot be read \("):
        read_table(tmp_path / "absent.json")


@pytest.mark.parametrize("value", [3, "", "  ", ["a"]])
def test_the_setting_must_name_a_file(value: Any) -> None:
    with pytest.raises(SettingError, match="must name a file written by `kvplan profile`"):
        perf_table_setting(value)


def test_the_setting_reads_the_file_now(tmp_path: Path) -> None:
    path = write_model_table(tmp_path / "perf.json")
    assert perf_table_setting(path) == str(path)
    assert perf_table_setting(None) is None


def test_a_table_the_reader_would_refuse_is_never_written(tmp_path: Path) -> None:
    table = model_table()
    path = tmp_path / "perf.json"
    path.write_text("before")
    first = next(iter(table.gemm))
    broken = PerfTable(table.device, gemm={first: type(table.gemm[first])((1.0, 2.0), (1.0, 0.0))})
    with pytest.raises(SettingError, match="finite seconds > 0"):
        write_table(broken, path)
    assert path.read_text() == "before"  # the old file is left as it was
    assert [p.name for p in tmp_path.iterdir()] == ["perf.json"]  # no temporary file left
