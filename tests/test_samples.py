"""The samples shipped inside kvplan (kvplan/samples): `kvplan samples` lists them and prints
their paths, every file is in the package data a wheel ships, each holds what SOURCES.md
says (figures counted here with the standard library, not through kvplan's readers), and
explain, calibrate, bench and real mode accept them as they are. The checks against the
originals in ../shared/data skip without it."""

from __future__ import annotations

import csv
import glob
import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.samples import SAMPLES, sample_files, sample_path, samples_dir

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

# Written out by hand from SOURCES.md, so a renamed sample or changed licence shows here.
LICENCES = {
    "stories260k": "MIT",
    "stories260k-tokenizer": "MIT",
    "tinystories-text": "CDLA-Sharing-1.0",
    "mooncake-trace": "Apache-2.0",
    "sharegpt-stats": "Apache-2.0",
    "vllm-startup-log": "none stated",
    "vllm-bench-result": "Apache-2.0",
}
NAMES = ", ".join(LICENCES)


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def test_samples_lists_each_name_size_licence_and_whole_path() -> None:
    result = runner.invoke(app, ["samples"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "Samples shipped with kvplan; their sources and licences:",
        f"  {samples_dir() / 'SOURCES.md'}",  # whole, on its own line
    ]
    # sizes in bytes: 1,045,902 / 1024 = 1,021.39 KiB; 6,227 = 6.08 KiB; 46,307 = 45.22 KiB ...
    sizes = ["1,021.39 KiB", "6.08 KiB", "349 B", "45.22 KiB", "15.17 KiB", "1.11 KiB", "503 B"]
    for sample, size in zip(SAMPLES, sizes, strict=True):
        assert f"{sample.name}  {size}, licence: {LICENCES[sample.name]}" in lines
        assert f"  {samples_dir() / sample.path}" in lines  # one line, never folded


def test_samples_json_gives_exact_sizes_and_paths() -> None:
    result = runner.invoke(app, ["samples", "--json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["name"] for r in records] == list(LICENCES)
    for record in records:
        path = Path(record["path"])
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        assert record["bytes"] == sum(p.stat().st_size for p in files) > 0
        assert record["licence"] == LICENCES[record["name"]]
    by_name = {r["name"]: r for r in records}
    assert by_name["stories260k"]["bytes"] == 715 + 195 + 1_044_992  # config, generation, weights
    assert by_name["stories260k-tokenizer"]["bytes"] == 6_227


@pytest.mark.parametrize("name", list(LICENCES))
def test_samples_path_prints_only_the_absolute_path(name: str) -> None:
    result = runner.invoke(app, ["samples", "path", name])
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.removesuffix("\n"))
    assert result.stdout == f"{path}\n" and path.is_absolute() and path.exists()
    assert path == sample_path(name)


def test_samples_path_of_an_unknown_name_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["samples", "path", "stories15m"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: no sample named 'stories15m'") and NAMES in line
    assert result.stdout == ""


def test_every_shipped_file_is_in_the_wheels_package_data() -> None:
    """setuptools ships what the package-data globs match (glob relative to the package), so
    a file they miss would be in the clone and absent from the wheel."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["kvplan.samples"]
    folder = ROOT / "kvplan" / "samples"
    shipped = {Path(p) for pattern in globs for p in glob.glob(pattern, root_dir=folder)}
    data_files = {
        p.relative_to(folder)
        for p in folder.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc")
    }
    assert data_files == shipped
    listed = {f.relative_to(folder) for sample in SAMPLES for f in sample_files(sample)}
    assert listed <= shipped and len(listed) == 9
    sources = (folder / "SOURCES.md").read_text()
    for sample in SAMPLES:  # each sample's name, file and licence are named beside it
        assert f"`{sample.name}`" in sources and sample.path in sources
        assert sample.licence.split()[0] in sources
    assert (folder / "LICENSES" / "MIT-llama2.c.txt").is_file()
    apache = (folder / "LICENSES" / "Apache-2.0.txt").read_text()
    assert "Version 2.0, January 2004" in apache and "END OF TERMS AND CONDITIONS" in apache


def test_trace_excerpt_holds_what_sources_says() -> None:
    from kvplan.workload import load_trace

    lines = [json.loads(line) for line in sample_path("mooncake-trace").read_text().splitlines()]
    assert len(lines) == 200
    load = load_trace(sample_path("mooncake-trace"))
    assert (load.fmt, load.skipped, len(load.requests)) == ("mooncake", 0, 200)
    assert sum(r.prompt_len for r in load.requests) == sum(x["input_length"] for x in lines)
    assert sum(x["input_length"] for x in lines) == 2_663_480  # mean 13,317.4
    assert sum(r.output_len for r in load.requests) == 38_364  # mean 191.82
    assert load.requests[-1].arrival_s == pytest.approx(58.501)
    blocks = [h for x in lines for h in x["hash_ids"]]
    assert (len(blocks), len(set(blocks))) == (5_330, 5_007)


def test_sharegpt_stats_excerpt_holds_what_sources_says() -> None:
    from kvplan.workload.lengths import load_length_stats

    with sample_path("sharegpt-stats").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 500
    assert sum(int(r["num_prefill_tokens"]) for r in rows) == 1_183_196  # mean 2,366.392
    assert sum(int(r["num_decode_tokens"]) for r in rows) == 235_568  # mean 471.136
    prompts, outputs = load_length_stats(sample_path("sharegpt-stats"))
    assert (len(prompts), int(prompts.sum()), int(outputs.sum())) == (500, 1_183_196, 235_568)


def test_explain_reads_the_shipped_log_as_the_server_printed_it() -> None:
    result = runner.invoke(app, ["explain", str(sample_path("vllm-startup-log")), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # the figures the log prints (dataset record rec015's `reported`)
    assert (report["engine"], report["engine_generation"], report["version"]) == (
        "vllm",
        "v1",
        "0.10.1.1",
    )
    assert (report["kv"]["tokens"], report["kv"]["blocks"]) == (93_872, 5_867)
    assert (report["memory_gib"]["weights"], report["memory_gib"]["kv"]) == (14.2488, 5.01)
    assert report["inputs"]["max_model_len"] == 16_384
    # Qwen2-7B: 28 layers x 4 KV heads x 128 x 2 (K and V) x 2 bytes
    assert report["kv"]["kvplan_bytes_per_token"] == 28 * 4 * 128 * 2 * 2
    assert report["kv"]["agrees"] is True


def test_calibrate_accepts_the_shipped_result_as_is(tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    args = ["calibrate", str(sample_path("vllm-bench-result")), "--model", "qwen3-14b"]
    args += ["--gpu", "h100", "--engine-version", "0.11.0", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    measured = {row["metric"]: row["measured"] for row in json.loads(out.read_text())["fit_errors"]}
    assert measured == {"output_throughput": 505.51, "mean_tpot_ms": 206.51}


def test_sharegpt_stats_workload_reads_the_shipped_excerpt(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = ["bench", "--workload", "sharegpt-stats", "--stats-path"]
    args += [str(sample_path("sharegpt-stats")), "--num-requests", "50", "--optimizations"]
    result = runner.invoke(app, [*args, "paged", "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text().splitlines()[0])
    assert record["metrics"]["requests_finished"] + record["metrics"]["requests_rejected"] == 50


def test_readme_examples_read_no_shared_folder() -> None:
    """A fresh clone has no ../shared: the README's and the docs' commands take the shipped
    samples."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = [
        block for page in pages for block in page.read_text().split("```")[1::2]
    ]  # the fenced code blocks
    assert not [line for block in blocks for line in block.splitlines() if "../shared" in line]


# --- the samples against the originals they were copied from ---------------------------


def test_samples_are_verbatim_copies_of_the_shared_data(shared_data: Path) -> None:
    stories = shared_data / "models" / "stories260K"
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        assert (sample_path("stories260k") / name).read_bytes() == (
            stories / "hf" / name
        ).read_bytes()
    assert (
        sample_path("stories260k-tokenizer").read_bytes() == (stories / "tok512.bin").read_bytes()
    )
    assert (
        sample_path("tinystories-text").read_bytes()
        == (stories / "tinystories_validation_0.txt").read_bytes()
    )
    traces = shared_data / "traces"
    trace = (traces / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines(True)
    assert sample_path("mooncake-trace").read_text() == "".join(trace[:200])
    stats = (traces / "sarathi_sharegpt_8k_filtered_stats_llama2_tokenizer.csv").read_text()
    assert sample_path("sharegpt-stats").read_text() == "".join(stats.splitlines(True)[:501])


def test_serving_samples_copy_their_dataset_records(shared_data: Path) -> None:
    serving = shared_data / "serving"
    logs = [json.loads(line) for line in (serving / "vllm_startup_logs.jsonl").open()]
    (log,) = [record for record in logs if record["id"] == "rec015"]
    assert sample_path("vllm-startup-log").read_text() == log["quote"] + "\n"
    runs = [json.loads(line) for line in (serving / "serving_benchmarks.jsonl").open()]
    (run,) = [record for record in runs if record["record_id"] == "R033"]
    saved = json.loads(sample_path("vllm-bench-result").read_text())
    # vLLM's --save-result keys -> the dataset's names for the same printed figures
    renamed = {"model_id": "model", "completed": "successful_requests", "duration": "duration_s"}
    assert saved == {key: run[renamed.get(key, key)] for key in saved}
    assert len(saved) == 18 and run["source_url"].startswith("https://github.com/gpustack/")


def test_the_readme_counts_the_catalog_it_ships() -> None:
    """The README's and the docs' profile counts are the catalog's, not a figure from an
    older release."""
    import re

    from kvplan.spec.profiles import model_profiles

    readme = "\n".join(
        page.read_text() for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    )
    shipped = len(model_profiles())
    said = [int(n) for n in re.findall(r"(\d+) ship as profiles", readme)]
    said += [int(n) for n in re.findall(r"holds (\d+) Hugging Face", readme)]
    assert said and all(count == shipped for count in said), (said, shipped)


def test_the_readme_and_contributing_links_point_at_files() -> None:
    """The README and CONTRIBUTING.md are read on GitHub, outside the docs site's link check:
    every relative link names a file the repository holds."""
    import re

    for page in (ROOT / "README.md", ROOT / "CONTRIBUTING.md"):
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)
