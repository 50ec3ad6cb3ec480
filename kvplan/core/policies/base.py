"""An eviction policy as one object: what it keeps (selection), what it holds in the paged
pool step by step (the memory model the simulator charges and the real engine's block
tables follow), how it composes with prefix caching and real mode, and its help line.

Each policy is one subclass in its own module of this package; `registry.py` finds them.
The class attributes say how the engines treat the policy, so no engine compares names:

- `compacts`: kept tokens are moved to the front of the sequence's slots (one copy per
  evicted token) so tail blocks free; otherwise tokens stay at their positions and blocks
  free as a window slides past them (`sinks` tokens at the start stay too).
- `keeps_holes`: evicted tokens leave holes in place (no copies, no block frees).
- `scores_attention`: the kept set depends on attention each token received (per KV head).
- `selects_after_prompt`: one selection once the prompt is read (SnapKV), nothing before.
- `splits_layers`: a total budget split across layers by a probe of the model.
- `prefix_conflict` / `real_refusal` / `fork_refusal`: why it cannot share prefix-cache
  blocks / run in the real engine's pool / serve parallel samples; None where it can.

Selection and the memory model are numpy and arithmetic only (numpy imported where used,
so the CLI's help reads names and help lines without loading it).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from kvplan import cdiv


class PolicySettings(Protocol):
    """What a policy reads of its configuration (spec.py's PolicySpec, which looks policies up
    in the registry): the budget and each policy's own knobs."""

    @property
    def name(self) -> str: ...
    @property
    def budget(self) -> int | None: ...
    @property
    def window(self) -> int: ...
    @property
    def kernel(self) -> int: ...
    @property
    def block(self) -> int: ...
    @property
    def layer_budgets(self) -> tuple[int, ...] | None: ...
    @property
    def held_budget(self) -> int | None: ...


SINKS = 4  # StreamingLLM's attention sinks; also every policy's smallest budget


class EvictionPolicy:
    name: ClassVar[str]
    help: ClassVar[str]  # one line for the CLI's help and the docs
    order: ClassVar[int | None] = (
        None  # place in listings (help, errors); None: not a listed policy
    )
    compacts: ClassVar[bool] = True
    keeps_holes: ClassVar[bool] = False
    sinks: ClassVar[int] = 0
    scores_attention: ClassVar[bool] = True
    selects_after_prompt: ClassVar[bool] = False
    splits_layers: ClassVar[bool] = False
    reindexes_positions: ClassVar[bool] = False  # the quality evaluator re-rotates cached keys
    prefix_conflict: ClassVar[str | None] = None
    real_refusal: ClassVar[str | None] = None
    fork_refusal: ClassVar[str | None] = None  # why parallel samples (--samples > 1) cannot run

    @property
    def evicts(self) -> bool:
        return True

    @property
    def positional(self) -> bool:
        """Every held slot keeps its own token (no moves, no sink copies): blocks may be shared."""
        return not self.compacts and not self.keeps_holes and self.sinks == 0

    def check(self, spec: PolicySettings) -> None:
        """Settings this policy refuses beyond the common budget check."""

    # -- the memory model: counts per KV head and layer; `length`: tokens written ------------

    def held_tokens(self, spec: PolicySettings, prompt_len: int, length: int) -> int:
        """Tokens each head holds once the step that wrote token `length` is done."""
        budget = spec.held_budget
        if budget is None or length <= budget:
            return length
        return self.held_over_budget(spec, prompt_len, length, budget)

    def held_over_budget(
        self, spec: PolicySettings, prompt_len: int, length: int, budget: int
    ) -> int:
        return budget

    def attended_tokens(self, spec: PolicySettings, prompt_len: int, length: int) -> int:
        """Tokens the step writing token `length` attends to: strict budgets prune before
        attending, so what the sequence holds after the step."""
        return self.held_tokens(spec, prompt_len, length)

    def peak_held_tokens(self, spec: PolicySettings, prompt_len: int, length: int) -> int:
        """The most tokens held at any point while writing `length` tokens one by one."""
        return self.held_tokens(spec, prompt_len, length)

    def used_tokens(self, spec: PolicySettings, prompt_len: int, length: int) -> float:
        """Token states the held slots carry, per slot of every layer."""
        return self.held_tokens(spec, prompt_len, length)

    def held_blocks(
        self, spec: PolicySettings, prompt_len: int, length: int, block_size: int
    ) -> int:
        """Pool blocks the sequence holds after writing token `length`."""
        if length <= 0:
            return 0
        if self.keeps_holes:
            return cdiv(length, block_size)
        return cdiv(self.held_tokens(spec, prompt_len, length), block_size)

    # -- selection --------------------------------------------------------------------------

    def keep(self, spec: PolicySettings, scores: Any, positions: Any, budget: int) -> Any:
        """Kept indices, sorted: [heads, k] per head, or one list every head keeps. `scores`
        (attention received) and `positions` are [heads, n], each head's tokens in position
        order; `budget`: tokens each head may keep."""
        raise NotImplementedError(f"{self.name} selects once after the prompt, not per step")

    def keep_after_prompt(self, spec: PolicySettings, votes: Any, window: int) -> Any:
        """Policies that select once the prompt is read: kept indices [heads, k] from the
        attention the last `window` prompt queries paid to each earlier token."""
        raise NotImplementedError(f"{self.name} selects per step")


class KeepAll(EvictionPolicy):
    """The full cache: every token kept (the spec of runs without a policy)."""

    name = "full"
    help = "the full cache"
    compacts = False
    scores_attention = False

    @property
    def evicts(self) -> bool:
        return False

    def held_tokens(self, spec: PolicySettings, prompt_len: int, length: int) -> int:
        return length


class WindowPolicy(EvictionPolicy):
    """Tokens stay at their positions: the newest `budget - sinks` plus the first `sinks`.
    A block frees as the window slides past it; the sink block stays."""

    compacts = False
    scores_attention = False

    def keep(self, spec: PolicySettings, scores: Any, positions: Any, budget: int) -> list[int]:
        count = len(positions[0])
        if count <= budget:
            return list(range(count))
        sinks = min(self.sinks, budget)
        return list(range(sinks)) + list(range(count - (budget - sinks), count))

    def held_blocks(
        self, spec: PolicySettings, prompt_len: int, length: int, block_size: int
    ) -> int:
        if length <= 0:
            return 0
        held = self.held_tokens(spec, prompt_len, length)
        if held >= length:
            return cdiv(held, block_size)
        first = self.window_start(length, held)
        window = (length - 1) // block_size - first // block_size + 1
        if self.sinks and first // block_size > 0:
            window += 1  # the sink block
        return window

    def window_start(self, length: int, held: int) -> int:
        """The first token position the window holds (the sinks aside)."""
        return length - (held - min(self.sinks, held))


def top_indices(scores: Any, count: int) -> Any:
    """Per row, the indices of the `count` largest scores (ties: the earlier token), sorted."""
    import numpy as np

    order = np.argsort(-scores, axis=-1, kind="stable")[..., :count]
    return np.sort(order, axis=-1)
