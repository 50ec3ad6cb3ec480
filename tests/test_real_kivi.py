"""KIVI in the real serving engine's paged pool (kvplan/real/kivi_pool.py) against the
quality evaluator's KIVI (kvplan/quality/kivi.py) and the estimator's bytes, on stories260K."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan.bench import SizingConfig, parse_optimization
from kvplan.core.policies import PolicySpec
from kvplan.spec import parse_kv_format
from kvplan.workload.request import Request

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

LAYERS, KV_HEADS, HEAD_DIM, FP32 = 5, 4, 8, 4  # stories260K


def test_paged_layout_bytes_equal_the_estimator_and_round_trip_like_the_evaluator() -> None:
    from kvplan.kernels.kivi import allocate_kivi_cache

    from kvplan.quality.kivi import KiviLayer

    for bits in (2, 4):
        fmt = parse_kv_format(f"kivi-int{bits}")
        cache = allocate_kivi_cache(bits, 3, 2, 64)
        per_block = sum(t.numel() * t.element_size() for t in cache.tensors) / 3
        # a block of 32 tokens x 2 KV heads, K and V: the estimator's steady-state bytes per vector
        assert per_block == 32 * 2 * 2 * fmt.bytes_per_vector(64)
        torch.manual_seed(bits)
        keys, values = torch.randn(32, 2, 64), torch.randn(32, 2, 64)
        blocks = torch.tensor([2])
        cache.store_keys(blocks, keys[None])
        cache.store_values(torch.arange(64, 96), values)  # block 2's slots
        read_k, read_v = cache.read_blocks(blocks)
        layer = KiviLayer(bits, residual=32)
        for t in range(33):  # the 33rd token pushes the first value out of the residual
            key = keys[t % 32].reshape(2, 1, 64)
            layer.append(key, values[t % 32].reshape(2, 1, 64))
            layer.settle()
        assert torch.equal(
            read_k[0], layer.key_read.transpose(0, 1)
        )  # bit for bit: the same quantizer
        assert torch.equal(read_v[0, :1], layer.value_read.transpose(0, 1))
        assert (read_k[0] - keys).abs().max() <= (keys.amax(0) - keys.amin(0)).max() / (
            2**bits - 1
        ) / 2 + 1e-6


def config(stories260k: Path, block_size: int = 32) -> tuple[SizingConfig, object]:
    from kvplan.core.engine_factory import RealConfig

    hf = str(stories260k / "hf")
    sizing = SizingConfig(
        model=hf,
        gpu="l4",
        kv_dtype="fp32",
        block_size=block_size,
        kv_cache_gib=0.001,
        max_model_len=256,
    )
    return sizing, RealConfig(device="cpu", model_path=hf)


@pytest.fixture(scope="module")
def factory(stories260k: Path):
    from kvplan.real.factory import RealEngineFactory

    torch.set_num_threads(1)  # tiny per-step tensors on a shared CPU
    return RealEngineFactory(*config(stories260k))


@pytest.mark.parametrize("name", ["kivi-int4", "kivi-int2"])
def test_served_kivi_decodes_what_the_evaluator_predicts(factory, name: str) -> None:
    """The serving engine's KIVI (quantized blocks, residual beside them, paged kernels) and
    the evaluator's (contiguous, token by token): teacher-forced on the engine's greedy
    tokens, the evaluator predicts every one; the bytes the pool's tensors hold for the
    sequence equal the estimator's and the evaluator's."""
    from kvplan.quality.evaluate import run_policy

    engine, _ = factory.build(parse_optimization(name))
    engine.run([Request(0, 0.0, 20, 60)])  # the 20-token prompt stays inside the residual (R = 32)
    tokens = engine.runner.tokens[(0, 0)]
    logits, state = run_policy(
        factory.loaded.model, tokens[:-1], PolicySpec("full"), name, prompt_len=20
    )
    assert logits[19:].argmax(-1).tolist() == tokens[20:]
    written, measured = engine.runner.kivi.measured[(0, 0)]
    assert written == 79  # the last sampled token is never written
    # 79 tokens: 64 keys quantized (two groups), 15 waiting; 47 values quantized, 32 in fp32
    assert measured == LAYERS * KV_HEADS * parse_kv_format(name).kivi_sequence_bytes(
        79, HEAD_DIM, FP32
    )
    assert measured == sum(layer.kivi.nbytes() for layer in state.layers)
    bits = int(name[-1])
    assert measured == LAYERS * KV_HEADS * (
        64 * HEAD_DIM * (bits / 8 + 8 / 32) + 47 * (bits + 8) + (15 + 32) * HEAD_DIM * FP32
    )


def test_served_perplexity_through_the_quality_table_equals_the_evaluator(
    factory, stories260k: Path
) -> None:
    """`--quality-text`'s served column (the text teacher-forced through the engine in
    32-token blocks) equals the evaluator's KIVI perplexity: float32 sums in another order."""
    from kvplan.bench.quality import served_columns
    from kvplan.quality.evaluate import evaluate
    from kvplan.quality.tokenizer import Llama2cTokenizer

    root = stories260k
    tokens = Llama2cTokenizer(root / "tok512.bin").encode(
        (root / "tinystories_validation_0.txt").read_text().strip()
    )
    rows = [{}]
    served_columns(
        rows,
        [parse_optimization("kivi-int2")],
        tokens,
        "stories260K",
        root / "hf",
        None,
        "fp32",
        0,
        None,
    )
    expected = evaluate(factory.loaded.model, tokens, PolicySpec("full"), "kivi-int2").perplexity
    assert round(expected, 2) == 4.36
    assert rows[0]["served_perplexity"] == pytest.approx(expected, rel=1e-5)


def test_served_kivi_int4_perplexity_equals_the_evaluator(factory, stories260k: Path) -> None:
    from kvplan.quality.evaluate import evaluate
    from kvplan.quality.tokenizer import Llama2cTokenizer
    from kvplan.real.teacher import served_quality

    root = stories260k
    tokens = Llama2cTokenizer(root / "tok512.bin").encode(
        (root / "tinystories_validation_0.txt").read_text().strip()
    )
    served = served_quality(factory, parse_optimization("kivi-int4"), tokens)["served_perplexity"]
    expected = evaluate(factory.loaded.model, tokens, PolicySpec("full"), "kivi-int4").perplexity
    assert served == pytest.approx(expected, rel=1e-5)


def test_long_prompts_in_a_batch_quantize_after_prefill(factory) -> None:
    """Prompts longer than the residual are read in full precision, then quantized as KIVI's
    reference prefill does; every sequence ends holding the estimator's bytes."""
    engine, _ = factory.build(parse_optimization("kivi-int2"))
    engine.runner.keep_logits = True
    requests = [Request(0, 0.0, 70, 12), Request(1, 0.0, 9, 40), Request(2, 0.0, 33, 20)]
    result = engine.run(requests)
    assert result.metrics["requests_finished"] == 3
    alone, _ = factory.build(
        parse_optimization("kivi-int2")
    )  # decode and prefill rows shared one step
    alone.run([requests[0]])
    assert alone.runner.tokens[(0, 0)] == engine.runner.tokens[(0, 0)]
    full, _ = factory.build(parse_optimization("paged"))
    full.runner.keep_logits = True
    full.run([requests[0]])
    # the first token is sampled from the prompt's own full-precision K/V, as in KIVI's prefill
    first = engine.runner.step_logits[(0, 0)][0]
    torch.testing.assert_close(first, full.runner.step_logits[(0, 0)][0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(
        engine.runner.step_logits[(0, 0)][1], full.runner.step_logits[(0, 0)][1], atol=1e-3
    )
    fmt = parse_kv_format("kivi-int2")
    for request in requests:
        written, measured = engine.runner.kivi.measured[(request.request_id, 0)]
        assert written == request.prompt_len + request.output_len - 1
        assert measured == LAYERS * KV_HEADS * fmt.kivi_sequence_bytes(written, HEAD_DIM, FP32)
    assert not engine.runner.kivi.residual  # finished sequences give their residual back
    metrics = factory.run_metrics(engine)
    assert metrics["kv_bytes_allocated"] > engine.runner.kivi.peak_residual_bytes > 0
    assert metrics["kivi_bytes_per_seq_measured"] == metrics["kivi_bytes_per_seq_estimated"] > 0


@pytest.mark.parametrize(
    ("block_size", "name", "message"),
    [
        (16, "kivi-int4", "one key group .* per pool block: use block_size 32, not 16"),
        (32, "prefix+kivi-int4", "plain paged pool only"),
        (32, "contiguous-max+kivi-int2", "plain paged pool only"),
    ],
)
def test_kivi_serving_refuses_what_it_cannot_hold(
    factory, block_size: int, name: str, message: str
) -> None:
    from dataclasses import replace

    previous = factory.sizing
    factory.sizing = replace(previous, block_size=block_size)
    try:
        with pytest.raises(ValueError, match=message):
            factory.check(parse_optimization(name))
    finally:
        factory.sizing = previous
