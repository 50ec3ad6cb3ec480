"""Real mode: kvplan's paged KV + kernels inside a transformers model must reproduce the
model's own logits (fp32), on stories260K's real weights and on random weights."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from generation_helpers import compare_with_transformers, hf_greedy, kvplan_generate  # noqa: E402

from kvplan.cli.app import app  # noqa: E402
from kvplan.real.model import load_causal_lm  # noqa: E402
from kvplan.results import read_jsonl  # noqa: E402

runner = CliRunner()


def vocabulary(path: Path) -> list[str]:
    """llama2.c tok512.bin: int32 max length, then per token float32 score, int32 length, bytes."""
    data = path.read_bytes()
    offset, pieces = 4, []
    for _ in range(512):
        _, length = struct.unpack("fi", data[offset : offset + 8])
        offset += 8
        pieces.append(data[offset : offset + length].decode("utf-8", "replace"))
        offset += length
    return pieces


@pytest.fixture(scope="module")
def stories(stories260k: Path):
    model, _ = load_causal_lm("stories260K", str(stories260k / "hf"), None, "fp32", "cpu")
    reference, _ = load_causal_lm("stories260K", str(stories260k / "hf"), None, "fp32", "cpu")
    return model, reference, vocabulary(stories260k / "tok512.bin")


def test_greedy_text_from_bos_is_the_known_story(stories) -> None:
    model, _, pieces = stories
    real = kvplan_generate(model, [(1,)], 20)
    text = "".join(pieces[t] for t in real.tokens[(0, 0)][1:])
    assert text.startswith(" Once upon a time, there was a little girl named Lily.")


def test_logits_match_transformers_generate(stories) -> None:
    model, reference, _ = stories
    compare_with_transformers(model, reference, "torch", steps=40, block=16)


@pytest.mark.slow  # 5-25 s on 2 cores; `pytest -m slow` runs it
def test_logits_match_through_the_triton_kernels(stories260k: Path) -> None:
    """Triton's interpreter must be chosen before triton is first imported (transformers
    imports it), so this comparison runs in a fresh interpreter."""
    pytest.importorskip("triton")
    script = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from generation_helpers import compare_with_transformers
from kvplan.real.model import load_causal_lm
path = {str(stories260k / "hf")!r}
model, _ = load_causal_lm("s", path, None, "fp32", "cpu")
reference, _ = load_causal_lm("s", path, None, "fp32", "cpu")
compare_with_transformers(model, reference, "triton", steps=8, block=4)
print("ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_preemption_recomputes_to_the_same_tokens(stories) -> None:
    model, _, _ = stories
    prompts = [(1,), (1, 403, 407), (1, 261)]
    roomy = kvplan_generate(model, prompts, 30)
    # 6 blocks of 8 slots: three 31-token sequences cannot all stay resident.
    tight = kvplan_generate(model, prompts, 30, blocks=6, block=8)
    assert all(tight.tokens[(i, 0)] == roomy.tokens[(i, 0)] for i in range(3))


def test_int8_kv_stays_close_to_fp32(stories) -> None:
    model, _, _ = stories
    exact = kvplan_generate(model, [(1, 403, 407, 261)], 16)
    quantized = kvplan_generate(model, [(1, 403, 407, 261)], 16, kv="int8")
    a, b = torch.stack(exact.step_logits[(0, 0)]), torch.stack(quantized.step_logits[(0, 0)])
    assert 0 < (a - b).abs().max() < 0.5


def test_bench_real_mode_end_to_end(stories260k: Path, tmp_path: Path) -> None:
    out = tmp_path / "real.jsonl"
    result = runner.invoke(
        app,
        [
            "bench",
            "--mode",
            "real",
            "--model-path",
            str(stories260k / "hf"),
            "--num-requests",
            "6",
            "--rate",
            "50",
            "--optimizations",
            "contiguous-oracle,paged",
            "--kernel-backend",
            "torch",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    records = read_jsonl(out)
    assert [r.mode for r in records] == ["real", "real"]
    paged = records[1].metrics
    assert paged["requests_finished"] == 6 and paged["ttft_s_p50"] > 0
    assert paged["kv_bytes_allocated"] == pytest.approx(
        0.25 * 2**30, rel=0.01
    )  # the default CPU pool


def test_random_weights_from_a_config(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 300,
        "intermediate_size": 128,
        "max_position_embeddings": 256,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    model, raw = load_causal_lm(str(tmp_path / "config.json"), None, 2, "fp32", "cpu", seed=3)
    assert model.config.num_hidden_layers == 2 and raw["num_hidden_layers"] == 2
    reference, _ = load_causal_lm(str(tmp_path / "config.json"), None, 2, "fp32", "cpu", seed=3)
    real = kvplan_generate(model, [(5, 6, 7)], 10)
    tokens, logits = hf_greedy(reference, (5, 6, 7), 10)
    assert real.tokens[(0, 0)][3:] == tokens
    assert torch.allclose(torch.stack(real.step_logits[(0, 0)]), logits, atol=1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "cuda"], "no CUDA GPU"),
        (["--model-path", "/nonexistent/model"], "no config.json"),
        (["--kv-cache-gib", "0.0000001"], "too small for one request"),
        (["--optimizations", "h2o-holes", "--kv-budget", "64"], "--quality-text"),
    ],
)
def test_real_mode_errors(args: list[str], message: str, stories260k: Path, tmp_path: Path) -> None:
    if torch.cuda.is_available() and "cuda" in args:
        pytest.skip("a GPU is present")
    base = [
        "bench",
        "--mode",
        "real",
        "--num-requests",
        "2",
        "--optimizations",
        "paged",
        "--out",
        str(tmp_path / "r.jsonl"),
    ]
    if "--model-path" not in args:
        base += ["--model-path", str(stories260k / "hf")]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
