"""Which eviction policies exist and how one is configured: pure data, shared by the
quality evaluator, the real serving engine and the simulator's memory model."""

from __future__ import annotations

from dataclasses import dataclass

# `streaming` re-indexes positions inside the cache as StreamingLLM does (a kept token's
# position is its slot in the cache); `streaming-abspos` keeps each token's original
# position, a named variant, not the paper's method. `h2o-holes` selects as h2o does but
# leaves each evicted token's hole in its block instead of compacting (no copies; a block
# frees only once it empties in every head of every layer): the other paged layout the
# issue asks to measure, as internal fragmentation.
POLICIES = ("sliding-window", "streaming", "streaming-abspos", "h2o", "h2o-holes", "snapkv", "paged-eviction",
            "entropy-budget")
SINKS = 4  # StreamingLLM's attention sinks
# Policies whose kept set depends on attention (per KV head); the rest depend on positions only.
ATTENTION_POLICIES = ("h2o", "h2o-holes", "snapkv", "paged-eviction", "entropy-budget")


@dataclass(frozen=True)
class PolicySpec:
    """`budget`: tokens each KV head of each layer holds at most while attending (strict:
    the step's own token included). entropy-budget: the average per layer, and
    `layer_budgets` its split (probed; sums to budget x layers); without one, every layer
    is charged `budget` (an even split: the simulator has no weights to probe)."""

    name: str  # "full" or one of POLICIES
    budget: int | None = None
    window: int = 8  # snapkv observation window (prompt queries that vote)
    kernel: int = 7  # snapkv max-pooling width
    block: int = 16  # paged-eviction block size
    layer_budgets: tuple[int, ...] | None = None  # entropy-budget: tokens per head in each layer

    def __post_init__(self) -> None:
        if self.name != "full" and self.name not in POLICIES:
            raise ValueError(f"unknown policy '{self.name}'; use one of: full, {', '.join(POLICIES)}")
        if self.name != "full" and (self.budget is None or self.budget < SINKS + 1):
            raise ValueError(f"policy '{self.name}' needs a token budget above {SINKS} (--kv-budget)")
        if self.name == "snapkv" and self.budget is not None and self.budget <= self.window:
            raise ValueError(f"snapkv keeps its {self.window}-query observation window: the budget must exceed it")
        if self.layer_budgets is not None:
            if self.name != "entropy-budget":
                raise ValueError(f"per-layer budgets belong to entropy-budget, not '{self.name}'")
            if self.budget is None or sum(self.layer_budgets) != self.budget * len(self.layer_budgets) \
                    or min(self.layer_budgets) < 1:
                raise ValueError(f"entropy-budget's layer budgets {list(self.layer_budgets)} must be positive and sum "
                                 f"to --kv-budget x layers")

    @property
    def evicts(self) -> bool:
        return self.name != "full"

    @property
    def held_budget(self) -> int | None:
        """Tokens per head a sequence's slots must hold in every layer: one block table
        serves all layers, so entropy-budget's largest layer budget sets it."""
        return max(self.layer_budgets) if self.layer_budgets else self.budget

    @property
    def keeps_holes(self) -> bool:
        return self.name == "h2o-holes"

    @property
    def reindexes_positions(self) -> bool:
        return self.name == "streaming"
