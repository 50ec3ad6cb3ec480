"""Optional extras fail politely: with the packages of an extra missing (simulated here by
setting them to None in sys.modules, which makes both find_spec and import fail), every
command that needs them ends with one line naming the packages and the pip command, exit
code 2, and no traceback; `bench --report` keeps the run it finished."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.spec.extras import EXTRAS, MissingExtra, missing_modules, require_extra

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
REPORT_MESSAGE = "needs matplotlib and pandas: pip install 'kvplan[report]'"
REAL_MESSAGE = "needs torch and transformers: pip install 'kvplan[real]'"


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_each_extra_names_packages_its_pyproject_extra_installs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, modules in EXTRAS.items():
        required = {re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0] for spec in extras[extra]}
        assert set(modules) <= required, (extra, modules, required)


def test_the_message_names_only_the_missing_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "pandas")
    assert missing_modules("report") == ["pandas"]
    with pytest.raises(MissingExtra) as caught:
        require_extra("report", "kvplan report")
    assert str(caught.value) == "kvplan report needs pandas: pip install 'kvplan[report]'"
    _without(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra) as caught:
        require_extra("report", "kvplan report")
    assert str(caught.value) == f"kvplan report {REPORT_MESSAGE}"


def _bench(out: Path, *args: str):
    return runner.invoke(
        app,
        [
            "bench",
            "--num-requests",
            "20",
            "--optimizations",
            "paged,prefix",
            *args,
            "--out",
            str(out),
        ],
    )


def test_report_without_its_extra_is_one_line(tmp_path: Path, monkeypatch) -> None:
    results = tmp_path / "r.jsonl"
    assert _bench(results).exit_code == 0
    _without(monkeypatch, "pandas", "matplotlib")
    result = runner.invoke(app, ["report", str(results), "--out", str(tmp_path / "rep")])
    assert _one_error_line(result) == f"error: kvplan report {REPORT_MESSAGE}"
    assert not (tmp_path / "rep").exists()


def test_bench_report_without_its_extra_keeps_the_run(tmp_path: Path, monkeypatch) -> None:
    _without(monkeypatch, "pandas", "matplotlib")
    out = tmp_path / "r.jsonl"
    result = _bench(out, "--report")
    # the setting and the extra it needs; the run is kept, and the line says where
    line = _one_error_line(result)
    assert line.startswith("error: kvplan bench --report ") and REPORT_MESSAGE in line
    assert f"written to {out}" in line and f"kvplan report {out}" in line
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["optimization"] for r in records] == ["paged", "prefix"]
    assert "paged" in result.stdout  # the run's table was shown before the report was tried
    assert not (tmp_path / "r").exists()  # no report folder, not even a half one


def test_bench_report_failing_otherwise_keeps_the_run_too(tmp_path: Path, monkeypatch) -> None:
    def failing(results: list[Path], out_dir: Path) -> None:
        raise ValueError("the chart could not be drawn; shorten the names")

    # the report package as the bench command imports it, without pandas' import time
    monkeypatch.setitem(sys.modules, "kvplan.report", SimpleNamespace(write_report=failing))
    out = tmp_path / "r.jsonl"
    result = _bench(out, "--report")
    line = _one_error_line(result)
    assert line.startswith("error: the chart could not be drawn; shorten the names; ")
    assert f"written to {out}" in line and f"kvplan report {out}" in line
    assert len(out.read_text().splitlines()) == 2


def test_bench_json_report_without_its_extra(tmp_path: Path, monkeypatch) -> None:
    _without(monkeypatch, "pandas", "matplotlib")
    out = tmp_path / "r.jsonl"
    result = _bench(out, "--report", "--json")
    assert REPORT_MESSAGE in _one_error_line(result)
    assert [row["optimization"] for row in json.loads(result.stdout)] == ["paged", "prefix"]
    assert len(out.read_text().splitlines()) == 2


def test_real_mode_without_its_extra_is_one_line_before_any_work(
    tmp_path: Path, monkeypatch
) -> None:
    _without(monkeypatch, "torch", "transformers")
    out = tmp_path / "r.jsonl"
    result = _bench(out, "--mode", "real")
    assert _one_error_line(result) == f"error: kvplan bench --mode real {REAL_MESSAGE}"
    assert not out.exists()


def test_quality_report_without_its_extra_is_refused_before_the_model_loads(
    tmp_path: Path, monkeypatch
) -> None:
    # torch and transformers present (whatever this machine has), pandas and matplotlib not
    real_find_spec = importlib.util.find_spec
    present = {"torch", "transformers"}
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name in present else real_find_spec(name, *a),
    )
    _without(monkeypatch, "pandas", "matplotlib")
    text = tmp_path / "t.txt"
    text.write_text("once upon a time")
    result = _bench(tmp_path / "q.jsonl", "--mode", "real", "--quality-text", str(text), "--report")
    line = _one_error_line(result)
    assert line.startswith("error: kvplan bench --quality-text --report ")
    assert REPORT_MESSAGE in line


SWEEP = "[fixed]\nnum_requests = 10\n{extra}\n[axes]\nrate = [1, 2]\n"


@pytest.mark.parametrize(
    ("extra", "options", "missing", "message"),
    [
        (
            "",
            ["--executor", "ray"],
            ("ray",),
            "the ray executor needs ray: pip install 'kvplan[ray]'",
        ),
        (
            'mode = "real"',
            [],
            ("torch", "transformers"),
            f"a sweep point with mode = 'real' {REAL_MESSAGE}",
        ),
    ],
)
def test_sweep_without_an_extra_is_one_line_and_touches_no_output(
    extra: str,
    options: list[str],
    missing: tuple[str, ...],
    message: str,
    tmp_path: Path,
    monkeypatch,
) -> None:
    _without(monkeypatch, *missing)
    study = tmp_path / "s.toml"
    study.write_text(SWEEP.format(extra=extra))
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(study), "--out", str(out), *options])
    assert _one_error_line(result) == f"error: {message}"
    assert not out.exists()
