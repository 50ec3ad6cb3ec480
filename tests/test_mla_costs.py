"""MLA attention as vLLM runs it: absorbed decode in the latent space, prefill on up-projected
heads."""

from __future__ import annotations

import pytest

from kvplan.core.scheduler import StepPlan
from kvplan.sim.runner import SimulatedRunner
from kvplan.spec import parse_kv_format
from kvplan.spec.resolve import load_gpu, load_model
from kvplan.spec.roofline import Roofline


def test_deepseek_v3_pair_flops_by_hand() -> None:
    """DeepSeek-V3: kv_lora_rank 512, qk_rope 64, qk_nope 128, v_head 128, 61 layers."""
    group = load_model("deepseek-v3").groups[0]
    assert (group.latent_dim, group.rope_dim, group.nope_dim, group.value_dim) == (
        576,
        64,
        128,
        128,
    )
    # decode: QK^T over 512 + 64 (query absorbed into the latent), PV over 512
    assert group.attention_flops_per_pair(1, prefill=False) == 2 * 61 * (576 + 512)
    # prefill: plain attention over up-projected heads, QK^T over 128 + 64, PV over 128
    assert group.attention_flops_per_pair(1, prefill=True) == 2 * 61 * (128 + 64 + 128)
    # ...after up-projecting each context token's 512-wide latent to 128 + 128 per head
    assert group.up_projection_flops_per_token(1) == 2 * 61 * 512 * (128 + 128)
    dense = load_model("llama-3.1-8b").groups[0]  # other layers: 2 x head_dim each way
    assert (
        dense.attention_flops_per_pair(1, True)
        == dense.attention_flops_per_pair(1, False)
        == 4 * 32 * 128
    )


def test_the_runner_charges_decodes_and_prefills_their_own_way() -> None:
    model = load_model("deepseek-v3")
    roofline = Roofline(model, load_gpu("h200"), 8, parse_kv_format("bf16"))
    runner = SimulatedRunner(roofline)
    heads = 128 / 8
    # one decode at context 1,000 (1,000 pairs) and one 100-token prefill chunk after 900 tokens
    plan = StepPlan(
        [],
        101,
        context_tokens=2000,
        attention_pairs=1000 + 100 * 900 + 5050,
        decode_pairs=1000,
        prefill_context=1000,
    )
    _, flops = runner.attention_costs(plan)
    expected = (
        1000 * 2 * 61 * heads * 1088
        + (100 * 900 + 5050) * 2 * 61 * heads * 320
        + 1000 * 2 * 61 * heads * 512 * 256
    )
    assert flops == pytest.approx(expected)
