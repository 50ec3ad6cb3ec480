"""The report's eviction-policy section: simulated bench runs and real quality runs joined
per policy at the same share of the full cache, a table and a chart only when it has data."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from kvplan.results import make_record, write_jsonl  # noqa: E402

TEXT_TOKENS = 171


def simulated_runs(tmp_path: Path, shares: tuple[float, ...]) -> list[Path]:
    from kvplan.bench import BenchConfig, SizingConfig, run_matrix
    from kvplan.workload import make_workload

    workload = make_workload(
        "long-reasoning", 12, rate=None, arrival="burst", seed=0, max_model_len=8192
    )
    mean_len = sum(r.prompt_len + r.output_len for r in workload) / len(workload)
    paths = []
    for share in shares:
        config = BenchConfig(
            SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=8192),
            kv_budget=int(share * mean_len),
        )
        records = run_matrix(config, workload, ["paged", "h2o", "sliding-window"])
        assert records[1].metrics["mean_sequence_tokens"] == pytest.approx(mean_len)
        paths.append(write_jsonl(tmp_path / f"sim-{share}.jsonl", records))
    return paths


def quality_run(tmp_path: Path, share: float) -> Path:
    """Quality records as `kvplan bench --quality-text` writes them (the figures are inputs)."""
    budget = int(share * TEXT_TOKENS)
    params = {"model": "stories260K", "text_tokens": TEXT_TOKENS, "kv_budget": budget}
    rows = [
        ("fp32", "full", 3.661, 0.0),
        ("h2o", "h2o", 3.757 if share < 0.5 else 3.645, 0.039),
        ("sliding-window", "sliding-window", 3.984 if share < 0.5 else 3.585, 0.129),
    ]
    records = [
        make_record(
            "quality",
            f"q{share}",
            "real",
            name,
            params,
            {
                "policy": policy,
                "kv_format": None,
                "kv_budget": budget if policy != "full" else None,
                "text_tokens": TEXT_TOKENS,
                "perplexity": ppl,
                "kl_mean": kl,
                "greedy_agreement": 0.95,
                "kv_bytes_per_seq": 1280 * (budget if policy != "full" else TEXT_TOKENS),
            },
            baseline=i == 0,
        )
        for i, (name, policy, ppl, kl) in enumerate(rows)
    ]
    return write_jsonl(tmp_path / f"quality-{share}.jsonl", records)


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_policies_join_per_share_with_a_chart(tmp_path: Path) -> None:
    from kvplan.report import write_report
    from kvplan.report.data import load
    from kvplan.report.policies import policy_tradeoff

    paths = simulated_runs(tmp_path, (0.25, 0.5)) + [
        quality_run(tmp_path, 0.25),
        quality_run(tmp_path, 0.5),
    ]
    frame = policy_tradeoff(load(paths))
    assert sorted(zip(frame["policy"], frame["budget share"])) == [
        ("h2o", 0.25),
        ("h2o", 0.5),
        ("sliding-window", 0.25),
        ("sliding-window", 0.5),
    ]
    h2o = frame[(frame["policy"] == "h2o") & (frame["budget share"] == 0.25)].iloc[0]
    assert h2o["perplexity"] == 3.757 and h2o["budget (quality)"] == 42 and h2o["mean running"] > 0
    assert h2o["KV GiB held"] > 0
    written = write_report(paths, tmp_path / "report")
    assert "policy_tradeoff" in written.charts
    page = written.index.read_text()
    assert "Eviction policies by budget" in page and "25%" in page and "3.757" in page


def test_one_budget_gives_the_table_but_no_chart(tmp_path: Path) -> None:
    from kvplan.report import write_report

    written = write_report(simulated_runs(tmp_path, (0.5,)), tmp_path / "report")
    assert "policy_tradeoff" not in written.charts  # a line needs two budgets
    page = written.index.read_text()
    assert "Eviction policies by budget" in page and "<th>mean running</th>" in page
    assert "<th>perplexity</th>" not in page  # no quality run: its columns are not shown empty
