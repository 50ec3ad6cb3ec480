"""Ctrl-C during a bench keeps the optimizations that finished, and says so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvplan.bench import BenchConfig
from kvplan.bench.run import run_bench
from kvplan.bench.workloads import WorkloadSpec
from kvplan.results import read_jsonl


def _interrupting(at: str):
    @contextmanager
    def track(names: list[str], total: int) -> Iterator[Callable[[str, int], None]]:
        def progress(name: str, n: int) -> None:
            if name == at:
                raise KeyboardInterrupt

        yield progress

    return track


def test_ctrl_c_writes_the_finished_optimizations(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with pytest.raises(KeyboardInterrupt) as caught:
        run_bench(
            BenchConfig(),
            WorkloadSpec(num_requests=20),
            ["contiguous-max", "paged", "prefix"],
            out,
            _interrupting("prefix"),
        )
    assert [r.optimization for r in read_jsonl(out)] == ["contiguous-max", "paged"]
    assert "kept the 2 optimization(s)" in caught.value.kept and str(out) in caught.value.kept
    assert (tmp_path / "latest").read_text().strip() == "r.jsonl"


def test_ctrl_c_never_changes_an_existing_results_file(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text("old\n")
    with pytest.raises(KeyboardInterrupt) as caught:
        run_bench(
            BenchConfig(),
            WorkloadSpec(num_requests=20),
            ["paged", "prefix"],
            out,
            _interrupting("prefix"),
        )
    assert out.read_text() == "old\n"
    partial = list(tmp_path.glob("r-partial-*.jsonl"))
    assert len(partial) == 1 and str(partial[0]) in caught.value.kept
    assert [r.optimization for r in read_jsonl(partial[0])] == ["paged"]


def test_ctrl_c_before_anything_finished_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with pytest.raises(KeyboardInterrupt) as caught:
        run_bench(
            BenchConfig(), WorkloadSpec(num_requests=20), ["paged"], out, _interrupting("paged")
        )
    assert not out.exists() and "nothing was written" in caught.value.kept


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_real_mode_says_what_it_will_cost_before_it_starts(
    stories260k: Path, tmp_path: Path
) -> None:
    from kvplan.core.engine_factory import RealConfig

    said: list[str] = []
    model = str(stories260k / "hf")
    config = BenchConfig(mode="real", real=RealConfig(device="cpu", model_path=model))
    seen: dict[str, int] = {}

    @contextmanager
    def track(names: list[str], total: int) -> Iterator[Callable[[str, int], None]]:
        seen["total"] = total
        yield lambda name, n: seen.__setitem__("done", seen.get("done", 0) + n)

    outcome = run_bench(
        config,
        WorkloadSpec(kind="alpaca", num_requests=3),
        ["paged"],
        tmp_path / "r.jsonl",
        track,
        announce=said.append,
    )
    assert len(said) == 1 and "3 requests x 1 optimization(s)" in said[0] and "5 layers" in said[0]
    assert "-step warm-up" in said[0] and "per decoding sequence" in said[0]
    tokens = sum(
        r.prompt_len + r.output_len - 1
        for r in __import__("kvplan.bench.run", fromlist=["prepare"])
        .prepare(config, WorkloadSpec(kind="alpaca", num_requests=3))[1]
        .requests
    )
    assert (
        seen["total"] == tokens and seen["done"] >= tokens
    )  # the bar counts tokens (recomputes add more)
    assert outcome.records[0].metrics["requests_finished"] == 3


def test_the_cli_keeps_the_new_results_file_the_interrupt_names(tmp_path: Path) -> None:
    """The command layer removes outputs a failed command created, but not the file an
    interrupted bench just wrote with the optimizations that finished."""
    import typer

    from kvplan.cli.common import cli_errors

    out = tmp_path / "new.jsonl"

    @cli_errors("out")
    def command(out: str) -> None:
        Path(out).write_text("finished\n")
        interrupt = KeyboardInterrupt()
        interrupt.kept = f"kept the 1 optimization(s) that finished (paged) in {out}"  # type: ignore[attr-defined]
        raise interrupt

    with pytest.raises(typer.Exit) as exited:
        command(out=str(out))
    assert exited.value.exit_code == 130 and out.read_text() == "finished\n"

    @cli_errors("out")
    def failing(out: str) -> None:
        Path(out).write_text("half\n")
        raise ValueError("bad")

    with pytest.raises(typer.Exit):
        failing(out=str(out.with_name("other.jsonl")))
    assert not out.with_name("other.jsonl").exists()
