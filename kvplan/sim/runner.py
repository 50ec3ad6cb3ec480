"""Runners execute a step plan and say how long it took.

SimulatedRunner charges each step what the roofline model of the target GPU says: the
weights and KV bytes read over HBM bandwidth, or the FLOPs over peak compute, whichever
is larger, plus swap traffic over the host link. Real mode (kvplan.real.runner)
measures wall-clock time instead; both take the same StepPlan.
"""

from __future__ import annotations

from kvplan.core.scheduler import StepPlan
from kvplan.spec.roofline import Roofline


class SimulatedRunner:
    mode = "simulated"

    def __init__(self, roofline: Roofline, host_link_bytes_per_s: float | None = None) -> None:
        self.roofline = roofline
        model, fmt, tp = roofline.model, roofline.kv_format, roofline.tp
        self.slot_bytes = model.kv_bytes_per_token(fmt, tp)
        # Per attention group: (window or None, KV bytes per token, attention FLOPs per query-key
        # pair of a decode and of a prefill; they differ for MLA,
        # AttentionGroup.attention_flops_per_pair).
        heads = model.num_heads / tp
        self.groups = [
            (
                g.window,
                g.bytes_per_token(fmt, tp),
                g.attention_flops_per_pair(heads, prefill=False),
                g.attention_flops_per_pair(heads, prefill=True),
            )
            for g in model.token_groups
        ]
        self.windowed = any(group[0] for group in self.groups)
        self.read_bytes_per_token = sum(group[1] for group in self.groups)
        self.decode_flops_per_pair = sum(group[2] for group in self.groups)
        self.prefill_flops_per_pair = sum(group[3] for group in self.groups)
        self.up_projection_flops = sum(
            g.up_projection_flops_per_token(heads) for g in model.token_groups
        )
        self.host_link = host_link_bytes_per_s or roofline.gpu.host_link_gbps * 1e9

    def attention_costs(self, plan: StepPlan) -> tuple[float, float]:
        """KV bytes read and attention FLOPs of the step, each sequence at its own context
        (shared with kvplan.sim.step_model)."""
        if self.windowed:
            return self._windowed_costs(plan)
        decode = plan.decode_pairs
        flops = (
            decode * self.decode_flops_per_pair
            + (plan.attention_pairs - decode) * self.prefill_flops_per_pair
            + plan.prefill_context * self.up_projection_flops
        )
        return plan.context_tokens * self.read_bytes_per_token, flops

    def step_time(self, plan: StepPlan) -> float:
        """Modeled seconds for one step (the plan's tokens are not yet counted as computed)."""
        kv_bytes, flops = self.attention_costs(plan)
        seconds = self.roofline.step_time(plan.num_tokens, flops, kv_bytes)
        swapped = plan.swapped_in_slots + plan.swapped_out_slots
        if swapped:
            seconds += swapped * self.slot_bytes / self.host_link
        return seconds + plan.transfer_s

    def _windowed_costs(self, plan: StepPlan) -> tuple[float, float]:
        kv_bytes = flops = 0.0
        for seq, count in plan.scheduled:
            before = seq.num_computed
            after = before + count
            for window, bytes_per_token, decode_flops, prefill_flops in self.groups:
                seen = min(after, window) if window else after
                kv_bytes += seen * bytes_per_token
                # Each new token attends to at most `window` earlier tokens.
                pairs = count * before + count * (count + 1) // 2
                if window:
                    pairs = min(pairs, count * window)
                flops += pairs * (decode_flops if count == 1 else prefill_flops)
        return kv_bytes, flops
