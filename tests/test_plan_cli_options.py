"""`kvplan plan`'s options as a first-time user types them: --gpu as estimate and bench spell
it, --max-model-len with bench's meaning and a default that admits long random requests,
--workload-param with --workload random read as bench reads it, --step-model and
--calibration checked as bench checks them, and a setting no engine would start with refused
in one line rather than listed as "does not fit"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kvplan.bench.workloads import WorkloadSpec, build_workload
from kvplan.cli.app import app
from kvplan.deploy.demand import Candidate, Demand
from kvplan.deploy.replica_search import probe
from kvplan.deploy.slo import parse_slo
from kvplan.spec.resolve import load_model
from kvplan.spec.setting_error import SettingError

runner = CliRunner()
# a plan of a few seconds: one candidate, the datasheet roofline, short trials, no pool
QUICK = ["--rate", "1", "--step-model", "roofline", "--num-requests", "10", "--workers", "1"]


def _run(args: list[str]) -> Result:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})


def _error_line(result: Result) -> str:
    """The one `error:` line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _plan_json(args: list[str]) -> dict:
    result = _run(["plan", "llama-3.1-8b", *QUICK, "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- --gpu ------------------------------------------------------------------------------------


def test_plan_takes_gpu_as_estimate_and_bench_spell_it_and_keeps_gpus() -> None:
    # a TPOT target keeps the trials short: the question is which GPUs are candidates
    quick = ["--tp", "1", "--slo", "tpot_p90=1s"]
    data = _plan_json(["--gpu", "l4,h100-80gb", *quick])
    assert sorted(row["gpu"] for row in data["candidates"]) == ["h100-80gb", "l4"]
    alias = _plan_json(["--gpus", "h100-80gb", *quick])
    assert [row["gpu"] for row in alias["candidates"]] == ["h100-80gb"]


def test_plan_errors_and_help_name_gpu() -> None:
    line = _error_line(_run(["plan", "llama-3.1-8b", "--rate", "1"]))
    assert "--gpu h100-80gb" in line and "--gpus" not in line
    line = _error_line(_run(["plan", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-80gb,"]))
    assert line.startswith("error: --gpu 'h100-80gb,' has an empty entry")
    text = _run(["plan", "--help"]).stdout
    assert "--gpu" in text and "--gpus" in text  # the alias is listed beside the option


# --- --max-model-len ----------------------------------------------------------------------------


def test_long_random_requests_fit_by_default_as_vllm_serves_them() -> None:
    """6,020-token requests on one H100: vLLM's default max_model_len (the model's maximum,
    131,072 for Llama-3.1-8B) admits them, so the candidate is planned, not "does not fit"."""
    # a TPOT target sees the batch, not the queue: short trials (the question is admission)
    data = _plan_json(
        ["--gpu", "h100-80gb", "--tp", "1", "--workload", "random", "--slo", "tpot_p90=1s"]
        + ["--input-len", "6000", "--output-len", "20"]
    )
    (row,) = data["candidates"]
    assert row["status"] == "ok" and data["winner"] == 0, row


def test_bench_and_plan_share_the_default_that_admits_long_random_requests() -> None:
    model = load_model("llama-3.1-8b")

    def built(spec: WorkloadSpec, mode: str = "simulated") -> int:
        return build_workload(spec, model, mode, 0).max_model_len

    long = WorkloadSpec(kind="random", input_len=6000, output_len=200, num_requests=4)
    assert built(long) == 131072  # vLLM's default: the model's maximum
    assert built(WorkloadSpec(kind="random", input_len=1000, num_requests=4)) == 4096
    assert built(WorkloadSpec(kind="sharegpt", num_requests=4)) == 4096  # capped by its generator
    # vLLM's random dataset draws up to L(1 + r): 3,800 x 1.1 + 128 x 1.1 is over 4,096
    ranged = WorkloadSpec(kind="random", input_len=3800, random_range_ratio=0.1, num_requests=4)
    assert ranged.longest_request == 4180 + 141 and built(ranged) == 131072
    assert built(long, "real") == 4096  # real mode runs on this machine's memory


@pytest.mark.parametrize(
    ("args", "named"),
    [
        # the setting, the length it has and the fix: the length the longest request needs
        (["--input-len", "6000", "--max-model-len", "4096"], ("--max-model-len 4,096", "6200")),
        # no --max-model-len could hold it: the model's maximum, and the flag it caps
        (["--input-len", "200000"], ("200,200 tokens", "131,072", "--max-model-len")),
        (["--input-len", "10", "--max-model-len", "1"], ("--max-model-len",)),
        (["--input-len", "10", "--max-model-len", "200000"], ("--max-model-len 200,000",)),
    ],
)
def test_requests_the_engine_would_reject_for_length_are_one_line_naming_the_fix(
    args: list[str], named: tuple[str, ...]
) -> None:
    result = _run(
        ["plan", "llama-3.1-8b", *QUICK, "--gpu", "h100-80gb", "--tp", "1", "--workload"]
        + ["random", "--output-len", "200", *args]
    )
    line = _error_line(result)
    assert all(part in line for part in named), line


# --- --workload-param with --workload random -----------------------------------------------------


def test_random_reads_its_lengths_as_workload_params_in_bench_and_plan(tmp_path: Path) -> None:
    spec = WorkloadSpec(kind="random", params={"input_len": 6000, "output_len": 2e2})
    assert (spec.input_len, spec.output_len, spec.params) == (6000, 200, {})
    data = _plan_json(
        ["--gpu", "h100-80gb", "--tp", "1", "--workload", "random", "--slo", "tpot_p90=1s"]
        + ["--workload-param", "input_len=6000", "--workload-param", "output_len=20"]
    )
    assert data["candidates"][0]["status"] == "ok"
    out = tmp_path / "r.jsonl"
    result = _run(
        ["bench", "--workload", "random", "--workload-param", "input_len=300"]
        + ["--num-requests", "5", "--optimizations", "paged", "--json", "--out", out]
    )
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text().splitlines()[0])
    assert record["params"]["workload"]["input_len"] == 300


@pytest.mark.parametrize(
    ("params", "named"),
    [
        # the ignored name and the settings random does read
        (["doc_len=10"], ("'doc_len'", "input_len, output_len, random_range_ratio")),
        (["input_len=0"], ("input_len",)),
        (["input_len=10", "--input-len", "20"], ("'input_len'", "--input-len")),
    ],
)
def test_plan_and_bench_refuse_the_same_random_params_in_the_same_words(
    params: list[str], named: tuple[str, ...], tmp_path: Path
) -> None:
    lines = []
    for command in (
        ["plan", "llama-3.1-8b", *QUICK, "--gpu", "l4", "--tp", "1"],
        ["bench", "--num-requests", "5", "--out", tmp_path / "r.jsonl"],
    ):
        lines.append(
            _error_line(_run([*command, "--workload", "random", "--workload-param", *params]))
        )
    assert lines[0] == lines[1] and lines[0].startswith("error: --workload-param "), lines
    assert all(part in lines[0] for part in named), lines[0]


def test_a_misnamed_random_param_is_a_setting_error_naming_the_accepted_ones() -> None:
    with pytest.raises(SettingError, match="its settings are input_len, output_len"):
        WorkloadSpec(kind="random", params={"prompt_len": 10})


# --- --step-model and --calibration ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "setting", "named"),
    [
        # the typo, and where a calibration file goes instead
        (["--step-model", "rooflin"], "--step-model", ("'rooflin'", "--calibration FILE")),
        (["--step-model", "{file}"], "--step-model", ("'{file}'",)),
        (
            ["--step-model", "roofline", "--calibration", "{file}"],
            "--step-model",
            ("--calibration",),
        ),
        (["--calibration", "{missing}"], "calibration file", ("'{missing}'",)),
    ],
)
def test_plan_checks_step_model_and_calibration_exactly_as_bench(
    args: list[str], setting: str, named: tuple[str, ...], tmp_path: Path
) -> None:
    """The trial's typo (`rooflin`) was read as a calibration file that could not be opened,
    and every candidate was listed as "does not fit" with exit 0."""
    names = {"file": tmp_path / "cal.json", "missing": tmp_path / "absent.json"}
    names["file"].write_text("{}")
    filled = [arg.format(**names) for arg in args]
    plan = _run(
        ["plan", "llama-3.1-8b", "--rate", "2", "--gpus", "l4,h100-80gb", "--tp", "1", *filled]
    )
    bench = _run(["bench", "--num-requests", "5", "--out", tmp_path / "r.jsonl", *filled])
    line = _error_line(plan)
    assert line == _error_line(bench)
    assert line.startswith(f"error: {setting} ")
    assert all(part.format(**names) in line for part in named), line


# --- a bad setting is an error, "does not fit" is memory only ----------------------------------


def test_a_setting_no_engine_starts_with_is_an_error_not_a_verdict() -> None:
    """Qwen2.5-7B has 28 attention heads: TP 8 is refused as vLLM refuses it, in one line,
    where it used to be listed as a candidate that "does not fit"."""
    result = _run(["plan", "qwen2.5-7b-instruct", *QUICK, "--gpu", "l4", "--tp", "8"])
    line = _error_line(result)
    assert line.startswith("error: --tp 8 ") and "28 attention heads" in line
    assert line.endswith("try 1, 2, 4")
    demand = Demand(
        model="qwen2.5-7b-instruct",
        rate=1.0,
        slo=parse_slo("ttft_p90=2s"),
        num_requests=10,
        workload=WorkloadSpec(kind="random", input_len=100, output_len=10),
        step_model="roofline",
    )
    with pytest.raises(SettingError, match="must divide the 28 attention heads"):
        probe(demand, Candidate("l4", 8))


def test_an_optimization_that_needs_a_kv_budget_is_an_error_not_a_verdict() -> None:
    """plan sizes no KV budget, so an eviction policy could never be built: every candidate
    was listed as "does not fit" (the budget's refusal read as memory)."""
    result = _run(["plan", "llama-3.1-8b", *QUICK, "--gpu", "l4", "--optimization", "paged+h2o"])
    line = _error_line(result)
    assert line.startswith("error: --optimization paged+h2o ") and "--kv-budget" in line


def test_an_unknown_executor_is_refused_by_its_flag() -> None:
    line = _error_line(_run(["plan", "llama-3.1-8b", *QUICK, "--gpu", "l4", "--executor", "dask"]))
    assert line.startswith("error: --executor ") and "'dask'" in line and "local, ray" in line


def test_the_default_tp_sizes_are_those_the_model_takes() -> None:
    """Without --tp, a 28-head model is planned at TP 1, 2 and 4 (8 does not divide its heads)."""
    result = _run(
        ["plan", "qwen2.5-7b-instruct", *QUICK, "--gpu", "h100-80gb", "--json"]
        + ["--workload", "random", "--input-len", "100", "--output-len", "20"]
    )
    assert result.exit_code == 0, result.output
    assert [row["tp"] for row in json.loads(result.stdout)["candidates"]] == [1, 2, 4]


def test_weights_that_leave_no_room_are_still_a_does_not_fit_verdict() -> None:
    demand = Demand(
        model="llama-3.1-70b",
        rate=1.0,
        slo=parse_slo("ttft_p90=2s"),
        num_requests=10,
        workload=WorkloadSpec(kind="random", input_len=100, output_len=10),
        step_model="roofline",
    )
    result = probe(demand, Candidate("l4", 1))
    assert result.status == "memory" and result.reason.startswith("no room for a KV cache")
