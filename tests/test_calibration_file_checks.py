"""A calibration file is checked whole when `kvplan bench --calibration` loads it: every
figure of its engine overhead finite and in its range (a NaN or infinite per-step overhead made
every simulated step
last forever), the held-out errors numbers, the file small and JSON. A refusal is one line
naming the file and the key, exit 2, and the results file bench would have written is left
as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hardening_helpers import fails_cleanly

from kvplan.sim.calibration_file import CALIBRATION_FORMAT, read_calibration

OVERHEAD = {"base_s": 0.002, "per_seq_s": 1e-5, "gpu_factor": 1.0}
GOOD: dict[str, Any] = {
    "format": CALIBRATION_FORMAT,
    "gpu": "h100-80gb",
    "engine": "vllm",
    "overhead": OVERHEAD,
    "source": "fitted on 2 run(s)",
    "held_out": {"mean_tpot_ms_error": 0.05, "mean_tpot_ms_runs": 2},
}
FILES: dict[str, tuple[dict[str, Any] | str, list[str]]] = {
    "NaN overhead": (
        {"overhead": {**OVERHEAD, "base_s": float("nan")}},
        ["overhead base_s", "got nan"],
    ),
    "infinite overhead": (
        {"overhead": {**OVERHEAD, "per_seq_s": float("inf")}},
        ["overhead per_seq_s", "got inf"],
    ),
    "negative factor": (
        {"overhead": {**OVERHEAD, "gpu_factor": -1}},
        ["overhead gpu_factor", "got -1"],
    ),
    "a word for a factor": ({"overhead": {**OVERHEAD, "gpu_factor": "fast"}}, ["got 'fast'"]),
    "a 5 s step overhead": (
        {"overhead": {**OVERHEAD, "base_s": 5}},
        ["overhead base_s", "<= 1, got 5"],
    ),
    "a missing figure": ({"overhead": {"base_s": 0.5}}, ["misses overhead 'per_seq_s'"]),
    "overhead a list": ({"overhead": [0.5]}, ["no overhead table"]),
    "the older step model's file": (
        {"format": "kvplan-step-model-calibration/1"},
        ["older step model", "rewrite it with `kvplan calibrate`"],
    ),
    "a NaN held-out error": (
        {"held_out": {"mean_tpot_ms_error": float("nan")}},
        ["held_out mean_tpot_ms_error", "got nan"],
    ),
    "an unknown held-out key": ({"held_out": {"<b>": 1}}, ["held_out has an unknown key '<b>'"]),
    "held-out runs of 0.5": (
        {"held_out": {"mean_tpot_ms_runs": 0.5}},
        ["held_out mean_tpot_ms_runs"],
    ),
    "a table for the source": ({"source": {"a": 1}}, ["source must be text, got dict"]),
    "another format": ({"format": "something-else/1"}, ["is not a kvplan calibration file"]),
    "not JSON": ("base_s = 0.002\n", ["cannot be read as JSON"]),
    "5,000 digits": (
        '{"format": "' + CALIBRATION_FORMAT + '", "overhead": ' + "9" * 5000 + "}",
        ["cannot be read as JSON"],
    ),
}


def _write(folder: Path, content: dict[str, Any] | str) -> Path:
    path = folder / "cal.json"
    path.write_text(content if isinstance(content, str) else json.dumps({**GOOD, **content}))
    return path


def _bench(calibration: Path | str, out: Path) -> list[Any]:
    quick = ["--num-requests", "12", "--rate", "50", "--optimizations", "paged"]
    return ["bench", "--gpu", "h100", *quick, "--calibration", calibration, "--out", out]


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_calibration_file_no_fit_wrote_is_refused_on_load(tmp_path: Path, name: str) -> None:
    content, culprits = FILES[name]
    path = _write(tmp_path, content)
    (tmp_path / "results.jsonl").write_text('{"kept": true}\n')
    line = fails_cleanly(_bench(path, tmp_path / "results.jsonl"), tmp_path, *culprits)
    assert f"'{path}'" in line


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_dev_zero_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    fails_cleanly(
        _bench("/dev/zero", tmp_path / "results.jsonl"),
        tmp_path,
        "calibration file '/dev/zero': larger than 16 MiB",
    )


def test_a_written_file_reads_back_with_its_factors_and_band(tmp_path: Path) -> None:
    read = read_calibration(_write(tmp_path, {}))
    assert read.source == "fitted on 2 run(s)"
    overhead = read.overhead
    assert (overhead.base_s, overhead.per_seq_s, overhead.gpu_factor) == (0.002, 1e-5, 1.0)
    assert read.held_out == {"mean_tpot_ms_error": 0.05, "mean_tpot_ms_runs": 2}
