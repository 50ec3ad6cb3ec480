"""Real mode on models whose attention is not plain causal: random-weight tiny models shaped
like Mistral (sliding window), Gemma-2 (window + logit softcap), Gemma-3 (per-layer window),
gpt-oss (window + attention sinks) and Llama-4 (chunked local attention) must reproduce
transformers' own eager attention: the same logits at every generated step and the same
greedy tokens, through the torch path and through Triton (interpreted on CPU)."""

from __future__ import annotations

import copy

# Triton's interpreter on before triton is imported, so that this module run alone
# exercises the Triton path too.
from triton_helpers import triton_interpreter_for_module

_interpreter = triton_interpreter_for_module()

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from kvplan.kernels.quant import allocate_kv_cache  # noqa: E402

from kvplan.core.engine import Engine  # noqa: E402
from kvplan.core.kv import make_allocator  # noqa: E402
from kvplan.core.scheduler import SchedulerConfig  # noqa: E402
from kvplan.real.runner import RealRunner  # noqa: E402
from kvplan.workload.request import Request  # noqa: E402

WINDOW, CHUNK = 8, 8
SMALL = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
)


def build(kind: str):
    """(model with kvplan's attention to come, the same weights under eager attention)."""
    if kind == "mistral":
        config = transformers.MistralConfig(**SMALL, num_hidden_layers=2, sliding_window=WINDOW)
    elif kind == "gemma2":
        config = transformers.Gemma2Config(
            **SMALL,
            num_hidden_layers=2,
            sliding_window=WINDOW,
            attn_logit_softcapping=1.5,
            final_logit_softcapping=30.0,
            query_pre_attn_scalar=16,
        )
    elif kind == "gemma3":
        config = transformers.Gemma3TextConfig(
            **SMALL,
            num_hidden_layers=3,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=16,
        )
    elif kind == "gpt_oss":
        config = transformers.GptOssConfig(
            **SMALL,
            num_hidden_layers=2,
            sliding_window=WINDOW,
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=["sliding_attention", "full_attention"],
        )
    elif kind == "llama4":
        config = transformers.Llama4TextConfig(
            **SMALL,
            intermediate_size_mlp=96,
            num_hidden_layers=4,
            attention_chunk_size=CHUNK,
            num_local_experts=2,
            interleave_moe_layer_step=2,
        )
    else:
        raise AssertionError(kind)
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("sinks"):  # gpt-oss leaves them uninitialised: give them weight
                param.copy_(torch.randn_like(param) * 2)
    # Its own config copy: switching the kvplan model's attention must not switch the reference's.
    reference = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(config), dtype=torch.float32
    ).eval()
    reference.load_state_dict(model.state_dict())
    return model, reference


PROMPTS = [
    tuple(range(3, 16)),
    tuple((7 * i) % 90 + 3 for i in range(21)),
]  # 13 and 21 tokens: past the window
NEW_TOKENS = 12


def kvplan_logits(model, backend: str, allocator: str = "paged") -> RealRunner:
    config = model.config.get_text_config()
    blocks, block = 64, 4
    pool = [
        allocate_kv_cache(
            "fp32", blocks, block, config.num_key_value_heads, config.head_dim, dtype=torch.float32
        )
        for _ in range(config.num_hidden_layers)
    ]
    real = RealRunner(model, pool, block, config.vocab_size, "cpu", backend=backend)
    real.keep_logits = True
    requests = [Request(i, 0.0, len(p), NEW_TOKENS, prompt_tokens=p) for i, p in enumerate(PROMPTS)]
    Engine(
        make_allocator(allocator, blocks * block, block, 64, watermark=0.0),
        real,
        SchedulerConfig(),
        64,
    ).run(requests)
    return real


def check_against_transformers(kind: str, backend: str, allocator: str = "paged") -> None:
    model, reference = build(kind)
    real = kvplan_logits(model, backend, allocator)
    for i, prompt in enumerate(PROMPTS):
        out = reference.generate(
            torch.tensor([prompt]),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
        expected = torch.stack(out.logits)[:, 0]
        got = torch.stack(real.step_logits[(i, 0)])
        assert real.tokens[(i, 0)][len(prompt) :] == out.sequences[0, len(prompt) :].tolist()
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gemma3", "gpt_oss", "llama4"])
def test_torch_path_matches_transformers(kind: str) -> None:
    check_against_transformers(kind, "torch")


@pytest.mark.parametrize(
    "kind",
    [
        *(
            pytest.param(k, marks=pytest.mark.slow)
            for k in ("gemma2", "gpt_oss", "llama4", "mistral", "gemma3")
        ),
    ],
)
def test_triton_interpreted_matches_transformers(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    triton = pytest.importorskip("triton")
    if type(triton.language.zeros_like).__name__ != "InterpretedFunction":
        pytest.skip(
            "triton was imported without TRITON_INTERPRET=1 (run with it set, or with "
            "tests/test_kernels.py)"
        )
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check_against_transformers(kind, "triton")


def test_contiguous_allocation_matches_transformers() -> None:
    check_against_transformers("gpt_oss", "torch", allocator="contiguous-max")


def test_window_matters_in_these_models() -> None:
    """The check above can fail: plain causal attention gives other logits on these prompts."""
    model, reference = build("mistral")
    long_window = reference.config.__class__(
        **{**reference.config.to_dict(), "sliding_window": 4096}
    )
    long_window._attn_implementation = "eager"
    full = transformers.AutoModelForCausalLM.from_config(long_window, dtype=torch.float32).eval()
    full.load_state_dict(reference.state_dict())
    ids = torch.tensor([PROMPTS[1]])
    assert (full(ids).logits - reference(ids).logits).abs().max() > 1e-2


@pytest.mark.parametrize(
    "config,feature",
    [
        (dict(model_type="bloom"), "ALiBi"),
        (dict(model_type="llama", layer_types=["full_attention", "mamba"]), "layer_types"),
        (
            dict(model_type="gemma3_text", use_bidirectional_attention=True),
            "use_bidirectional_attention",
        ),
    ],
)
def test_refuses_what_it_cannot_honour(config: dict, feature: str) -> None:
    from types import SimpleNamespace

    from kvplan.real.attention import check_supported

    with pytest.raises(ValueError, match=feature):
        check_supported(SimpleNamespace(**config))


@pytest.mark.parametrize(
    "model,feature", [("gemma-4-26b-a4b", "global_head_dim"), ("deepseek-v3", "MLA")]
)
def test_refuses_kv_it_cannot_pool(model: str, feature: str) -> None:
    from kvplan.real.loaded import check_real_spec
    from kvplan.spec.resolve import load_model

    with pytest.raises(ValueError, match=feature):
        check_real_spec(load_model(model))
    check_real_spec(load_model("llama-3.1-8b"))  # one shape, plain attention: accepted
