"""Measure what a KV format or eviction policy costs in model quality, on a real model.

The text is fed one token at a time (teacher forcing), as decoding sees it: every layer
keeps its own cache of post-RoPE K/V, stored in the KV format (quantized on write, read
back for attention); the policy (kvplan.core.policies, per KV head) prunes it *before*
each step's attention, so no step attends to more than the budget, and scores tokens with
the attention that step really computed. StreamingLLM re-indexes positions inside the
cache. This runs inside the model's own modules through transformers' attention registry.

Reported: mean NLL and perplexity of the text, mean KL(full || optimized) of the
next-token distributions, greedy agreement along the full model's greedy continuation,
and the KV bytes the policy keeps per sequence (KIVI: measured from its packed tensors).
Per-tensor formats (fp8, intB-tensor) and entropy-budget's layer split are calibrated on
a separate text (`calibration`), never on the text scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvplan.core.policies import PolicySpec, held_tokens, split_budget
from kvplan.quality.kivi import KiviLayer, kivi_bits
from kvplan.quality.layer_cache import LayerCache, reindexed_keys, rope_inv_freq
from kvplan.quality.torch_threads import intra_op_threads

ATTENTION_NAME = "kvplan_policy"


@dataclass
class EvalState:
    spec: PolicySpec
    kv_format: str | None
    layers: list[LayerCache]
    step: int = 0
    prompt_len: int = 0  # snapkv compresses once, when the prompt is done
    layer_budgets: list[int] | None = None
    tensor_scales: list[tuple[float, float]] | None = None  # per layer (K, V): per-tensor formats
    inv_freq: Any = None  # RoPE frequencies (StreamingLLM re-indexing)


def policy_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    kvplan_eval: EvalState | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    import torch

    state = kvplan_eval
    if state is None:
        raise RuntimeError("kvplan policy attention needs an evaluation state")
    layer = module.layer_idx
    cache = state.layers[layer]
    k, v = key[0], value[0]  # [kv_heads, 1, head_dim]
    scales = state.tensor_scales[layer] if state.tensor_scales else (None, None)
    if cache.kivi is not None:
        cache.kivi.append(k, v)
        cache.append(k, v, state.step)  # positions and attention scores only
        keys, values = cache.kivi.keys(), cache.kivi.values()
    else:
        raw = k if state.kv_format and state.spec.reindexes_positions else None
        if state.kv_format:
            k, v = (
                _round_trip(k, state.kv_format, scales[0]),
                _round_trip(v, state.kv_format, scales[1]),
            )
        cache.append(k, v, state.step, raw_key=raw)
        _prune(state, layer, cache)
        keys, values = cache.keys, cache.values
    if state.spec.reindexes_positions:
        # a quantized cache stores a re-indexed key rounded once, from the key as computed
        store = (lambda x: _round_trip(x, state.kv_format, scales[0])) if state.kv_format else None
        keys = reindexed_keys(cache, keys, state.step, state.inv_freq, store)
    heads, dim = query.shape[1], query.shape[-1]
    kv_heads = keys.shape[0]
    q = (
        query[0, :, 0].float().reshape(kv_heads, heads // kv_heads, dim)
    )  # query heads grouped by KV head
    logits = torch.einsum("kgd,knd->kgn", q, keys.float()) * (scaling or dim**-0.5)
    probs = logits.softmax(dim=-1)
    out = torch.einsum("kgn,knd->kgd", probs, values.float()).reshape(heads, dim)
    received = (
        probs.sum(dim=1).double().cpu().numpy()
    )  # [kv_heads, n]: per KV head, its query heads added
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(dim=-1).mean().item()
    cache.record(received, entropy, state.spec.window)
    if cache.kivi is not None:
        cache.kivi.settle()
    elif state.spec.policy.selects_after_prompt and state.step == state.prompt_len - 1:
        _compress_prompt(state, cache)
    return out.to(query.dtype)[None, None], None


def _round_trip(x: Any, fmt: str, scale: float | None) -> Any:
    """Store and read back as the KV cache would (per token and KV head, or per tensor)."""
    from kvplan.kernels.quant import dequantize, quantize

    stored, scales = quantize(x.float(), fmt, scale)
    return dequantize(stored, scales if scales is not None else scale, fmt, x.shape[-1]).to(x.dtype)


def _prune(state: EvalState, layer: int, cache: LayerCache) -> None:
    """Strict budget: with the step's token written, evict down to the budget before attending."""
    spec, count = state.spec, cache.count
    budget = state.layer_budgets[layer] if state.layer_budgets else spec.budget
    if not spec.evicts or spec.policy.selects_after_prompt or budget is None or count <= budget:
        return
    cache.keep(spec.policy.keep(spec, cache.scores, cache.positions, budget))


def _compress_prompt(state: EvalState, cache: LayerCache) -> None:
    """Once the prompt is read (SnapKV): the last `window` queries vote, per KV head."""
    spec, count = state.spec, cache.count
    if count <= spec.budget:
        return
    window = min(spec.window, count - 1)
    votes = sum(row[:, : count - window] for row in cache.window_rows[-window:])
    cache.keep(spec.policy.keep_after_prompt(spec, votes, window))


def run_policy(
    model: Any,
    tokens: list[int],
    spec: PolicySpec,
    kv_format: str | None = None,
    prompt_len: int | None = None,
    layer_budgets: list[int] | None = None,
    tensor_scales: list[tuple[float, float]] | None = None,
) -> tuple[Any, EvalState]:
    """Feed `tokens` one at a time; returns the logits of every step [n, vocab] and the state."""
    import torch
    from transformers import AttentionInterface

    kivi = kivi_bits(kv_format)
    if kivi and spec.evicts:
        raise ValueError("KIVI formats combine with the full cache only (no eviction policy)")
    AttentionInterface.register(ATTENTION_NAME, policy_attention)
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    layers = [
        LayerCache(kivi=KiviLayer(kivi) if kivi else None)
        for _ in range(model.config.num_hidden_layers)
    ]
    state = EvalState(
        spec,
        kv_format,
        layers,
        prompt_len=prompt_len or len(tokens) // 2,
        layer_budgets=layer_budgets,
        tensor_scales=tensor_scales,
    )
    if spec.reindexes_positions:
        state.inv_freq = rope_inv_freq(model)
    rows = []
    device = next(model.parameters()).device
    # One token at a time the tensors are tiny: intra-op threads only add synchronization
    # (5x slower on a busy 2-core machine).
    try:
        with intra_op_threads(1), torch.inference_mode():
            for step, token in enumerate(tokens):
                state.step = step
                out = model(
                    input_ids=torch.tensor([[token]], device=device),
                    position_ids=torch.tensor([[step]], device=device),
                    kvplan_eval=state,
                    use_cache=False,
                )
                rows.append(out.logits[0, -1].float())
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(rows), state


@dataclass(frozen=True)
class QualityResult:
    name: str
    nll: float
    perplexity: float
    kl_mean: float
    greedy_agreement: float
    kv_bytes_per_seq: int  # retained at the end of the text
    peak_kv_bytes_per_seq: int
    retained_tokens: list[int]  # per layer (per KV head), at the end
    layer_budgets: list[int] | None = None  # entropy-budget's calibrated split


def bytes_per_token_layer(model: Any, kv_format: str | None) -> int:
    """Bytes one token's K and V take in one layer, measured from the cache tensors' layout."""
    from kvplan.kernels.quant import cache_bytes_per_token_per_head

    config = model.config
    dtype = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}[
        str(model.dtype)
    ]
    return (
        2
        * config.num_key_value_heads
        * cache_bytes_per_token_per_head(kv_format or dtype, _head_dim(config))
    )


def _head_dim(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def calibrate(
    model: Any, calibration: list[int], spec: PolicySpec, kv_format: str | None
) -> tuple[list[int] | None, list[tuple[float, float]] | None]:
    """What a policy or format learns before it runs, from a text other than the one scored:
    entropy-budget's per-layer budgets, and per-tensor formats' scales (absmax / the
    format's largest value, as vLLM's calculated KV scales)."""
    from kvplan.kernels.quant import get_format

    per_tensor = (
        bool(kv_format) and not kivi_bits(kv_format) and get_format(kv_format).scale == "tensor"
    )
    splits = spec.policy.splits_layers
    if not splits and not per_tensor:
        return None, None
    if not calibration:
        raise ValueError(
            f"{spec.name if splits else kv_format} needs a calibration text other than the one "
            "scored"
        )
    _, probe = run_policy(model, calibration, PolicySpec("full"))
    budgets = scales = None
    if splits:
        entropies = [layer.entropy / max(1, layer.entropy_steps) for layer in probe.layers]
        budgets = split_budget(spec.budget * len(entropies), entropies)
    if per_tensor:
        fmt = get_format(kv_format)
        top = fmt.fp8_max if fmt.is_float else float(fmt.qmax)
        scales = [
            (max(layer.key_absmax, 1e-12) / top, max(layer.value_absmax, 1e-12) / top)
            for layer in probe.layers
        ]
    return budgets, scales


def evaluate(
    model: Any,
    tokens: list[int],
    spec: PolicySpec,
    kv_format: str | None = None,
    reference: Any | None = None,
    greedy: list[int] | None = None,
    calibration: list[int] | None = None,
) -> QualityResult:
    """Quality of `spec` + `kv_format` against the full cache (`reference`: its logits).
    `calibration`: tokens of another text (entropy-budget, per-tensor scales)."""
    import torch

    budgets, scales = calibrate(model, calibration or [], spec, kv_format)
    logits, state = run_policy(
        model, tokens, spec, kv_format, layer_budgets=budgets, tensor_scales=scales
    )
    targets = torch.tensor(tokens[1:])
    nll = torch.nn.functional.cross_entropy(logits[:-1], targets).item()
    kl = agreement = 0.0
    if reference is not None:
        full = reference.log_softmax(-1)
        kl = torch.nn.functional.kl_div(
            logits.log_softmax(-1), full, log_target=True, reduction="batchmean"
        ).item()
    if greedy is not None:
        greedy_logits, _ = run_policy(
            model, greedy, spec, kv_format, layer_budgets=budgets, tensor_scales=scales
        )
        predicted = greedy_logits[:-1].argmax(-1).tolist()
        agreement = sum(p == t for p, t in zip(predicted, greedy[1:])) / max(1, len(greedy) - 1)
    name = kv_format or spec.name
    if spec.evicts and kv_format:
        name = f"{spec.name}+{kv_format}"
    if kivi_bits(kv_format):  # measured from the packed tensors
        total = sum(layer.kivi.nbytes() for layer in state.layers)
        return QualityResult(
            name,
            nll,
            math.exp(nll),
            kl,
            agreement,
            total,
            total,
            [layer.kivi.tokens for layer in state.layers],
            budgets,
        )
    per_token = bytes_per_token_layer(model, kv_format)
    retained = [layer.count for layer in state.layers]
    peak = [layer.peak_tokens for layer in state.layers]
    if not budgets:  # every layer follows the one memory model the simulator charges
        expected = held_tokens(spec, state.prompt_len, len(tokens))
        if any(count != expected for count in retained):
            raise RuntimeError(
                f"{spec.name}: layers hold {retained} tokens, the memory model says {expected}"
            )
    return QualityResult(
        name,
        nll,
        math.exp(nll),
        kl,
        agreement,
        sum(retained) * per_token,
        sum(peak) * per_token,
        retained,
        budgets,
    )
