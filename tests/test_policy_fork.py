"""Parallel samples under an eviction policy: a sample forked from a compacted H2O parent
shares only the parent's full kept blocks, copies its partial one, and inherits the
parent's evicted tokens, so the pool split stays a split (no negative share)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvplan.bench.optimizations import parse_optimizations
from kvplan.bench.setting_use import check_samples_read
from kvplan.cli.app import app
from kvplan.core.engine import Engine
from kvplan.core.kv import make_allocator
from kvplan.core.metrics import pool_split
from kvplan.core.policies import PolicySpec
from kvplan.core.scheduler import SchedulerConfig
from kvplan.sim.runner import SimulatedRunner
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline
from kvplan.workload.request import Request


def h2o_engine(n: int) -> Engine:
    """Blocks of 4 slots, a 6-token H2O budget, one 9-token prompt sampled n times."""
    roofline = Roofline(
        load_model("llama-3.1-8b"), load_gpu("h100-80gb"), 1, parse_kv_format("bf16")
    )
    allocator = make_allocator(
        "paged", 16 * 4, 4, 64, watermark=0.0, policy=PolicySpec("h2o", 6, block=4)
    )
    engine = Engine(allocator, SimulatedRunner(roofline), SchedulerConfig(), 64)
    engine.submit(Request(0, 0.0, 9, 5, n=n))
    return engine


def test_a_forked_sample_inherits_the_parents_kept_blocks_and_evictions() -> None:
    engine = h2o_engine(n=2)
    engine.step()  # the 9-token prompt, pruned to 6 kept tokens (2 blocks), then the fork
    parent, child = engine.scheduler.running
    # the child shares the one full kept block and copies the half-full second one
    assert parent.block_table[0] == child.block_table[0]
    assert parent.block_table[1] != child.block_table[1]
    assert engine.allocator.fork_stats.cow_copies == 1
    # 9 written per sample, 3 evicted each: 6 + 6 token states, 4 of them in the shared block
    # -> 8 held once, in 3 blocks (12 slots): 4 slots of internal fragmentation
    used, reservation, internal, external, cached, free = pool_split(
        engine.allocator, engine.scheduler
    )
    assert (used, reservation, internal, external, cached) == (8, 0, 4, 0, 0)
    assert engine.allocator.evicted_slots == 6
    engine.step()  # one decode token each: 10 written, 4 evicted per sample, still 6 kept
    assert pool_split(engine.allocator, engine.scheduler)[:3] == (8, 0, 4)
    assert engine.allocator.evicted_slots == 8


def test_every_step_of_a_sampled_h2o_run_splits_the_pool_without_a_negative_share() -> None:
    engine = h2o_engine(n=3)
    splits = []
    while engine.busy:
        engine.step()
        splits.append(pool_split(engine.allocator, engine.scheduler))
    assert all(min(split) >= 0 and sum(split) == 64 for split in splits), splits
    assert engine.allocator.evicted_slots == 0  # every sample released what it dropped
    assert engine.allocator.pool.num_free == 16


def test_parallel_samples_under_holes_left_in_place_are_refused_before_the_run(
    tmp_path: Path,
) -> None:
    """h2o-holes cannot model samples whose holes differ inside shared blocks: bench refuses
    the pair in one line, naming the flag and h2o as the way out, and writes nothing."""
    out = tmp_path / "r.jsonl"
    args = ["bench", "--optimizations", "paged,paged+h2o-holes", "--kv-budget", "64"]
    result = CliRunner().invoke(
        app, [*args, "--samples", "2", "--num-requests", "5", "--out", str(out)]
    )
    assert result.exit_code == 2 and not out.exists()
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: --samples 2 cannot run with 'h2o-holes'") and "use h2o" in line
    assert check_samples_read(1, parse_optimizations(["paged+h2o-holes"])) is None
    assert check_samples_read(4, parse_optimizations(["paged+h2o"])) is None
