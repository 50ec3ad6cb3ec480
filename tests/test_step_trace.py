"""`kvplan bench --step-trace FILE`: one JSON line per engine step with the scheduler's
decisions (docs/metrics.md, "Step trace"), checked against a schedule worked out by hand
under vLLM V1's rules, and written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

from hardening_helpers import assert_clean_failure, invoke

# Two requests through a pool of 4 blocks of 4 tokens (vLLM's null block leaves 3) and a
# budget of 8 tokens a step: A (id 0) 6 prompt tokens, 3 out; B (id 1) 4 prompt tokens, 2 out.
HAND_TRACE = [
    # A's whole prompt (2 blocks) fits and is scheduled; B's whole prompt (1 block) fits the
    # last free block, and its first chunk takes the budget's other 2 tokens
    {"scheduled": [[0, 6, "new"], [1, 2, "new"]], "preempted": [], "finished": [],
     "blocks_in_use": 3, "running": 2, "waiting": 0},
    # A decodes (its 7th token fits its 2 blocks), B finishes its prompt and samples
    {"scheduled": [[0, 1, "running"], [1, 2, "running"]], "preempted": [], "finished": [],
     "blocks_in_use": 3, "running": 2, "waiting": 0},
    # A's 8th token fits; B's 5th needs a block none is free for: B, the last running, is
    # preempted (the victim is itself, so the running loop stops), and no one is admitted
    # in a step that preempted; A finishes and frees its blocks
    {"scheduled": [[0, 1, "running"]], "preempted": [1], "finished": [0],
     "blocks_in_use": 0, "running": 0, "waiting": 1},
    # B comes back with its prompt and its one generated token: 5 tokens in 2 blocks
    {"scheduled": [[1, 5, "resumed"]], "preempted": [], "finished": [1],
     "blocks_in_use": 0, "running": 0, "waiting": 0},
]  # fmt: skip


def _bench(tmp_path: Path, *extra: object) -> list[object]:
    trace = tmp_path / "requests.jsonl"
    trace.write_text(
        json.dumps({"arrival_s": 0, "prompt_len": 6, "output_len": 3})
        + "\n"
        + json.dumps({"arrival_s": 0, "prompt_len": 4, "output_len": 2})
        + "\n"
    )
    return ["bench", "--trace", trace, "--block-size", 4, "--num-gpu-blocks-override", 4,
            "--max-num-batched-tokens", 8, "--max-num-seqs", 8, "--max-model-len", 12,
            "--engine-version", "0.32.0", *extra]  # fmt: skip


def test_each_step_is_written_as_worked_out_by_hand(tmp_path: Path) -> None:
    out, steps = tmp_path / "r.jsonl", tmp_path / "steps.jsonl"
    args = _bench(tmp_path, "--optimizations", "paged", "--step-trace", steps, "--out", out)
    result = invoke(args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    keys = HAND_TRACE[0].keys()
    assert [{key: line[key] for key in keys} for line in lines] == HAND_TRACE
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    assert all(line["optimization"] == "paged" and line["pod"] == 0 for line in lines)
    assert all(line["prefix"] == [] and line["cached_blocks_evicted"] == 0 for line in lines)
    times = [line["t_s"] for line in lines]
    assert times == sorted(times) and times[0] > 0


def test_prefix_lookups_and_every_optimization_are_traced(tmp_path: Path) -> None:
    steps = tmp_path / "steps.jsonl"
    args = _bench(tmp_path, "--optimizations", "paged,prefix", "--step-trace", steps)
    result = invoke([*args, "--out", tmp_path / "r.jsonl"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    assert {line["optimization"] for line in lines} == {"paged", "prefix"}
    prefix = [line for line in lines if line["optimization"] == "prefix"]
    # each admission looks up its known tokens: 6 and 4 tokens fresh, then B's 5 again
    assert [entry for line in prefix for entry in line["prefix"]] == [
        [0, 6, 0],
        [1, 4, 0],
        [1, 5, 4],
    ]


def test_a_failing_run_leaves_the_step_trace_as_it_was(tmp_path: Path) -> None:
    steps = tmp_path / "steps.jsonl"
    steps.write_text("previous\n")
    # 2 blocks, one of them vLLM's null block: neither request fits, so the run serves
    # nothing and fails after it ran (its trace was being written)
    args = _bench(tmp_path, "--optimizations", "paged", "--step-trace", steps)
    args[args.index("--num-gpu-blocks-override") + 1] = 2
    result = invoke([*args, "--out", tmp_path / "r.jsonl"])
    assert_clean_failure(result, "rejected")
    assert steps.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl", "steps.jsonl"]


def test_the_step_trace_and_the_results_cannot_be_one_file(tmp_path: Path) -> None:
    same = tmp_path / "r.jsonl"
    args = _bench(tmp_path, "--optimizations", "paged", "--step-trace", same, "--out", same)
    assert_clean_failure(invoke(args), "--step-trace", "--out")
    assert not same.exists()
