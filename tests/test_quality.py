"""Eviction policies' quality on stories260K, and their budgets in the engine (selection by hand:
test_policy_selection.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import budget_engine

from kvplan.core.policies import (
    PolicySpec,
    held_blocks,
    keep_h2o,
)


@pytest.fixture(scope="module")
def stories(stories260k: Path):
    pytest.importorskip("transformers")
    from kvplan.quality.evaluate import run_policy
    from kvplan.quality.tokenizer import Llama2cTokenizer
    from kvplan.real.model import load_causal_lm

    root = stories260k
    tokens = Llama2cTokenizer(root / "tok512.bin").encode(
        (root / "tinystories_validation_0.txt").read_text().strip()
    )
    model, _ = load_causal_lm("stories260K", str(root / "hf"), None, "fp32", "cpu")
    reference, _ = run_policy(model, tokens, PolicySpec("full"))
    return model, tokens, reference


def test_quality_names_go_through_the_one_optimization_parser() -> None:
    from kvplan.bench import parse_optimization
    from kvplan.quality.run import quality_setup

    policy, fmt = quality_setup(parse_optimization("H2O+int4"), 64)
    assert (policy.name, policy.budget, fmt) == ("h2o", 64, "int4")
    policy, fmt = quality_setup(parse_optimization("full"), 64)
    assert (policy.name, policy.budget, fmt) == ("full", None, None)
    assert quality_setup(parse_optimization("paged+int8-tensor"), None)[1] == "int8-tensor"
    for name in ("prefix", "contiguous-max", "offload-cpu"):
        with pytest.raises(ValueError, match="KV formats and eviction policies"):
            quality_setup(parse_optimization(name), 64)


def test_baseline_nll_reproduces_the_published_figure(stories) -> None:
    from kvplan.quality.evaluate import evaluate

    model, tokens, reference = stories
    assert len(tokens) == 171
    result = evaluate(model, tokens, PolicySpec("full"), reference=reference)
    assert result.nll == pytest.approx(1.2977, abs=5e-5) and round(result.perplexity, 2) == 3.66
    assert result.kl_mean == pytest.approx(0.0, abs=1e-9)


def test_int8_within_one_percent_and_int4_as_published(stories) -> None:
    from kvplan.quality.evaluate import evaluate

    model, tokens, reference = stories
    int8 = evaluate(model, tokens, PolicySpec("full"), "int8", reference=reference)
    int4 = evaluate(model, tokens, PolicySpec("full"), "int4", reference=reference)
    assert int8.perplexity == pytest.approx(3.661, rel=0.01)  # shared README: 3.666 at 8 bits
    assert int4.perplexity == pytest.approx(8.59, rel=0.01)  # and 8.59 at 4 bits
    assert int8.kv_bytes_per_seq == 171 * 5 * 2 * 4 * (
        8 + 4
    )  # int8 values + one fp32 scale per token-head


def test_window_policies_reproduce_the_reference_figures(stories) -> None:
    """Strict budget B attends to what the references' caches of B - 1 do (they attend to
    their budget plus the step's token), so B = 33 must give the figures measured with
    independent implementations at 32: kvplan's earlier sliding window 4.028, StreamingLLM
    with positions re-indexed in the cache 4.119, original positions 3.879."""
    from kvplan.quality.evaluate import evaluate

    model, tokens, _ = stories
    figures = {
        name: evaluate(model, tokens, PolicySpec(name, 33))
        for name in ("sliding-window", "streaming", "streaming-abspos")
    }
    assert round(figures["sliding-window"].perplexity, 3) == 4.028
    assert round(figures["streaming"].perplexity, 3) == 4.119
    assert round(figures["streaming-abspos"].perplexity, 3) == 3.879
    assert figures["streaming"].kv_bytes_per_seq == 33 * 5 * 2 * 4 * 8 * 4


def test_h2o_per_kv_head_reproduces_the_reference_figure(stories, monkeypatch) -> None:
    """Per-KV-head H2O with 16 heavy + 16 recent tokens attending 33 (the reference's
    budget-32 cache plus the new token) gives 3.892 (the paper-faithful run)."""
    from kvplan.core.policies.h2o import H2O
    from kvplan.quality.evaluate import evaluate

    model, tokens, _ = stories
    monkeypatch.setattr(
        H2O,
        "keep",
        lambda self, spec, scores, positions, budget: keep_h2o(scores, budget, budget // 2 + 1),
    )
    result = evaluate(model, tokens, PolicySpec("h2o", 33))
    assert round(result.perplexity, 3) == 3.892


def test_policy_memory_equals_the_estimator(stories, stories260k: Path) -> None:
    from kvplan.quality.evaluate import evaluate
    from kvplan.sizing.capacity import PlanInputs, plan
    from kvplan.spec import parse_kv_format
    from kvplan.spec.resolve import load_gpu, load_model

    model, tokens, _ = stories
    spec = load_model(str(stories260k / "hf"))
    for fmt, name in ((None, "fp32"), ("int8", "int8"), ("int4", "int4")):
        measured = evaluate(model, tokens, PolicySpec("h2o", 40), fmt).kv_bytes_per_seq
        estimated = plan(
            PlanInputs(
                spec,
                load_gpu("l4"),
                kv_format=parse_kv_format(name),
                context=len(tokens),
                block_size=1,
                kv_budget=40,
            ),
            suggest=False,
        ).seq_bytes
        assert measured == estimated


def test_sliding_window_frees_blocks_as_it_slides() -> None:
    engine = budget_engine("sliding-window", budget=8, output=14)  # blocks of 4 slots
    tables = []
    for _ in range(10):  # prefill (3 tokens), then a token per step: 3, 4, ..., 12 written
        engine.step()
        tables.append(list(engine.scheduler.running[0].block_table))
    # 8 tokens at positions 1..8 span blocks 0-2; at 4..11 block 0 is gone.
    assert tables[5] == [0, 1] and tables[6] == [0, 1, 2] and tables[9] == [1, 2]
    seq = engine.scheduler.running[0]
    assert seq.dropped_blocks == 1 and engine.allocator.evicted_slots == 12 - 8
    result = engine.run([])
    assert result.metrics["requests_finished"] == 1 and engine.allocator.pool.num_free == 16
    assert engine.allocator.evicted_slots == 0


def test_streaming_keeps_the_sink_block() -> None:
    engine = budget_engine("streaming", budget=12, prompt=18, output=5)
    engine.step()  # the 18-token prompt (one chunk) attends whole, then keeps 4 sinks + 8 newest
    seq = engine.scheduler.running[0]
    # positions 0-3 (block 0) and 10-17 (blocks 2-4): block 1 is released
    assert len(seq.block_table) == 4 and seq.block_table[0] == 0 and seq.dropped_blocks == 1


def test_h2o_holds_its_budget_compacted_and_pays_the_copies() -> None:
    engine = budget_engine("h2o", budget=8, prompt=6, output=12)
    for _ in range(8):  # 6 + 7 tokens written: 5 evicted, each hole refilled by one copy
        engine.step()
    seq = engine.scheduler.running[0]
    assert len(seq.block_table) == 2 and engine.allocator.evicted_slots == 13 - 8
    assert engine.allocator.budget.copied_total == 5


def test_snapkv_compresses_the_prompt_once_then_grows() -> None:
    engine = budget_engine("snapkv", budget=12, blocks=16, prompt=30, output=10)
    engine.step()  # the prompt: read whole (8 blocks), then compressed to 12 tokens (3 blocks)
    seq = engine.scheduler.running[0]
    assert len(seq.block_table) == 3
    for _ in range(5):
        engine.step()
    assert len(seq.block_table) == -(-(12 + 5) // 4)  # every generated token is kept


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_budget_concurrency_matches_the_estimator() -> None:
    from kvplan.bench import BenchConfig, SizingConfig, run_matrix
    from kvplan.sizing.capacity import PlanInputs, plan
    from kvplan.spec import parse_kv_format
    from kvplan.spec.resolve import load_gpu, load_model
    from kvplan.workload import make_workload

    requests = make_workload(
        "long-reasoning", 200, rate=None, arrival="burst", seed=0, max_model_len=8192
    )
    config = BenchConfig(
        SizingConfig(model="llama-3.1-8b", gpu="l4", max_model_len=8192), kv_budget=1024
    )
    paged, streaming = (r.metrics for r in run_matrix(config, requests, ["paged", "streaming"]))
    estimate = plan(
        PlanInputs(
            load_model("llama-3.1-8b"),
            load_gpu("l4"),
            kv_format=parse_kv_format("bf16"),
            context=8192,
            kv_budget=1024,
        ),
        suggest=False,
    )
    # The estimator: 39.2 sequences of 1,024 tokens fit; the engine averages 35.4 (the run's
    # final drain included) and never holds more than the estimate once sequences are full.
    assert 0.85 * estimate.max_concurrency <= streaming["running_mean"] <= estimate.max_concurrency
    assert streaming["running_mean"] > 2 * paged["running_mean"]
    assert streaming["output_tokens_per_s"] > 2 * paged["output_tokens_per_s"]


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_bench_quality_table_and_pareto_report(stories260k: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from kvplan.cli.app import app
    from kvplan.report import write_report
    from kvplan.results import read_jsonl

    root = stories260k
    out = tmp_path / "quality.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--mode",
            "real",
            "--device",
            "cpu",
            "--model-path",
            str(root / "hf"),
            "--tokenizer",
            str(root / "tok512.bin"),
            "--quality-text",
            str(root / "tinystories_validation_0.txt"),
            "--optimizations",
            "fp32,int8,streaming",
            "--kv-budget",
            "32",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "3.661" in result.output and "3.666" in result.output and "4.149" in result.output
    records = read_jsonl(out)
    assert [r.kind for r in records] == ["quality"] * 3 and records[0].baseline
    assert records[2].metrics["kv_bytes_per_seq"] == 32 * 5 * 2 * 4 * 8 * 4
    written = write_report([out], tmp_path / "report")
    assert written.charts == ["memory_vs_quality"]
    assert "Memory and quality" in written.index.read_text()


def test_kivi_bytes_and_quality(stories) -> None:
    from kvplan.quality.evaluate import evaluate
    from kvplan.spec import parse_kv_format

    fmt = parse_kv_format("kivi-int4")
    # K and V of one token-head at head_dim 128: 64 B each, a key's share of its channels'
    # (scale, min) pairs (128 * 8 B / 32 tokens) and the value's four (scale, min) pairs.
    assert 2 * fmt.bytes_per_vector(128) == 2 * 64 + 128 * 8 / 32 + 4 * 8
    model, tokens, reference = stories
    kivi4 = evaluate(model, tokens, PolicySpec("full"), "kivi-int4", reference=reference)
    kivi2 = evaluate(model, tokens, PolicySpec("full"), "kivi-int2", reference=reference)
    # Keys per channel, zero points and a full-precision residual: 2 bits keep 4 levels;
    # The asymmetric reference run gives 4.36 (a symmetric quantizer: 12.29).
    assert round(kivi2.perplexity, 2) == 4.36
    assert kivi4.perplexity < 1.01 * 3.661
    # Bytes measured from the packed tensors equal the estimator's, residual included:
    # 171 tokens -> 160 keys quantized, 11 waiting; 139 values quantized, 32 in fp32.
    for result, name in ((kivi4, "kivi-int4"), (kivi2, "kivi-int2")):
        assert result.kv_bytes_per_seq == 5 * 4 * parse_kv_format(name).kivi_sequence_bytes(
            171, 8, 4
        )
    assert kivi2.kv_bytes_per_seq == 5 * 4 * (160 * (2 + 2) + 139 * (2 + 8) + (11 + 32) * 8 * 4)


def test_per_tensor_scales_are_calibrated_on_another_text(stories) -> None:
    from kvplan.quality.evaluate import calibrate, evaluate

    model, tokens, reference = stories
    other = tokens[:1] + [t for t in reversed(tokens[1:])]  # not the scored sequence
    with pytest.raises(ValueError, match="calibration text"):
        evaluate(model, tokens, PolicySpec("full"), "int8-tensor")
    _, scales = calibrate(model, other, PolicySpec("full"), "int8-tensor")
    assert len(scales) == 5 and all(
        0 < k < 1 and 0 < v < 1 for k, v in scales
    )  # absmax / 127, not 1.0
    tensor = evaluate(
        model, tokens, PolicySpec("full"), "int8-tensor", reference=reference, calibration=other
    )
    assert tensor.perplexity < 1.02 * 3.661  # scale 1.0 rounded K/V to integers: 7.10
    budgets, _ = calibrate(model, other, PolicySpec("entropy-budget", 32), None)
    assert sum(budgets) == 5 * 32 and len(set(budgets)) > 1


@pytest.mark.parametrize(
    "policy", ["sliding-window", "streaming", "h2o", "h2o-holes", "snapkv", "paged-eviction"]
)
def test_engine_blocks_follow_the_memory_model(policy: str) -> None:
    """After every step the simulated engine holds the blocks kvplan.core.policies says."""
    engine = budget_engine(policy, budget=12, blocks=32, prompt=30, output=40)
    seq = engine.scheduler.running[0] if engine.scheduler.running else None
    while engine.busy:
        engine.step()
        running = engine.scheduler.running
        if not running:
            break
        seq = running[0]
        spec = PolicySpec(policy, 12, block=4)
        assert len(seq.block_table) == held_blocks(spec, 30, seq.num_computed, 4), seq.num_computed
