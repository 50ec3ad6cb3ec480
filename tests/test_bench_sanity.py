"""`kvplan bench` against settings it would not read, repeated names, huge generator
settings and a table that cannot be drawn: each refused with one line (exit 2, no file
changed) or, where harmless, warned about; the rate said in the workload's own unit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hardening_helpers import fails_cleanly, invoke

from kvplan.bench.config import BenchConfig, ClusterConfig
from kvplan.bench.optimizations import parse_optimizations
from kvplan.bench.setting_use import ignored_settings
from kvplan.bench.workloads import WorkloadSpec, parse_workload_params
from kvplan.spec.setting_error import SettingError
from kvplan.sweep.grid import load_spec
from kvplan.workload import make_workload
from kvplan.workload.kinds import rate_unit
from kvplan.workload.prompt_draws import DRAWN_TOKENS_MAX, TokenDrawer

QUICK = ["bench", "--num-requests", "12", "--rate", "50"]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    """A results file from an earlier run that a failing command must leave as it is."""
    (tmp_path / "keep.jsonl").write_text('{"an": "earlier run"}\n')
    return tmp_path


# --- a table that cannot be drawn, and the run that used to crash it -------------------------


def test_two_pods_of_one_optimization_show_no_hit_rate_per_pod(kept: Path) -> None:
    out = kept / "pods.jsonl"
    result = invoke([*QUICK, "--pods", "2", "--optimizations", "paged", "--out", out])
    assert result.exit_code == 0, result.output
    # paged caches no prefix: each pod's hit rate is unknown, one dash per pod and router
    row = next(line for line in result.stdout.splitlines() if "hit rate per pod" in line)
    assert row.split() == ["hit", "rate", "per", "pod", *["-"] * 10]


def test_a_table_that_fails_leaves_an_existing_out_unchanged(
    kept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise ValueError("the table could not be drawn")

    monkeypatch.setattr("kvplan.cli.bench.render_comparison", broken)
    fails_cleanly(
        [*QUICK, "--optimizations", "paged", "--out", kept / "keep.jsonl"],
        kept,
        "the table could not be drawn",
    )


# --- repeated optimizations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "first", "second"),
    [
        ("paged,paged", "paged", "paged"),
        ("paged+fp8,fp8+paged", "paged+fp8", "fp8+paged"),  # the parts in another order
        ("prefix,fp8,fp8-e4m3", "fp8", "fp8-e4m3"),  # one KV format spelled twice
        ("h2o,paged,h2o+full", "h2o", "h2o+full"),
    ],
)
def test_one_optimization_named_twice_is_refused(names: str, first: str, second: str) -> None:
    with pytest.raises(SettingError) as refused:
        parse_optimizations(names)
    # the error's kind, setting and values, not its sentence
    assert refused.value.setting == "optimizations"
    assert refused.value.values == {"first": first, "second": second}


def test_distinct_optimizations_keep_their_order() -> None:
    assert [o.name for o in parse_optimizations("paged,prefix,paged+fp8,h2o")] == [
        "paged",
        "prefix",
        "paged+fp8",
        "h2o",
    ]


def test_the_command_names_the_repeated_flag(kept: Path) -> None:
    line = fails_cleanly(
        [*QUICK, "--optimizations", "paged,paged", "--out", kept / "keep.jsonl"], kept
    )
    assert line.startswith("error: --optimizations names 'paged' and 'paged'")


# --- settings the run would not read ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "setting", "named"),
    [
        (["--kv-budget", "256", "--optimizations", "paged,prefix"], "--kv-budget", ("256",)),
        (["--input-len", "512"], "--input-len", ("--workload random",)),
        (["--workload", "sharegpt", "--output-len", "64"], "--output-len", ("sharegpt",)),
        (["--burstiness", "2"], "--burstiness", ("system-prompt",)),
        (
            ["--workload-param", "doc_len=2048"],
            "--workload-param",
            ("'doc_len'", "system-prompt", "system_prompt_len, num_system_prompts, vocab_size"),
        ),
        (["--workload", "random", "--workload-param", "zipf_s=1"], "--workload-param", ("zipf_s",)),
    ],
)
def test_a_setting_the_run_ignores_is_refused(
    kept: Path, args: list[str], setting: str, named: tuple[str, ...]
) -> None:
    # bad input (exit 2), naming the setting first and what the run would not read
    refused = fails_cleanly([*QUICK, *args, "--out", kept / "keep.jsonl"], kept, *named)
    assert refused.startswith(f"error: {setting} "), refused


def test_an_unknown_tier_policy_is_refused_by_its_flag(kept: Path) -> None:
    args = ["--tier-policy", "mru", "--optimizations", "offload-cpu"]
    refused = fails_cleanly(
        [*QUICK, *args, "--out", kept / "keep.jsonl"], kept, "'mru'", "lru, arc"
    )
    assert refused.startswith("error: --tier-policy "), refused


def test_a_budget_beside_an_eviction_policy_runs(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = invoke([*QUICK, "--kv-budget", "256", "--optimizations", "paged,h2o", "--out", out])
    assert result.exit_code == 0, result.output


def test_routers_for_one_pod_are_warned_about_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = invoke([*QUICK, "--router", "kv-aware", "--optimizations", "paged", "--out", out])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        "warning: --router kv-aware not used: one pod needs no router; routers spread "
        "requests over --pods N > 1"
    )


def test_the_warning_comes_from_the_config_layer() -> None:
    one_pod = BenchConfig(cluster=ClusterConfig(pods=1, routers=("sticky",)))
    (warning,) = ignored_settings(one_pod, parse_optimizations("paged"))
    assert warning.settings == ("routers", "pods")
    two_pods = BenchConfig(cluster=ClusterConfig(pods=2, routers=("sticky",)))
    assert ignored_settings(two_pods, parse_optimizations("paged")) == []


def test_random_reads_its_lengths_and_burstiness() -> None:
    spec = WorkloadSpec(kind="random", input_len=100, output_len=10, burstiness=2.0)
    assert (spec.input_len, spec.output_len, spec.burstiness) == (100, 10, 2.0)
    assert WorkloadSpec(kind="sharegpt", rate=float("inf"), burstiness=0.5).burstiness == 0.5


def test_a_trace_takes_no_generator_settings() -> None:
    with pytest.raises(SettingError, match=r"^params set kvplan's workload generators; a trace "):
        WorkloadSpec(trace="t.jsonl", params={"doc_len": 10})


def _sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_a_sweep_budget_needs_a_policy_among_its_optimizations(tmp_path: Path) -> None:
    refused = _sweep(
        tmp_path, '[fixed]\nkv_budget = 256\n[axes]\noptimization = ["paged", "prefix"]\n'
    )
    with pytest.raises(ValueError) as err:
        load_spec(refused)
    assert str(err.value).startswith(
        f"sweep file '{refused}': kv_budget 256 is kept only by an eviction policy"
    )
    assert str(err.value).endswith("add one to optimization (e.g. h2o) or drop kv_budget")
    # a baseline without a policy beside one with it is a comparison, as on the command line
    compared = _sweep(tmp_path, '[axes]\nkv_budget = [128, 256]\noptimization = ["paged", "h2o"]\n')
    assert len(load_spec(compared).points()) == 4


def test_a_sweep_point_that_sets_an_unread_length_is_recorded_as_failed() -> None:
    from kvplan.sweep.point import run_point

    record = run_point({"workload": "sharegpt", "input_len": 512, "point_id": "p"})
    assert record.kind == "error"
    assert record.metrics["error"].startswith("input_len sets the lengths of workload random")


# --- generator settings that size an allocation ----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "param", "most"),
    [
        ("rag", "num_documents", "1,048,576"),
        ("system-prompt", "num_system_prompts", "1,048,576"),
        ("few-shot", "num_templates", "1,048,576"),
        ("chat", "vocab_size", "2,097,152"),
        ("rag", "docs_per_request", "1,024"),
    ],
)
def test_a_huge_count_is_refused_with_its_maximum(
    kept: Path, kind: str, param: str, most: str
) -> None:
    line = fails_cleanly(
        [*QUICK, "--workload", kind, "--workload-param", f"{param}=1e8"],
        kept,
        f"<= {most}",
        "got 100,000,000",
    )
    assert line.startswith(f"error: --workload-param {param} "), line


def test_a_whole_number_written_as_a_float_is_a_count() -> None:
    spec = WorkloadSpec(kind="rag", params={"num_documents": 1e3, "zipf_s": 1.5})
    assert spec.params == {"num_documents": 1000, "zipf_s": 1.5}
    assert type(spec.params["num_documents"]) is int


def test_a_generator_setting_named_twice_or_at_length_is_refused_in_one_short_line() -> None:
    with pytest.raises(SettingError) as twice:
        parse_workload_params(["doc_len=1", "doc_len=2"])
    assert (twice.value.setting, twice.value.values) == ("params", {"name": "'doc_len'"})
    with pytest.raises(SettingError) as long:
        WorkloadSpec(kind="rag", params=parse_workload_params(["x" * 200_000 + "=1"]))
    assert str(long.value) == (
        f"params '{'x' * 59}…' is not a setting of the rag workload, which would ignore it; its "
        "settings: num_documents, doc_len, docs_per_request, zipf_s, vocab_size"
    )


def test_the_library_entry_point_keeps_the_same_bounds() -> None:
    with pytest.raises(ValueError) as err:
        make_workload("rag", 10, rate=1.0, num_documents=10**8)
    assert str(err.value) == (
        "num_documents must be a whole number >= 1 and <= 1,048,576, got 100,000,000"
    )


def test_a_corpus_too_large_for_memory_is_refused_before_it_is_drawn() -> None:
    # 1,000,000 documents of 4,000 tokens: 4e9 token ids, ~30x what fits in memory
    with pytest.raises(ValueError) as err:
        make_workload(
            "rag", 10, rate=1.0, max_model_len=8192, num_documents=1_000_000, doc_len=4000
        )
    assert str(err.value) == (
        "num_documents 1,000,000 x doc_len 4,000 = 4,000,000,000 tokens, more than the "
        "134,217,728 one workload holds in memory; lower num_documents or doc_len"
    )


def test_every_draw_of_token_ids_is_bounded_before_allocation() -> None:
    drawer = TokenDrawer(np.random.default_rng(0), 100)
    with pytest.raises(ValueError, match=r"would hold 134,217,729 token ids, more than"):
        drawer.draw([DRAWN_TOKENS_MAX, 1])


# --- what the rate counts --------------------------------------------------------------------


def test_the_rate_is_said_in_the_unit_the_workload_reads_it(tmp_path: Path) -> None:
    assert (rate_unit("chat"), rate_unit("rag"), rate_unit("random")) == (
        "sessions",
        "requests",
        "requests",
    )
    result = invoke(
        [
            "bench",
            "--workload",
            "chat",
            "--rate",
            "2",
            "--num-requests",
            "12",
            "--optimizations",
            "prefix",
            "--out",
            tmp_path / "r.jsonl",
        ]
    )
    assert result.exit_code == 0, result.output
    assert "12 requests (chat at 2 sessions/s)" in result.stdout
    help_text = " ".join(invoke(["bench", "--help"]).stdout.split())
    assert "requests (chat: sessions)" in help_text


def test_the_catalog_names_settings_each_generator_takes() -> None:
    import inspect

    from kvplan.workload.catalog import CATALOG, GENERATORS

    assert list(GENERATORS) == list(CATALOG)
    for name, kind in CATALOG.items():
        takes = inspect.signature(GENERATORS[name]).parameters
        assert set(kind.params) <= set(takes), name
