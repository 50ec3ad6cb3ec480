"""The one request record every workload produces and every engine consumes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request.

    prompt_tokens: real token ids when known (prefix caching hashes them); otherwise
    block_hashes: one id per `hash_block_tokens` prompt tokens, as traces such as Mooncake
    publish them (512 tokens per hash); otherwise neither (length-only workloads, whose
    prompts never share a prefix). output_tokens: the ids the request will generate, when a
    workload knows them (multi-turn chat: the next turn's prompt repeats them), so the
    engine can cache generated blocks as vLLM does.
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    prompt_tokens: tuple[int, ...] | None = None
    block_hashes: tuple[int, ...] | None = None
    hash_block_tokens: int = 0
    session_id: str | None = None
    n: int = 1  # parallel samples sharing the prompt
    output_tokens: tuple[int, ...] | None = None
    # prompt tokens whose KV arrives computed from another instance (disaggregated prefill:
    # the decode instance loads them, as vLLM's KV connectors report external tokens)
    transferred_tokens: int = 0

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(
                f"request {self.request_id}: prompt length must be at least 1, got "
                f"{self.prompt_len}"
            )
        if self.output_len < 1:
            raise ValueError(
                f"request {self.request_id}: output length must be at least 1, got "
                f"{self.output_len}"
            )
        if not self.arrival_s >= 0:  # also rejects NaN
            raise ValueError(
                f"request {self.request_id}: arrival time must be >= 0, got {self.arrival_s}"
            )
        if self.prompt_tokens is not None and len(self.prompt_tokens) != self.prompt_len:
            raise ValueError(
                f"request {self.request_id}: {len(self.prompt_tokens)} prompt tokens "
                f"but prompt_len {self.prompt_len}"
            )
        if self.block_hashes is not None and self.hash_block_tokens <= 0:
            raise ValueError(
                f"request {self.request_id}: block_hashes need a positive hash_block_tokens"
            )
        if self.output_tokens is not None and len(self.output_tokens) != self.output_len:
            raise ValueError(
                f"request {self.request_id}: {len(self.output_tokens)} output tokens "
                f"but output_len {self.output_len}"
            )
        if self.n < 1:
            raise ValueError(f"request {self.request_id}: n must be at least 1, got {self.n}")
        if not 0 <= self.transferred_tokens <= self.prompt_len:
            raise ValueError(
                f"request {self.request_id}: transferred_tokens must be within the prompt "
                f"(0..{self.prompt_len}), got {self.transferred_tokens}"
            )

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len
