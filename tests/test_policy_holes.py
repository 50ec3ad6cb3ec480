"""H2O's holes in a paged pool, both layouts measured: compacted (each
hole refilled by one slot copy, charged as time) and left in place (no copy; the block
frees only once it empties, which the simulator bounds by never; the holes are internal
fragmentation). Small cases computed by hand."""

from __future__ import annotations

from engine_helpers import budget_engine

from kvplan.core.metrics import pool_split
from kvplan.core.policies import PolicySpec, held_blocks


def run_steps(policy: str, steps: int):
    engine = budget_engine(
        policy, budget=8, prompt=6, output=12
    )  # blocks of 4 slots, 1 s per copied slot
    clock = []
    for _ in range(steps):
        engine.step()
        clock.append(engine.now)
    return engine, clock


def test_compacted_and_holes_by_hand() -> None:
    # 8 steps: the 6-token prompt, then 7 decode steps -> 13 tokens written, 5 evicted
    # (tokens 9..13 each push one out of the 8-token budget).
    compact, compact_clock = run_steps("h2o", 8)
    holes, holes_clock = run_steps("h2o-holes", 8)
    c_seq, h_seq = compact.scheduler.running[0], holes.scheduler.running[0]
    assert c_seq.num_computed == h_seq.num_computed == 13
    # compacted: 8 slots -> 2 blocks; one copy per evicted token, 1 s each on the clock
    assert len(c_seq.block_table) == 2 and compact.allocator.budget.copied_total == 5
    # holes in place: every written block stays (13 tokens -> 4 blocks), nothing copied
    assert len(h_seq.block_table) == 4 and holes.allocator.budget.copied_total == 0
    assert compact.allocator.evicted_slots == holes.allocator.evicted_slots == 5
    # the copies are the whole time difference (the attention reads the same 8 tokens): a
    # step's copies are charged to the next step, so 4 x 1 s so far, the 5th still pending
    assert compact.allocator.budget.copied_slots == 1
    assert round(compact_clock[-1] - holes_clock[-1], 9) == 4.0
    # pool split at this step: 8 live token states in both; holes: 16 reserved slots hold
    # 5 holes + 3 unwritten tail slots = 8 of internal fragmentation; compacted: none
    c_used, _, c_internal, *_ = pool_split(compact.allocator, compact.scheduler)
    h_used, _, h_internal, *_ = pool_split(holes.allocator, holes.scheduler)
    assert (c_used, c_internal) == (8, 0) and (h_used, h_internal) == (8, 8)


def test_holes_memory_model() -> None:
    spec = PolicySpec("h2o-holes", 32, block=16)
    assert [held_blocks(spec, 20, n, 16) for n in (1, 16, 17, 32, 33, 100)] == [1, 1, 2, 2, 3, 7]
    assert held_blocks(PolicySpec("h2o", 32, block=16), 20, 100, 16) == 2


def test_holes_reachable_from_the_cli(tmp_path) -> None:
    from typer.testing import CliRunner

    from kvplan.cli.app import app

    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--workload",
            "long-reasoning",
            "--num-requests",
            "20",
            "--max-model-len",
            "8192",
            "--kv-budget",
            "1024",
            "--optimizations",
            "paged,h2o,h2o-holes",
            "--out",
            str(tmp_path / "r.jsonl"),
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "h2o-holes" in result.output and "slots copied" in result.output
