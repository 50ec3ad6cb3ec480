"""What a first-time user types and reads: --rate on a trace, explain without --gpu, results
file names from typed GPU names, the unknown-model sentence, and comma lists with holes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hardening_helpers import assert_clean_failure, digests
from typer.testing import CliRunner, Result

from kvplan.cli.app import app
from kvplan.results import read_jsonl
from kvplan.samples import sample_path

ENV = {"COLUMNS": "120", "HF_HUB_OFFLINE": "1"}
runner = CliRunner(env=ENV)
TRACE = sample_path("mooncake-trace")  # Mooncake's first 200 requests, about 3.4 req/s
LOG = sample_path("vllm-startup-log")  # a vLLM 0.10 log that names no GPU
QUICK = ["--num-requests", "40", "--optimizations", "paged", "--gpu", "h100-80gb"]


def invoke(args: list[str]) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def fails_cleanly(args: list[str], folder: Path, *culprits: str) -> str:
    """One `error:` line naming the culprits, exit 2, and no file in folder changed or added."""
    before = digests(folder)
    line = assert_clean_failure(invoke(args), *culprits)
    assert digests(folder) == before
    return line


def _trace(tmp_path: Path, arrivals: list[float]) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"arrival_s": t, "prompt_len": 200, "output_len": 20}) + "\n"
            for t in arrivals
        )
    )
    return trace


# --- --rate with a trace ---------------------------------------------------------------------


def test_rate_rescales_a_trace_to_that_offered_rate(tmp_path: Path) -> None:
    """The trace's arrivals are rescaled to --rate's mean rate, so the run offers exactly it
    (and a caption's "a --rate below X" means what it says for a trace)."""
    out = tmp_path / "r.jsonl"
    result = invoke(["bench", "--trace", TRACE, *QUICK, "--rate", "0.5", "--out", out])
    assert result.exit_code == 0, result.output
    (record,) = read_jsonl(out)
    assert record.metrics["offered_requests_per_s"] == pytest.approx(0.5, rel=1e-9)
    workload = record.params["workload"]
    assert workload["rate"] == 0.5 and workload["time_scale"] > 1  # slowed from ~3.4 req/s
    assert "trace at 0.5 requests/s" in result.output


def test_a_trace_without_rate_keeps_its_own_times(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    assert invoke(["bench", "--trace", TRACE, *QUICK, "--out", out]).exit_code == 0
    (record,) = read_jsonl(out)
    assert (
        record.params["workload"]["time_scale"] == 1.0 and "rate" not in record.params["workload"]
    )
    assert record.metrics["offered_requests_per_s"] > 2  # the trace's own pace


def test_rate_inf_sends_a_trace_all_at_once(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = invoke(["bench", "--trace", TRACE, *QUICK, "--rate", "inf", "--out", out])
    assert result.exit_code == 0, result.output
    (record,) = read_jsonl(out)
    assert record.metrics["offered_requests_per_s"] is None  # no spread of arrivals: no rate


def test_rate_and_time_scale_on_a_trace_are_refused(tmp_path: Path) -> None:
    args = ["bench", "--trace", TRACE, *QUICK, "--rate", "1", "--time-scale", "1"]
    fails_cleanly([*args, "--out", tmp_path / "r.jsonl"], tmp_path, "--rate", "--time-scale")


def test_time_scale_without_a_trace_is_refused(tmp_path: Path) -> None:
    args = ["bench", *QUICK, "--time-scale", "0.5", "--out", tmp_path / "r.jsonl"]
    fails_cleanly(args, tmp_path, "--time-scale", "--rate")


def test_rate_on_a_trace_that_arrives_at_once_is_refused(tmp_path: Path) -> None:
    trace = _trace(tmp_path, [0.0, 0.0, 0.0])
    args = ["bench", "--trace", trace, *QUICK, "--rate", "2", "--out", tmp_path / "r.jsonl"]
    fails_cleanly(args, tmp_path, "--rate", str(trace))


def test_arrival_and_cv_on_a_trace_are_refused(tmp_path: Path) -> None:
    """A trace keeps its own arrival times: a synthetic arrival process would be ignored."""
    args = ["bench", "--trace", TRACE, *QUICK, "--out", tmp_path / "r.jsonl"]
    fails_cleanly([*args, "--arrival", "gamma"], tmp_path, "--arrival", "--trace", "--rate")
    fails_cleanly([*args, "--cv", "2"], tmp_path, "--cv", "--arrival gamma")


def test_cv_without_gamma_arrivals_is_refused_and_with_them_is_read(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    fails_cleanly(["bench", *QUICK, "--cv", "2", "--out", out], tmp_path, "--cv", "poisson")
    result = invoke(["bench", *QUICK, "--arrival", "gamma", "--cv", "2", "--out", out])
    assert result.exit_code == 0, result.output
    (record,) = read_jsonl(out)
    assert record.params["workload"]["arrival"] == "gamma"
    assert record.params["workload"]["cv"] == 2.0


def test_a_sweep_point_replays_its_trace_at_the_rate_swept(tmp_path: Path) -> None:
    from kvplan.sweep.grid import load_spec, run_sweep

    trace = _trace(tmp_path, [0.5 * i for i in range(12)])  # 2 req/s of its own
    study = tmp_path / "s.toml"
    study.write_text(
        f'[fixed]\ntrace = "{trace}"\nmodel = "llama-3.1-8b"\ngpu = "h100-80gb"\n'
        'optimization = "paged"\n[axes]\nrate = [1, 4]\n'
    )
    points = run_sweep(load_spec(study), tmp_path / "sweep", workers=1)
    offered = sorted(p.metrics["offered_requests_per_s"] for p in points)
    assert offered == pytest.approx([1.0, 4.0])


def test_plan_and_bench_rescale_a_trace_by_one_factor(tmp_path: Path) -> None:
    """`kvplan plan`'s trials (trials.sent_at) and bench's --rate rescale by the same factor."""
    from kvplan.bench.workloads import WorkloadSpec, build_workload
    from kvplan.deploy.trials import sent_at, trace_rate
    from kvplan.spec.resolve import load_model

    trace = _trace(tmp_path, [0.0, 0.3, 1.1, 2.0, 3.0])
    model = load_model("llama-3.1-8b")
    planned = sent_at(
        WorkloadSpec(trace=str(trace)), 8.0, 5, trace_rate(WorkloadSpec(trace=str(trace)))
    )
    benched = build_workload(WorkloadSpec(trace=str(trace), rate=8.0), model, "simulated", 0)
    assert [r.arrival_s for r in build_workload(planned, model, "simulated", 0).requests] == [
        r.arrival_s for r in benched.requests
    ]
    assert benched.info["time_scale"] == planned.time_scale


# --- explain without --gpu -------------------------------------------------------------------


def test_explain_without_gpu_says_what_it_left_out() -> None:
    result = invoke(["explain", LOG])
    assert result.exit_code == 0, result.output
    shown, _, said = result.output.partition("not computed: ")
    said = " ".join(said.split("KV bytes per token")[0].split())  # as wrapped to the width
    assert "pass --gpu NAME" in said and "the --gpu-memory-utilization 0.95 what-if" in said
    assert "kvplan's model" not in shown  # no column of dashes above it


def test_explain_json_names_what_it_left_out() -> None:
    record = json.loads(invoke(["explain", LOG, "--json"]).stdout)
    assert record["prediction"] is None and "--gpu NAME" in record["not_computed"]
    given = json.loads(invoke(["explain", LOG, "--json", "--gpu", "a100-80gb"]).stdout)
    assert given["not_computed"] is None and given["prediction"] is not None
    assert any(w["change"] == "--gpu-memory-utilization 0.95" for w in given["what_ifs"])


def test_explain_uses_a_gpu_the_log_names(tmp_path: Path) -> None:
    log = tmp_path / "named.log"
    log.write_text(LOG.read_text() + "INFO GPU 0: NVIDIA A100-SXM4-80GB\n")
    record = json.loads(invoke(["explain", log, "--json"]).stdout)
    assert record["inputs"]["gpu_profile"] == "a100-80gb" and record["not_computed"] is None
    log.write_text(LOG.read_text() + "INFO GPU 0: NVIDIA Quantum Widget 9000\n")
    record = json.loads(invoke(["explain", log, "--json"]).stdout)
    assert "'NVIDIA Quantum Widget 9000'" in record["not_computed"]
    assert "--gpu NAME" in record["not_computed"]


def test_explain_names_the_what_if_it_drops_for_want_of_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvplan.logs.explain import explain

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = re.sub(r"Qwe\s*n2-7B-Instruct", "Unheard-Of-7B", LOG.read_text())
    said = explain(text, gpu="a100-80gb")["not_computed"]
    assert "the --tensor-parallel-size 2 what-if" in said and "'Unheard-Of-7B'" in said
    assert said.endswith("; pass --model NAME") and "--gpu" not in said


# --- results file names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("NVIDIA L40S", "nvidia-l40s"),
        ("meta-llama/Llama-3.1-8B", "meta-llama-llama-3.1-8b"),
        ("../../etc", "etc"),
        ("a  --  b", "a-b"),
        ("  ", "unnamed"),
        ("qwen3-14b", "qwen3-14b"),
    ],
)
def test_a_name_becomes_a_file_name_slug(name: str, slug: str) -> None:
    from kvplan.results.latest import name_slug

    assert name_slug(name) == slug
    assert re.fullmatch(r"[a-z0-9._-]+", name_slug(name))


def test_a_typed_gpu_name_becomes_its_profile_in_the_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["bench", "--num-requests", "10", "--optimizations", "paged", "--gpu", "NVIDIA L40S"]
    assert invoke(args).exit_code == 0
    (written,) = (tmp_path / "reports").glob("*.jsonl")
    assert written.name.startswith("bench-llama-3.1-8b-l40s-"), written.name


def test_a_model_folder_with_spaces_is_slugged_in_the_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvplan.spec.profiles import model_profiles

    folder = tmp_path / "My Model (v2)"
    folder.mkdir()
    shutil.copy(model_profiles()["llama-3.1-8b"].path, folder / "config.json")
    monkeypatch.chdir(tmp_path)
    args = ["bench", "--num-requests", "10", "--optimizations", "paged", "--model", folder]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    (written,) = (tmp_path / "reports").glob("*.jsonl")
    assert written.name.startswith("bench-my-model-v2-l4-"), written.name


# --- the unknown-model sentence --------------------------------------------------------------


def test_an_unknown_model_reads_as_a_sentence() -> None:
    line = assert_clean_failure(invoke(["estimate", "llama-3.1-7b"]))
    assert line.startswith("error: unknown model 'llama-3.1-7b' (did you mean ")
    assert (
        "?): it is not a shipped profile name, HF id or alias; not in the Hugging Face cache at "
        in line
    )
    assert "; and no catalog profile shares its name" in line
    assert "tried" not in line and "kvplan profiles models" in line


# --- comma lists with holes ------------------------------------------------------------------


@pytest.mark.parametrize("routers", [",", "", "a,,b", "round-robin,,kv-aware", "sticky,"])
def test_an_empty_router_list_or_name_is_refused(routers: str, tmp_path: Path) -> None:
    args = ["bench", *QUICK, "--pods", "2", "--router", routers, "--out", tmp_path / "r.jsonl"]
    line = fails_cleanly(args, tmp_path, "--router", "round-robin", "kv-aware")
    assert repr(routers) in line


def test_an_unknown_or_repeated_router_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    for routers, culprit in (("teleport", "'teleport'"), ("sticky,sticky", "twice")):
        args = ["bench", *QUICK, "--pods", "2", "--router", routers, "--out", out]
        fails_cleanly(args, tmp_path, "--router", culprit)


@pytest.mark.parametrize("names", [",", "paged,,prefix", "paged,", " "])
def test_an_empty_optimization_name_is_refused(names: str, tmp_path: Path) -> None:
    args = ["bench", "--num-requests", "10", "--optimizations", names, "--out", tmp_path / "r"]
    fails_cleanly(args, tmp_path, "--optimizations", "paged,prefix")


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--tp", "1,,2"),
        ("--kv-dtype", ","),
        ("--kv-dtype", "auto,,fp8"),
        ("--gpu", "h100-80gb,"),
        ("--gpu", ""),
        ("--max-num-seqs", ""),
        ("--slo", "ttft_p90=2s,"),
    ],
)
def test_plan_refuses_an_empty_list_entry(flag: str, value: str, tmp_path: Path) -> None:
    args = ["plan", "llama-3.1-8b", "--rate", "1", "--gpu", "h100-80gb", flag, value]
    fails_cleanly([*args, "--out", tmp_path / "plan"], tmp_path, flag, repr(value))


@pytest.mark.parametrize("axis", ["kv-dtype=fp16,,fp8", "gpu=,", "tp=1,,2", "batch=8,"])
def test_an_estimate_sweep_refuses_an_empty_value(axis: str, tmp_path: Path) -> None:
    fails_cleanly(["estimate", "llama-3.1-8b", "--sweep", axis], tmp_path, "--sweep", repr(axis))


def test_the_comma_list_parser() -> None:
    from kvplan.spec.comma_list import comma_list
    from kvplan.spec.setting_error import SettingError

    assert comma_list(" a , b,c ", "routers", "names") == ["a", "b", "c"]
    for text in ("", " , ", "a,,b", ",a", "a,"):
        with pytest.raises(SettingError) as refused:
            comma_list(text, "routers", "names")
        assert refused.value.setting == "routers" and "give names" in str(refused.value)
