"""entropy-budget: a total budget (--kv-budget x layers) split across layers in proportion
to each layer's attention entropy on a calibration text, H2O within each layer.

One block table serves every layer, so a sequence holds its largest layer budget in every
layer; layers with smaller budgets leave their tail slots unused: held, counted as
internal fragmentation, not token states (`used_tokens`). A simplification against
per-layer block tables (vLLM v1's KV-cache groups), which would hold each layer's own.
Without a probed split (simulated runs: no weights) every layer is charged the budget."""

from __future__ import annotations

from typing import Any

from kvplan.core.policies.base import SINKS
from kvplan.core.policies.h2o import H2O, NO_SCORES


def split_budget(total: int, entropies: list[float], floor: int = SINKS) -> list[int]:
    """Per-layer budgets proportional to entropy, each at least `floor`, summing to `total`
    (largest remainders get the leftover tokens)."""
    layers = len(entropies)
    spare = total - floor * layers
    if spare < 0:
        raise ValueError(
            f"a total budget of {total} cannot give {layers} layers {floor} tokens each"
        )
    weight = sum(entropies) or 1.0
    shares = [spare * e / weight for e in entropies]
    budgets = [floor + int(s) for s in shares]
    order = sorted(range(layers), key=lambda i: (-(shares[i] - int(shares[i])), i))
    for i in order[: total - sum(budgets)]:
        budgets[i] += 1
    return budgets


class EntropyBudget(H2O):
    name = "entropy-budget"
    help = "a total budget split across layers by attention entropy, H2O within each"
    order = 7
    splits_layers = True
    prefix_conflict = NO_SCORES.format("entropy-budget's H2O")

    def used_tokens(self, spec: Any, prompt_len: int, length: int) -> float:
        """The mean over layers of what each keeps (smaller layers leave slots unused)."""
        if spec.layer_budgets is None:
            return self.held_tokens(spec, prompt_len, length)
        return sum(min(length, budget) for budget in spec.layer_budgets) / len(spec.layer_budgets)
