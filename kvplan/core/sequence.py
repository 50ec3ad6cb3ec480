"""A request's life inside the engine: tokens known, tokens whose KV is computed, timings."""

from __future__ import annotations

from enum import Enum

from kvplan.workload.request import Request


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"
    REJECTED = "rejected"


class Sequence:
    """Token accounting follows vLLM: a step computes `num_new` tokens' KV; when every known
    token (prompt + generated) has KV, the step samples the next token. So a decoding
    sequence holds prompt + generated - 1 tokens of KV, and a preempted one recomputes
    prompt + generated tokens."""

    __slots__ = (
        "request",
        "prompt_len",
        "output_len",
        "capacity",
        "status",
        "num_computed",
        "num_generated",
        "num_cached",
        "block_table",
        "extent",
        "first_token_s",
        "finish_s",
        "admitted_s",
        "preemptions",
        "reject_reason",
        "final_len",
        "hit_tokens",
        "swapped_blocks",
        "sample_index",
        "hashes",
        "cached_blocks",
        "dropped_blocks",
    )

    def __init__(self, request: Request, sample_index: int = 0) -> None:
        self.request = request
        self.prompt_len = request.prompt_len  # copied out of the request for the hot loop
        self.output_len = request.output_len
        self.capacity = 0  # slots the allocator currently holds for this sequence
        self.status = Status.WAITING
        self.num_computed = 0
        self.num_generated = 0
        self.num_cached = 0  # prompt tokens served from the prefix cache on the last admission
        self.block_table: list[int] = []
        self.extent: tuple[int, int] | None = None  # (start, length) for contiguous allocators
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.admitted_s: float | None = None
        self.preemptions = 0
        self.reject_reason: str | None = None
        self.final_len = request.prompt_len + request.output_len  # slots the oracle reserves
        self.hit_tokens = 0
        self.swapped_blocks = 0
        self.sample_index = sample_index  # parallel samples (n > 1) fork from sample 0
        self.hashes: list[int] | None = None  # full-block hashes, computed on first lookup
        self.cached_blocks = 0  # leading blocks of the table already registered in the cache
        self.dropped_blocks = 0  # old blocks an eviction budget released (their tokens are gone)

    @property
    def served(self) -> tuple[float, float]:
        """(first token, finish) times of a finished sequence."""
        if self.first_token_s is None or self.finish_s is None:
            raise ValueError(f"request {self.request.request_id} has not finished")
        return self.first_token_s, self.finish_s

    @property
    def known_tokens(self) -> int:
        return self.prompt_len + self.num_generated

    @property
    def pending_tokens(self) -> int:
        """Tokens whose KV the next steps must compute before the next sample."""
        return self.prompt_len + self.num_generated - self.num_computed

    @property
    def request_id(self) -> int:
        return self.request.request_id
