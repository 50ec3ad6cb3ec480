"""How many token slots a sequence holds under each policy, step by step: the memory model
the simulator charges and the real engine's block tables follow (a closed-loop test pins
the two together).

Counts are per KV head and layer (every head holds the same number: per-head selection
keeps `budget` tokens in each). `length` is how many tokens the sequence has written.

Where tokens sit in the paged pool:
- window policies (sliding-window, streaming*) keep tokens at their own position, so a
  block frees as the window slides past it; streaming keeps the sink block;
- paged-eviction drops whole blocks by position;
- h2o / snapkv / entropy-budget keep different tokens in different heads; the pool holds
  them compacted (each head's kept tokens moved to the front, a copy per evicted token,
  charged as time), so ceil(held / block_size) blocks.
- h2o-holes leaves each hole where it was: a block frees only once no head of any layer
  keeps a token of it. Without attention scores the simulator cannot tell when that is, so
  it charges the bound where heavy hitters can sit in any old block: every written block
  stays, its holes counted as internal fragmentation (named as a bound; real mode
  measures the blocks holes would hold on its h2o runs: eviction_hole_blocks_ratio).
entropy-budget keeps a different budget in each layer, but a block (and a slot) spans every
layer and one block table serves them all, so a sequence holds its largest layer budget in
every layer; layers with smaller budgets leave their tail slots unused: held, counted as
internal fragmentation, not token states (`used_tokens`). A simplification against
per-layer block tables (vLLM v1's KV-cache groups), which would hold each layer's own.
Without a probed split (simulated runs: no weights) every layer is charged the budget.
"""

from __future__ import annotations

from kvplan import cdiv
from kvplan.core.policies.spec import SINKS, PolicySpec

WINDOW_POLICIES = ("sliding-window", "streaming", "streaming-abspos")


def held_tokens(spec: PolicySpec, prompt_len: int, length: int) -> int:
    """Tokens each head holds once the step that wrote token `length` is done."""
    budget = spec.held_budget
    if not spec.evicts or budget is None or length <= budget:
        return length
    if spec.name == "snapkv":  # the prompt is compressed once, later tokens all kept
        if length < prompt_len:
            return length
        return min(prompt_len, budget) + (length - prompt_len)
    if spec.name == "paged-eviction":
        dropped_blocks = min(cdiv(length - budget, spec.block), (length - 1) // spec.block)
        return length - dropped_blocks * spec.block
    return budget


def used_tokens(spec: PolicySpec, prompt_len: int, length: int) -> float:
    """Token states the sequence's held slots carry, per slot of every layer: the mean over
    layers of what each layer keeps (entropy-budget's smaller layers leave slots unused)."""
    if spec.layer_budgets is None or not spec.evicts:
        return held_tokens(spec, prompt_len, length)
    return sum(min(length, budget) for budget in spec.layer_budgets) / len(spec.layer_budgets)


def attended_tokens(spec: PolicySpec, prompt_len: int, length: int) -> int:
    """Tokens the step writing token `length` attends to: what it holds after the step
    (strict budgets prune before attending, so never budget + 1), except that snapkv reads
    its whole prompt before compressing it."""
    if spec.name == "snapkv" and length <= prompt_len:
        return length
    return held_tokens(spec, prompt_len, length)


def held_blocks(spec: PolicySpec, prompt_len: int, length: int, block_size: int) -> int:
    """Pool blocks the sequence holds after writing token `length`."""
    if length <= 0:
        return 0
    if spec.keeps_holes:
        return cdiv(length, block_size)
    held = held_tokens(spec, prompt_len, length)
    if spec.name in WINDOW_POLICIES and held < length:
        first = length - held if spec.name == "sliding-window" else length - (held - min(SINKS, held))
        window = (length - 1) // block_size - first // block_size + 1
        if spec.name != "sliding-window" and first // block_size > 0:
            window += 1  # the sink block
        return window
    return cdiv(held, block_size)  # compacted; paged-eviction: whole old blocks + the newest


def peak_held_tokens(spec: PolicySpec, prompt_len: int, length: int) -> int:
    """The most tokens held at any point while writing `length` tokens one by one."""
    if spec.name == "snapkv":
        return max(min(length, prompt_len), held_tokens(spec, prompt_len, length))
    return held_tokens(spec, prompt_len, length)
