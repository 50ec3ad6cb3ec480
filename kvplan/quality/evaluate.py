"""Measure what a KV format or eviction policy costs in model quality, on a real model.

The text is fed one token at a time (teacher forcing), as decoding sees it: every layer
keeps its own cache of post-RoPE K/V, quantized on write when a KV format is given, and
the policy prunes it after each step using the attention that step really computed. This
runs inside the model's own modules through transformers' attention-function registry.

Reported: mean NLL and perplexity of the text, mean KL(full || optimized) of the
next-token distributions, greedy agreement (the share of positions where the optimized
cache's argmax equals the full cache's along the full model's greedy continuation), and
the KV bytes the policy keeps per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvplan.quality.policies import (PolicySpec, keep_h2o, keep_paged, keep_sliding, keep_snapkv, keep_streaming,
                                     split_budget)

ATTENTION_NAME = "kvplan_policy"


@dataclass
class LayerCache:
    keys: Any = None  # [kv_heads, n, head_dim]
    values: Any = None
    positions: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # accumulated attention per cached token
    window_rows: list[Any] = field(default_factory=list)  # recent per-query attention (snapkv)
    entropy: float = 0.0
    entropy_steps: int = 0
    peak_tokens: int = 0
    quantized: int = 0  # KIVI: leading tokens already quantized (the rest is the full-precision window)


@dataclass
class EvalState:
    spec: PolicySpec
    kv_format: str | None
    layers: list[LayerCache]
    step: int = 0
    prompt_len: int = 0  # snapkv prunes once when the prompt is done
    layer_budgets: list[int] | None = None


def policy_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None,
                     dropout: float = 0.0, kvplan_eval: EvalState | None = None, **kwargs: Any) -> tuple[Any, None]:
    import torch

    state = kvplan_eval
    if state is None:
        raise RuntimeError("kvplan policy attention needs an evaluation state")
    cache = state.layers[module.layer_idx]
    k, v = key[0], value[0]  # [kv_heads, 1, head_dim]
    kivi = kivi_bits(state.kv_format)
    if state.kv_format and not kivi:
        k, v = _round_trip(k, state.kv_format), _round_trip(v, state.kv_format)
    cache.keys = k if cache.keys is None else torch.cat([cache.keys, k], dim=1)
    cache.values = v if cache.values is None else torch.cat([cache.values, v], dim=1)
    if kivi:
        _kivi_quantize(cache, kivi)
    cache.positions.append(state.step)
    cache.scores.append(0.0)
    q = query[0, :, 0]  # [heads, head_dim]
    group = q.shape[0] // cache.keys.shape[0]
    keys = cache.keys.repeat_interleave(group, dim=0)  # [heads, n, head_dim]
    logits = torch.einsum("hd,hnd->hn", q.float(), keys.float()) * (scaling or q.shape[-1] ** -0.5)
    probs = logits.softmax(dim=-1)
    out = torch.einsum("hn,hnd->hd", probs, cache.values.repeat_interleave(group, dim=0).float())
    received = probs.sum(dim=0).tolist()
    cache.scores = [s + r for s, r in zip(cache.scores, received)]
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(dim=-1).mean().item()
    cache.entropy += entropy
    cache.entropy_steps += 1
    cache.window_rows = (cache.window_rows + [received])[-state.spec.window:]
    cache.peak_tokens = max(cache.peak_tokens, len(cache.positions))
    _prune(state, module.layer_idx, cache)
    return out.to(query.dtype)[None, None], None


KIVI_GROUP = 32  # tokens per key-channel quantization group
KIVI_WINDOW = 32  # most recent tokens kept in full precision


def kivi_bits(fmt: str | None) -> int:
    """2 or 4 for 'kivi-int2' / 'kivi-int4', else 0."""
    if fmt and fmt.startswith("kivi-int") and fmt[8:] in ("2", "4"):
        return int(fmt[8:])
    if fmt and fmt.startswith("kivi"):
        raise ValueError(f"unknown KIVI format '{fmt}'; use kivi-int2 or kivi-int4")
    return 0


def _kivi_quantize(cache: LayerCache, bits: int) -> None:
    """KIVI (Liu et al. 2024): keys quantized per channel over groups of tokens, values per
    token, once a whole group has left the full-precision recent window."""
    from kvplan.kernels.quant import dequantize, quantize

    qmax = 2 ** (bits - 1) - 1
    while len(cache.positions) - cache.quantized >= KIVI_WINDOW + KIVI_GROUP:
        start, end = cache.quantized, cache.quantized + KIVI_GROUP
        keys = cache.keys[:, start:end].float()  # [kv_heads, group, head_dim]
        scale = keys.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / qmax  # one per channel
        cache.keys[:, start:end] = ((keys / scale).round().clamp(-qmax, qmax) * scale).to(cache.keys.dtype)
        values = cache.values[:, start:end].float()
        stored, scales = quantize(values, f"int{bits}")
        cache.values[:, start:end] = dequantize(stored, scales, f"int{bits}", values.shape[-1]).to(cache.values.dtype)
        cache.quantized = end


def _round_trip(x: Any, fmt: str) -> Any:
    """Store and read back as the KV cache would (per token, per KV head)."""
    from kvplan.kernels.quant import dequantize, quantize

    stored, scales = quantize(x.float(), fmt)
    return dequantize(stored, scales, fmt, x.shape[-1]).to(x.dtype)


def _prune(state: EvalState, layer: int, cache: LayerCache) -> None:
    spec, count = state.spec, len(cache.positions)
    budget = state.layer_budgets[layer] if state.layer_budgets else spec.budget
    if spec.name == "full" or budget is None:
        return
    if spec.name == "snapkv":
        if state.step != state.prompt_len - 1 or count <= budget:
            return  # prune once, when the prompt has been read
        window = min(spec.window, count - 1)
        rows = cache.window_rows[-window:]
        votes = [sum(row[i] for row in rows if i < len(row)) for i in range(count - window)]
        keep = keep_snapkv(votes, budget, window)
    elif count <= budget:
        return
    elif spec.name == "sliding-window":
        keep = keep_sliding(count, budget)
    elif spec.name == "streaming":
        keep = keep_streaming(count, budget)
    elif spec.name == "paged-eviction":
        keep = keep_paged(cache.scores, cache.positions, budget, spec.block)
    else:  # h2o, and entropy-budget's per-layer selection
        keep = keep_h2o(cache.scores, budget)
    _apply(cache, keep)


def _apply(cache: LayerCache, keep: list[int]) -> None:
    import torch

    index = torch.tensor(keep, dtype=torch.long)
    cache.keys, cache.values = cache.keys[:, index], cache.values[:, index]
    cache.positions = [cache.positions[i] for i in keep]
    cache.scores = [cache.scores[i] for i in keep]
    cache.window_rows = [[row[i] for i in keep if i < len(row)] for row in cache.window_rows]


def run_policy(model: Any, tokens: list[int], spec: PolicySpec, kv_format: str | None = None,
               prompt_len: int | None = None, layer_budgets: list[int] | None = None) -> tuple[Any, EvalState]:
    """Feed `tokens` one at a time; returns the logits of every step [n, vocab] and the state."""
    import torch
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, policy_attention)
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    state = EvalState(spec, kv_format, [LayerCache() for _ in range(model.config.num_hidden_layers)],
                      prompt_len=prompt_len or len(tokens) // 2, layer_budgets=layer_budgets)
    rows = []
    try:
        with torch.inference_mode():
            for step, token in enumerate(tokens):
                state.step = step
                out = model(input_ids=torch.tensor([[token]]), position_ids=torch.tensor([[step]]),
                            kvplan_eval=state, use_cache=False)
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
    retained_tokens: list[int]  # per layer, at the end


def bytes_per_token_layer(model: Any, kv_format: str | None) -> int:
    """Bytes one token's K and V take in one layer, measured from the cache tensors' layout."""
    from kvplan.kernels.quant import cache_bytes_per_token_per_head

    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}[str(model.dtype)]
    return 2 * config.num_key_value_heads * cache_bytes_per_token_per_head(kv_format or dtype, head_dim)


def evaluate(model: Any, tokens: list[int], spec: PolicySpec, kv_format: str | None = None,
             reference: Any | None = None, greedy: list[int] | None = None) -> QualityResult:
    """Quality of `spec` + `kv_format` against the full cache (`reference`: its logits)."""
    import torch

    kivi = kivi_bits(kv_format)
    if kivi and spec.name != "full":
        raise ValueError("KIVI formats combine with the full cache only (no eviction policy)")
    per_token = bytes_per_token_layer(model, None if kivi else kv_format)
    budgets = None
    if spec.name == "entropy-budget":
        _, probe = run_policy(model, tokens, PolicySpec("full"))
        entropies = [layer.entropy / max(1, layer.entropy_steps) for layer in probe.layers]
        budgets = split_budget(spec.budget * len(entropies), entropies)
    logits, state = run_policy(model, tokens, spec, kv_format, layer_budgets=budgets)
    targets = torch.tensor(tokens[1:])
    nll = torch.nn.functional.cross_entropy(logits[:-1], targets).item()
    kl = agreement = 0.0
    if reference is not None:
        full = reference.log_softmax(-1)
        kl = torch.nn.functional.kl_div(logits.log_softmax(-1), full, log_target=True, reduction="batchmean").item()
    if greedy is not None:
        greedy_logits, _ = run_policy(model, greedy, spec, kv_format, layer_budgets=budgets)
        predicted = greedy_logits[:-1].argmax(-1).tolist()
        agreement = sum(p == t for p, t in zip(predicted, greedy[1:])) / max(1, len(greedy) - 1)
    retained = [len(layer.positions) for layer in state.layers]
    peak = [layer.peak_tokens for layer in state.layers]
    if kivi:  # quantized tokens at KIVI's size, the recent window at full precision
        config = model.config
        heads = config.num_key_value_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        packed = -(-dim * kivi // 8)
        key_bytes = heads * (packed * KIVI_GROUP + dim * 4)  # a group: values + one fp32 scale per channel
        value_bytes = heads * (packed + 4) * KIVI_GROUP  # a group: per token values + one fp32 scale
        quantized = sum(layer.quantized for layer in state.layers)
        total = quantized // KIVI_GROUP * (key_bytes + value_bytes) + (sum(retained) - quantized) * per_token
        return QualityResult(kv_format, nll, math.exp(nll), kl, agreement, total, total, retained)
    return QualityResult(spec.name if not kv_format else f"{spec.name}+{kv_format}" if spec.name != "full" else kv_format,
                         nll, math.exp(nll), kl, agreement, sum(retained) * per_token, sum(peak) * per_token,
                         retained)
