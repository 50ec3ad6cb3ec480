"""How one eviction policy is configured: pure data, shared by the quality evaluator, the
real serving engine and the simulator's memory model. What the policy does is its object's
(`spec.policy`, from the registry)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan.core.policies.base import SINKS, EvictionPolicy
from kvplan.core.policies.registry import lookup, policies
from kvplan.spec.setting_error import SettingError


@dataclass(frozen=True)
class PolicySpec:
    """`budget`: tokens each KV head of each layer holds at most while attending (strict:
    the step's own token included). entropy-budget: the average per layer, and
    `layer_budgets` its split (probed; sums to budget x layers); without one, every layer
    is charged `budget` (an even split: the simulator has no weights to probe)."""

    name: str  # "full" or a registered policy
    budget: int | None = None
    window: int = 8  # snapkv observation window (prompt queries that vote)
    kernel: int = 7  # snapkv max-pooling width
    block: int = 16  # paged-eviction block size
    layer_budgets: tuple[int, ...] | None = None  # entropy-budget: tokens per head in each layer
    policy: EvictionPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        policy = lookup(self.name)
        object.__setattr__(self, "policy", policy)
        if policy.evicts and (self.budget is None or self.budget < SINKS + 1):
            raise SettingError(
                "policy '{policy}' needs a token budget above {sinks} ({kv_budget})",
                policy=self.name,
                sinks=SINKS,
            )
        policy.check(self)
        if self.layer_budgets is not None:
            if not policy.splits_layers:
                splitting = ", ".join(
                    name for name, known in policies().items() if known.splits_layers
                )
                raise ValueError(f"per-layer budgets belong to {splitting}, not '{self.name}'")
            if (
                self.budget is None
                or sum(self.layer_budgets) != self.budget * len(self.layer_budgets)
                or min(self.layer_budgets) < 1
            ):
                raise SettingError(
                    "{policy}'s layer budgets {split} must be positive and sum to {kv_budget} x "
                    "layers",
                    policy=self.name,
                    split=list(self.layer_budgets),
                )

    @property
    def evicts(self) -> bool:
        return self.policy.evicts

    @property
    def held_budget(self) -> int | None:
        """Tokens per head a sequence's slots must hold in every layer: one block table
        serves all layers, so entropy-budget's largest layer budget sets it."""
        return max(self.layer_budgets) if self.layer_budgets else self.budget

    @property
    def keeps_holes(self) -> bool:
        return self.policy.keeps_holes

    @property
    def reindexes_positions(self) -> bool:
        return self.policy.reindexes_positions
