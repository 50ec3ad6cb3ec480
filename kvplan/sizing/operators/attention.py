"""Attention as operators: one class per kind of attention group, as vLLM has one KV cache
spec per kind (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec,
MambaSpec), each saying what a decode and a prefill chunk read and compute on one GPU.

A decode reads every KV byte its query sees (the window, for a window) and computes QK^T and
PV over it; a prefill chunk of `new` tokens after `before` computed ones computes the causal
pairs it sees and reads the keys and values once. MLA decodes in the latent space and
prefills with the keys and values up-projected (kvplan.spec.attention_group.AttentionGroup). A
linear-attention or state-space layer reads and writes its per-sequence state once a step.
The image cross-attention of a vision model holds no text token and costs a text step nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.spec import KVFormat, ModelSpec
from kvplan.spec.attention_group import (
    AttentionGroup,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    IndexerSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)


@dataclass(frozen=True)
class AttentionOp:
    group: AttentionGroup
    heads_per_gpu: float
    kv_heads_per_gpu: int
    bytes_per_token: float  # KV bytes of one token across the group's layers on this GPU
    state_bytes: float  # per-sequence state across the group's layers (state kind)
    decode_flops_per_pair: float  # across the group's layers
    prefill_flops_per_pair: float
    up_projection_flops: float  # MLA prefill, per context token
    kv_format: KVFormat

    @property
    def layers(self) -> int:
        return self.group.num_layers

    def seen(self, context: int) -> int:
        """Tokens a query at position `context` attends to."""
        return context

    def decode_bytes(self, context: int) -> float:
        return self.seen(context) * self.bytes_per_token

    def decode_flops(self, context: int) -> float:
        return self.seen(context) * self.decode_flops_per_pair

    def prefill_pairs(self, new: int, before: int) -> int:
        """(query, key) pairs of a causal chunk of `new` tokens after `before` tokens."""
        return new * before + new * (new + 1) // 2

    def prefill_flops(self, new: int, before: int) -> float:
        pairs = self.prefill_pairs(new, before)
        return (
            pairs * self.prefill_flops_per_pair + self.seen(before + new) * self.up_projection_flops
        )

    def prefill_bytes(self, new: int, before: int) -> float:
        return (self.seen(before + new) + new) * self.bytes_per_token


class FullAttention(AttentionOp):
    pass


class SlidingAttention(AttentionOp):
    def seen(self, context: int) -> int:
        return min(context, self.group.window or context)

    def prefill_pairs(self, new: int, before: int) -> int:
        return min(super().prefill_pairs(new, before), new * (self.group.window or new))


class ChunkedAttention(SlidingAttention):
    """Llama-4's chunked local attention: a query sees its own chunk, at most one chunk."""


class MlaAttention(AttentionOp):
    pass


class IndexerKeys(AttentionOp):
    """DeepSeek sparse attention's indexer: every query scores every earlier key."""


class StateUpdate(AttentionOp):
    """Linear attention or a state-space layer: its state is read and written each step."""

    def seen(self, context: int) -> int:
        return 0

    def decode_bytes(self, context: int) -> float:
        return 2 * self.state_bytes

    def prefill_bytes(self, new: int, before: int) -> float:
        return 2 * self.state_bytes


OPS_BY_SPEC: dict[type[AttentionGroup], type[AttentionOp]] = {
    FullAttentionSpec: FullAttention,
    SlidingWindowSpec: SlidingAttention,
    ChunkedLocalAttentionSpec: ChunkedAttention,
    MLAAttentionSpec: MlaAttention,
    IndexerSpec: IndexerKeys,
    MambaSpec: StateUpdate,
}
# a profile table names each attention operator by its class
OPS_BY_NAME: dict[str, type[AttentionOp]] = {op.__name__: op for op in OPS_BY_SPEC.values()}


def attention_ops(model: ModelSpec, tp: int, kv_format: KVFormat) -> tuple[AttentionOp, ...]:
    """One operator per attention group of the decoder (cross-attention groups hold image
    tokens only and are left out)."""
    heads = model.num_heads / tp
    ops = []
    for group in model.groups:
        kind = OPS_BY_SPEC[type(group)]
        kv_heads = max(1, group.num_kv_heads // tp) if group.num_kv_heads else 0
        ops.append(
            kind(
                group,
                heads,
                kv_heads,
                group.bytes_per_token(kv_format, tp),
                # the state is sharded by heads across the ranks, as vLLM's MambaSpec is
                group.num_layers * group.state_bytes_per_layer / tp,
                group.attention_flops_per_pair(heads, prefill=False),
                group.attention_flops_per_pair(heads, prefill=True),
                group.up_projection_flops_per_token(heads),
                kv_format,
            )
        )
    return tuple(ops)
