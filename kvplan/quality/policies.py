"""KV eviction / compression policies: which cached tokens each layer keeps.

Each selection is a pure function of what a layer holds (how many tokens, their
accumulated attention) and a token budget, returning the sorted indices to keep, so the
retained-token sets can be pinned on tiny inputs. Scores are the attention each cached
token received, summed over query heads (and over past queries for H2O).

- sliding-window: the most recent `budget` tokens.
- streaming (StreamingLLM, Xiao et al. 2023): the first 4 "sink" tokens + the most recent.
- h2o (Zhang et al. 2023): the most recent half of the budget + the heavy hitters
  (largest accumulated attention) among the older tokens.
- snapkv (Li et al. 2024): once, after the prompt: the observation window (last `window`
  prompt queries) votes over the earlier tokens, votes are max-pooled (kernel 7) and the
  top tokens plus the window are kept; later tokens are all kept.
- paged-eviction (block-wise, as PagedEviction 2025): while over budget, drop the whole
  block (of `block` tokens) with the lowest mean importance, never the newest block, so
  pages are actually freed.
- entropy-budget: a total budget split across layers in proportion to each layer's
  attention entropy (broad layers need more tokens), H2O selection within each layer.
"""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("sliding-window", "streaming", "h2o", "snapkv", "paged-eviction", "entropy-budget")
SINKS = 4


def keep_sliding(count: int, budget: int) -> list[int]:
    return list(range(max(0, count - budget), count))


def keep_streaming(count: int, budget: int, sinks: int = SINKS) -> list[int]:
    if count <= budget:
        return list(range(count))
    sinks = min(sinks, budget)
    return list(range(sinks)) + list(range(count - (budget - sinks), count))


def keep_h2o(scores: list[float], budget: int, recent: int | None = None) -> list[int]:
    count = len(scores)
    if count <= budget:
        return list(range(count))
    recent = budget // 2 if recent is None else min(recent, budget)
    older = range(count - recent)
    heavy = sorted(older, key=lambda i: (-scores[i], i))[: budget - recent]
    return sorted(heavy) + list(range(count - recent, count))


def keep_snapkv(votes: list[float], budget: int, window: int, kernel: int = 7) -> list[int]:
    """votes: attention the observation window paid to each earlier token (len = count - window)."""
    count = len(votes) + window
    if count <= budget:
        return list(range(count))
    half = kernel // 2
    pooled = [max(votes[max(0, i - half):i + half + 1]) for i in range(len(votes))]
    top = sorted(range(len(votes)), key=lambda i: (-pooled[i], i))[: max(0, budget - window)]
    return sorted(top) + list(range(len(votes), count))


def keep_paged(scores: list[float], positions: list[int], budget: int, block: int) -> list[int]:
    """Drop whole blocks (by absolute position // block) of lowest mean score until within budget."""
    kept = list(range(len(scores)))
    newest = positions[-1] // block if positions else 0
    while len(kept) > budget:
        blocks: dict[int, list[int]] = {}
        for index in kept:
            blocks.setdefault(positions[index] // block, []).append(index)
        candidates = [b for b in blocks if b != newest]
        if not candidates:
            break
        victim = min(candidates, key=lambda b: (sum(scores[i] for i in blocks[b]) / len(blocks[b]), b))
        dropped = set(blocks[victim])
        kept = [i for i in kept if i not in dropped]
    return kept


def split_budget(total: int, entropies: list[float], floor: int = SINKS) -> list[int]:
    """Per-layer budgets proportional to entropy, each at least `floor`, summing to `total`
    (largest remainders get the leftover tokens)."""
    layers = len(entropies)
    spare = total - floor * layers
    if spare < 0:
        raise ValueError(f"a total budget of {total} cannot give {layers} layers {floor} tokens each")
    weight = sum(entropies) or 1.0
    shares = [spare * e / weight for e in entropies]
    budgets = [floor + int(s) for s in shares]
    order = sorted(range(layers), key=lambda i: (-(shares[i] - int(shares[i])), i))
    for i in order[: total - sum(budgets)]:
        budgets[i] += 1
    return budgets


@dataclass(frozen=True)
class PolicySpec:
    name: str  # "full" or one of POLICIES
    budget: int | None = None  # tokens per layer (entropy-budget: the average per layer)
    window: int = 8  # snapkv observation window
    block: int = 16  # paged-eviction block size

    def __post_init__(self) -> None:
        if self.name != "full" and self.name not in POLICIES:
            raise ValueError(f"unknown policy '{self.name}'; use one of: full, {', '.join(POLICIES)}")
        if self.name != "full" and (self.budget is None or self.budget < SINKS + 1):
            raise ValueError(f"policy '{self.name}' needs a token budget above {SINKS} (--kv-budget)")
