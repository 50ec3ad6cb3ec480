"""Real mode's warnings and refusals read the settings given: a fix they name differs from
what the user passed (fewer --layers than given, bf16 for fp32, a larger pool than the one
given), with figures computed from the model's own parameter and KV byte counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli.common import flag_of
from kvplan.real.footprint import check_real_model_memory
from kvplan.spec.resolve import load_model

GIB = 2**30


def weights_gib(layers: int, dtype_bytes: int) -> float:
    """Llama-3.1-8B's weights with `layers` of its 32 layers, by hand from its parameters."""
    params = load_model("llama-3.1-8b").params
    embeddings = params.embedding + params.lm_head
    return (embeddings + (params.total - embeddings) / 32 * layers) * dtype_bytes / GIB


@pytest.fixture(autouse=True)
def plenty_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvplan.real.footprint as footprint

    monkeypatch.setattr(footprint, "available_bytes", lambda: 1000 * GIB)


def warning(layers: int | None, dtype: str) -> str:
    found = check_real_model_memory(load_model("llama-3.1-8b"), layers, dtype, "cpu")
    assert found is not None
    return found.named(flag_of)


def test_given_layers_are_never_suggested_back() -> None:
    embeddings = load_model("llama-3.1-8b").params
    head = (embeddings.embedding + embeddings.lm_head) * 4 / GIB
    assert warning(2, "fp32") == (
        f"real mode builds llama-3.1-8b (2 layers) in fp32: about {weights_gib(2, 4):.1f} GiB of "
        "weights in host memory before moving to cpu; this can take minutes (for a quick run: "
        f"--model-dtype bf16 ({weights_gib(2, 2):.1f} GiB) or a smaller --model; the embeddings "
        f"and LM head take {head:.1f} GiB at any --layers)"
    )
    # one layer would save under a quarter (the embeddings stay): not worth naming
    assert weights_gib(1, 4) > 0.75 * weights_gib(2, 4)


def test_fewer_layers_are_suggested_when_they_save_and_bf16_only_for_fp32() -> None:
    assert (
        f"(for a quick run: --layers 2 ({weights_gib(2, 4):.1f} GiB), --model-dtype bf16 "
        f"({weights_gib(32, 2):.1f} GiB) or a smaller --model)"
    ) in warning(None, "fp32")
    assert warning(8, "bf16").endswith(
        f"(for a quick run: --layers 2 ({weights_gib(2, 2):.1f} GiB) or a smaller --model)"
    )
    assert "(1 layer)" in warning(1, "fp32")


def test_the_memory_refusal_names_fixes_other_than_the_flags_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    import kvplan.real.footprint as footprint
    from kvplan.cli.app import app

    monkeypatch.setattr(footprint, "available_bytes", lambda: 2 * GIB)
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "r.jsonl"
    args = ["bench", "--mode", "real", "--device", "cpu", "--layers", "2", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--optimizations", "paged"])
    assert result.exit_code == 2
    line = result.stderr.strip()
    # the weights against the memory there is, and each fix with what it would take
    assert line.startswith("error: real mode builds llama-3.1-8b (2 layers) in fp32")
    for part in (
        f"about {weights_gib(2, 4):.1f} GiB",
        "only 2.0 GiB is available",
        f"--model-dtype bf16 ({weights_gib(2, 2):.1f} GiB)",
        f"{weights_gib(0, 4):.1f} GiB at any --layers",
    ):
        assert part in line, (part, line)
    assert not out.exists()


@pytest.fixture(scope="module")
def stories_factory(stories260k: Path):
    pytest.importorskip("torch")
    from kvplan.bench.config import BenchConfig
    from kvplan.bench.simulation import engine_factory

    config = BenchConfig.from_flat(
        mode="real", model_path=str(stories260k / "hf"), device="cpu", kv_cache_gib=1e-4
    )
    return engine_factory(config)


@pytest.mark.parametrize(
    ("given", "utilization", "fix"),
    [
        (1e-4, None, "raise --kv-cache-gib from 0.0001 to {need}"),
        (None, None, "pass --kv-cache-gib {need} (default 0.25)"),
        (None, 0.9, "raise --gpu-memory-utilization (0.9 now) or pass --kv-cache-gib {need}"),
    ],
)
def test_a_pool_too_small_names_a_larger_one_than_given(
    stories_factory, monkeypatch: pytest.MonkeyPatch, given, utilization, fix: str
) -> None:
    from dataclasses import replace

    from kvplan.bench.optimizations import parse_optimization
    from kvplan.spec import parse_kv_format
    from kvplan.spec.setting_error import SettingError

    monkeypatch.setattr(
        stories_factory, "sizing", replace(stories_factory.sizing, kv_cache_gib=given)
    )
    spec = stories_factory.loaded.spec
    slot = spec.kv_bytes_per_token(parse_kv_format("fp32", spec))
    # a 48-slot pool (3 blocks of 16); stories260K's 512 tokens need 512 x 1,280 bytes
    # (5 layers x 4 KV heads x 8 dims x K and V x 4 bytes) = 0.00061035 GiB, 0.000611 rounded up
    assert slot == 1280
    with pytest.raises(SettingError) as refused:
        stories_factory.scheduling_engine(
            parse_optimization("paged"), None, (48 * slot, utilization)
        )
    assert refused.value.named(flag_of) == (
        f"the KV pool (48 tokens in {48 * slot / GIB:.4f} GiB) is too small for one request of "
        f"--max-model-len 512 on stories260K; {fix.format(need='0.000611')} or lower "
        "--max-model-len to 48"
    )
