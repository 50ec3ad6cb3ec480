"""Eviction inside the real engine's paged pool (real/eviction.py) against the simulator's
memory model and the quality evaluator, on stories260K: the closed loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvplan.bench import BenchConfig, SizingConfig, parse_optimization
from kvplan.core.policies import PolicySpec
from kvplan.workload.request import Request

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

REQUESTS = [
    Request(0, 0.0, 20, 40),
    Request(1, 0.0, 50, 30),
    Request(2, 0.0, 9, 45),
    Request(3, 0.0, 70, 12),
]
BUDGET = 32
SLOW = pytest.mark.slow  # ~15 s each on 2 shared cores: the other cases cover the same paths


def config(stories260k: Path, mode: str) -> BenchConfig:
    from kvplan.core.engine_factory import RealConfig

    hf = str(stories260k / "hf")
    sizing = SizingConfig(
        model=hf, gpu="l4", kv_dtype="fp32", block_size=16, kv_cache_gib=0.001, max_model_len=256
    )
    return BenchConfig(
        sizing, real=RealConfig(device="cpu", model_path=hf), mode=mode, kv_budget=BUDGET
    )


def simulated_slots(
    stories260k: Path, name: str, layer_budgets: tuple[int, ...] | None = None
) -> dict[int, list[tuple[int, int]]]:
    """(tokens written, slots held per head) after each step of each request, from the
    simulator's memory model (entropy-budget: given the real engine's probed split)."""
    from dataclasses import replace

    from kvplan.bench.simulation import engine_factory

    factory = replace(engine_factory(config(stories260k, "simulated")), layer_budgets=layer_budgets)
    engine, _ = factory.build(parse_optimization(name))
    budget = engine.allocator.budget
    history: dict[int, list[tuple[int, int]]] = {}
    trim = budget.trim

    def recording_trim(seq, pool) -> None:
        trim(seq, pool)
        history.setdefault(seq.request_id, []).append((seq.num_computed, budget.held[id(seq)][1]))

    budget.trim = recording_trim
    engine.run(list(REQUESTS))
    return history


@pytest.fixture(scope="module")
def real_factory(stories260k: Path):
    from kvplan.bench.simulation import engine_factory

    torch.set_num_threads(1)  # tiny per-step tensors on a shared CPU
    return engine_factory(config(stories260k, "real"))


def test_entropy_budget_split_is_probed_on_the_models_own_text(real_factory) -> None:
    """Real serving splits layers x --kv-budget by attention entropy measured on the model's
    greedy text from BOS (the quality evaluator's calibrate), never on the requests."""
    from kvplan.quality.evaluate import calibrate
    from kvplan.real.factory import ENTROPY_PROBE_TOKENS

    split = real_factory.entropy_split()
    text = real_factory.greedy_text(ENTROPY_PROBE_TOKENS)
    assert len(text) == ENTROPY_PROBE_TOKENS + 1 and text[0] == 1
    assert (
        list(split)
        == calibrate(real_factory.loaded.model, text, PolicySpec("entropy-budget", BUDGET), None)[0]
    )
    assert sum(split) == 5 * BUDGET and max(split) > BUDGET > min(split)


@pytest.mark.parametrize(
    "name", ["h2o", "snapkv", "paged-eviction", "sliding-window", "streaming", "entropy-budget"]
)
def test_closed_loop_real_pool_holds_what_the_simulator_charges(
    real_factory, stories260k: Path, name: str
) -> None:
    engine, _ = real_factory.build(parse_optimization(name))
    result = engine.run(list(REQUESTS))
    assert result.metrics["requests_finished"] == 4
    eviction = engine.runner.eviction
    measured = {key[0]: slots for key, slots in eviction.measured.items()}
    # Slots the pool's tensors really hold (h2o: each head's kept K/V after the moves),
    # step by step, equal the simulator's: exactly, these policies being deterministic in count.
    split = real_factory.entropy_split() if name == "entropy-budget" else None
    assert measured == simulated_slots(stories260k, name, split)
    if name == "entropy-budget":
        # each layer holds its own budget (the sequence's blocks the largest: measured above)
        for key, steps in eviction.layer_measured.items():
            assert all(layers == tuple(min(length, b) for b in split) for length, layers in steps)
        assert [slots[-1][1] for slots in measured.values()] == [max(split)] * 4
        assert measured[3][0] == (70, max(split))
        return
    # The 70-token prompt is read whole, then pruned to the budget (paged-eviction: 3 whole pages
    # go)
    assert measured[3][0] == (70, 70 - 3 * 16 if name == "paged-eviction" else BUDGET)
    if name == "snapkv":  # the prompt compressed once, then every generated token kept
        assert [slots[-1][1] for slots in measured.values()] == [59, 61, 53, 43]
    elif name == "paged-eviction":  # whole 16-token pages: the newest page partly filled
        assert [slots[-1][1] for slots in measured.values()] == [
            27,
            31,
            21,
            17,
        ]  # L - 16 * ceil((L - 32) / 16)
    else:
        assert all(slots[-1][1] == BUDGET for slots in measured.values())
    if name == "streaming":
        # usage is weighted by measured step time, and streaming reads prompt rows past the
        # budget one query at a time: its slow prefill steps hold whole prompts, so the
        # time-weighted mean does not show its smaller tables on these short requests
        return
    paged, _ = real_factory.build(parse_optimization("paged"))
    full = paged.run(list(REQUESTS))
    assert result.metrics["kv_cache_usage_mean"] < full.metrics["kv_cache_usage_mean"]


@pytest.mark.parametrize(
    ("name", "prompt"),
    [
        ("h2o", 20),
        ("snapkv", 50),
        ("paged-eviction", 20),
        ("streaming", 20),
        ("streaming", 50),
        pytest.param("streaming-abspos", 50, marks=SLOW),
        ("entropy-budget", 20),
    ],
)
def test_real_policy_decodes_what_the_quality_evaluator_predicts(
    real_factory, name: str, prompt: int
) -> None:
    """The serving engine (paged kernels, per-head holes refilled in the pool) and the
    quality evaluator (a contiguous per-head cache) implement the same policy: teacher-forced
    on the engine's own greedy tokens, the evaluator predicts every one of them."""
    from kvplan.quality.evaluate import run_policy

    engine, _ = real_factory.build(parse_optimization(f"paged+{name}"))
    engine.run([Request(0, 0.0, prompt, 60)])
    tokens = engine.runner.tokens[(0, 0)]
    eviction = engine.runner.eviction
    # paged-eviction may keep the sink-like first page and drop the one before the newest,
    # which moves nothing; per-token policies refill holes; streaming copies its sinks
    if name.startswith("streaming"):
        assert eviction.sinks.copies == 4 * 5 * (
            prompt + 59 - BUDGET
        )  # each query at position >= the budget, 5 layers
    else:
        assert eviction.copied_slots > 0 or name == "paged-eviction"
    split = real_factory.entropy_split() if name == "entropy-budget" else None
    held = {
        "snapkv": BUDGET + 59,
        "paged-eviction": 79 - 48,
        "entropy-budget": max(split or [0]),
    }.get(name, BUDGET)
    assert eviction.measured[(0, 0)][-1] == (prompt + 59, held)
    if name == "h2o":
        # Holes left in place would keep more blocks than compaction does (every layer and
        # head must drop a block's tokens before it frees): measured on the same run.
        metrics = real_factory.run_metrics(engine)
        assert metrics["eviction_hole_blocks_ratio"] > 1.0
    logits, _ = run_policy(
        real_factory.loaded.model,
        tokens,
        PolicySpec(name, BUDGET),
        prompt_len=prompt,
        layer_budgets=list(split) if split else None,
    )
    assert logits[prompt - 1 : -1].argmax(-1).tolist() == tokens[prompt:]
    if name == "entropy-budget":  # the split matters: an even one predicts other tokens here
        even, _ = run_policy(
            real_factory.loaded.model, tokens, PolicySpec(name, BUDGET), prompt_len=prompt
        )
        assert even[prompt - 1 : -1].argmax(-1).tolist() != tokens[prompt:]


@pytest.mark.parametrize("name", ["h2o-holes"])
def test_real_mode_refuses_policies_it_cannot_evict(real_factory, name: str) -> None:
    with pytest.raises(
        ValueError, match=f"real mode cannot run '{name}': .*; measure it with quality_text"
    ):
        real_factory.build(parse_optimization(name))


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("paged", marks=SLOW),
        "paged+h2o",
        "paged+snapkv",
        "paged+streaming",
        pytest.param("paged+paged-eviction", marks=SLOW),
        "paged+entropy-budget",
    ],
)
def test_quality_through_the_serving_engine_equals_the_evaluator(
    real_factory, stories260k: Path, name: str
) -> None:
    """Teacher-forced through the scheduler, the paged pool, the policy and the kernels that
    serve, the text's perplexity is the quality evaluator's (float32 sums in another order)."""
    from kvplan.quality.evaluate import evaluate
    from kvplan.quality.tokenizer import Llama2cTokenizer
    from kvplan.real.teacher import served_prompt_len, served_quality

    root = stories260k
    tokens = Llama2cTokenizer(root / "tok512.bin").encode(
        (root / "tinystories_validation_0.txt").read_text().strip()
    )
    optimization = parse_optimization(name)
    spec = PolicySpec(optimization.policy or "full", BUDGET if optimization.policy else None)
    served = served_quality(real_factory, optimization, tokens)["served_perplexity"]
    from kvplan.quality.evaluate import run_policy

    split = real_factory.entropy_split() if optimization.policy == "entropy-budget" else None
    logits, _ = run_policy(
        real_factory.loaded.model,
        tokens,
        spec,
        layer_budgets=list(split) if split else None,
        prompt_len=served_prompt_len(optimization.policy, len(tokens)),
    )
    expected = torch.exp(
        torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(tokens[1:]))
    ).item()
    assert served == pytest.approx(expected, rel=1e-5)
    if name == "paged":
        assert expected == pytest.approx(
            evaluate(real_factory.loaded.model, tokens, spec).perplexity, rel=1e-6
        )


@pytest.mark.parametrize("fmt", ["int8", pytest.param("int4", marks=SLOW)])
def test_streaming_on_a_quantized_pool_rounds_its_sinks_once(real_factory, fmt: str) -> None:
    """A quantized pool stores a re-indexed sink rounded once, from the key as the model
    computed it (the quality evaluator rounds it so too). Rotating the stored, already rounded
    sink and storing it again (the earlier engine) served 2 of these 100 tokens differently
    at int8 (20 at int4)."""
    from kvplan.quality.evaluate import run_policy

    engine, _ = real_factory.build(parse_optimization(f"paged+streaming+{fmt}"))
    engine.run([Request(0, 0.0, 20, 100)])
    tokens = engine.runner.tokens[(0, 0)]
    assert engine.runner.eviction.sinks.copies == 4 * 5 * (20 + 99 - BUDGET)
    logits, _ = run_policy(
        real_factory.loaded.model, tokens, PolicySpec("streaming", BUDGET), fmt, prompt_len=20
    )
    assert logits[19:-1].argmax(-1).tolist() == tokens[20:]


def test_real_sliding_window_shares_cached_blocks_exactly(real_factory) -> None:
    """prefix+sliding-window in the real pool: the second request hits the run of 2 blocks
    (window 32, blocks of 16) before token 64, skips blocks 0-1 (vLLM's null blocks), and
    decodes what it decodes computing its whole prompt itself, logits included."""
    rng = np.random.default_rng(1)
    a = tuple(int(x) for x in rng.integers(3, 512, 80))
    b = a[:64] + tuple(int(x) for x in rng.integers(3, 512, 12))
    runs = {}
    for name in ("sliding-window", "prefix+sliding-window"):
        engine, _ = real_factory.build(parse_optimization(name))
        engine.runner.keep_logits = True
        result = engine.run(
            [Request(0, 0.0, 80, 20, prompt_tokens=a), Request(1, 5.0, 76, 20, prompt_tokens=b)]
        )
        runs[name] = engine.runner
        hits = {seq.request_id: seq.hit_tokens for seq in result.finished}
        assert hits == ({0: 0, 1: 64} if "prefix" in name else {0: 0, 1: 0})
    plain, shared = runs["sliding-window"], runs["prefix+sliding-window"]
    assert (
        shared.tokens == plain.tokens and (1, 0) in shared.checked
    )  # the hit's tokens were compared too
    torch.testing.assert_close(
        torch.stack(shared.step_logits[(1, 0)]), torch.stack(plain.step_logits[(1, 0)])
    )
