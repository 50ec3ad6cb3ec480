"""kvplan's paged attention as a transformers attention function, and the per-layer
attention variant (sliding window, chunked, softcap, sinks) read from what the model passes.

The model's own attention modules call `paged_attention_forward` through transformers'
public registry (`AttentionInterface.register`), so no modeling code is forked. transformers
builds no mask for an implementation it does not know (masking_utils), so the window and
chunk rules come from the call: `sliding_window` (Mistral, Gemma-2/3, gpt-oss, Qwen2, Phi-3
pass it per layer), `softcap` (Gemma-2/3), `s_aux` (gpt-oss's sinks) and, for Llama-4's
chunked layers, the config's `layer_types` and `attention_chunk_size`. Anything else that
would change which keys a query sees is refused up front (`check_supported`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ATTENTION_NAME = "kvplan_paged"
# Keyword arguments some attention implementation receives that kvplan cannot honour.
_UNSUPPORTED_KWARGS = ("alibi_slopes", "attn_bias", "position_bias", "sinks")


@dataclass
class StepContext:
    """What the attention function needs for one step, shared by all layers.

    Packed tokens are decode tokens first (one per sequence), then prefill chunks.
    """

    pool: list[Any]  # one PagedKVCache per layer
    slot_mapping: Any
    num_decode: int
    decode_tables: Any
    decode_lens: Any
    decode_max_len: int
    prefill_tables: Any
    prefill_query_start: Any
    prefill_lens: Any
    prefill_max_query: int
    backend: str | None = None
    eviction: Any = None  # real/eviction.py's RealEviction: an eviction policy working on the pool
    kivi: Any = (
        None  # real/kivi_pool.py's KiviServing: a KIVI pool and its full-precision residuals
    )
    # Index work the torch kernels derive from the tables and lengths, shared by every layer.
    plan_cache: dict = field(default_factory=dict)


def check_supported(config: Any) -> None:
    """Raise ValueError naming a config feature real mode's attention cannot reproduce."""
    text = getattr(config, "get_text_config", lambda: config)()
    model_type = getattr(text, "model_type", "")
    if getattr(text, "alibi", False) or model_type in ("bloom", "mpt"):
        raise ValueError(
            f"real mode cannot run '{model_type}': ALiBi position biases are not implemented in "
            "kvplan's attention kernels"
        )
    if getattr(text, "use_bidirectional_attention", False):
        raise ValueError(
            "real mode cannot run a model with use_bidirectional_attention=true (its kernels are "
            "causal)"
        )
    if getattr(text, "num_kv_shared_layers", 0):
        raise ValueError(
            "real mode cannot run a model with num_kv_shared_layers (layers reading another "
            "layer's KV)"
        )
    layer_types = getattr(text, "layer_types", None) or []
    unknown = sorted(
        set(layer_types) - {"full_attention", "sliding_attention", "chunked_attention"}
    )
    if unknown:
        raise ValueError(
            f"real mode cannot run layer_types {unknown}: only full, sliding and chunked attention"
        )
    if "chunked_attention" in layer_types and not getattr(text, "attention_chunk_size", None):
        raise ValueError("layer_types has chunked_attention but attention_chunk_size is not set")


def layer_variant(module: Any, kwargs: dict[str, Any]) -> Any:
    from kvplan.kernels.variant import AttentionVariant

    for name in _UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            raise ValueError(f"kvplan's attention cannot honour the model's '{name}' argument")
    config = getattr(module, "config", None)
    chunk = None
    layer_types = getattr(config, "layer_types", None)
    if layer_types and layer_types[module.layer_idx] == "chunked_attention":
        chunk = config.attention_chunk_size
    sinks = kwargs.get("s_aux")
    return AttentionVariant(
        sliding_window=kwargs.get("sliding_window"),
        chunk_size=chunk,
        softcap=kwargs.get("softcap"),
        sinks=None if sinks is None else sinks.detach(),
    )


def paged_attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    kvplan_ctx: StepContext | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers attention interface: query [1, H, T, D], key/value [1, KV, T, D] (after
    RoPE)."""
    import torch

    from kvplan.kernels.cache_ops import write_kv
    from kvplan.kernels.paged_attention import paged_attention
    from kvplan.kernels.paged_prefill import paged_prefill

    if kvplan_ctx is None:
        raise RuntimeError("kvplan paged attention needs a kvplan step context")
    ctx = kvplan_ctx
    cache = ctx.pool[module.layer_idx]
    variant = layer_variant(module, kwargs)
    eviction = ctx.eviction
    if eviction is not None:
        variant = eviction.variant(variant)
        ctx = eviction.layer_context(module.layer_idx, ctx)  # entropy-budget: the layer's own slots
        eviction.before_write(module.layer_idx, cache)
    q = query[0].transpose(0, 1)
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    common = dict(variant=variant, backend=ctx.backend, plan_cache=ctx.plan_cache)
    if ctx.kivi is not None:  # quantized blocks + residual, stored and read as KIVI does
        return ctx.kivi.attend(module.layer_idx, q, k, v, scale, ctx, common).to(q.dtype).unsqueeze(
            0
        ), None
    write_kv(
        k,
        v,
        cache.key_cache,
        cache.value_cache,
        ctx.slot_mapping,
        cache.fmt,
        cache.k_scale,
        cache.v_scale,
        backend=ctx.backend,
    )
    if eviction is not None:
        eviction.before_attention(module.layer_idx, cache, k, v, ctx.backend)
    common.update(fmt=cache.fmt, k_scale=cache.k_scale, v_scale=cache.v_scale)
    parts = []
    n = ctx.num_decode
    if n:
        parts.append(
            paged_attention(
                q[:n].contiguous(),
                cache.key_cache,
                cache.value_cache,
                ctx.decode_tables,
                ctx.decode_lens,
                scale,
                max_seq_len=ctx.decode_max_len,
                **common,
            )
        )
    if (
        q.shape[0] > n and eviction is not None and eviction.sinks is not None
    ):  # streaming (real/streaming.py)
        parts.append(
            eviction.sinks.prefill(
                module.layer_idx, cache, eviction.prefill_steps, q[n:], scale, common
            )
        )
    elif q.shape[0] > n:
        parts.append(
            paged_prefill(
                q[n:].contiguous(),
                cache.key_cache,
                cache.value_cache,
                ctx.prefill_tables,
                ctx.prefill_query_start,
                ctx.prefill_lens,
                scale,
                max_query_len=ctx.prefill_max_query,
                **common,
            )
        )
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    if eviction is not None:
        eviction.after_attention(module.layer_idx, cache, q, scale, len(ctx.pool))
    return out.to(q.dtype).unsqueeze(0), None


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention_forward)
