"""The figures a finished real-mode engine adds to its run's metrics: the bytes its pool
holds, the device, what its eviction policy moved, KIVI's measured bytes and the measured
tier copies (real/factory.py's run_metrics adds the wall-clock time beside the estimate)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvplan.spec import parse_kv_format

if TYPE_CHECKING:
    from kvplan.core.engine import Engine
    from kvplan.real.loaded import LoadedModel


def engine_metrics(engine: Engine, loaded: LoadedModel) -> dict[str, Any]:
    """Bytes the pool holds, the device, and the measured tier copies (bandwidth, bytes)."""
    metrics: dict[str, Any] = {
        "kv_bytes_allocated": engine.runner.kv_bytes,  # type: ignore[attr-defined]
        "device": loaded.device,
    }
    spec = loaded.spec
    eviction = getattr(engine.runner, "eviction", None)
    if eviction is not None:  # slots moved inside the pool (holes refilled, prefill compaction)
        # in the simulator's unit, a slot of every layer and KV head (moves are per head and layer)
        heads = spec.token_groups[0].num_kv_heads
        sink_copies = eviction.sinks.copies * heads if eviction.sinks else 0
        metrics["eviction_copied_slots"] = round(
            (eviction.copied_slots + sink_copies) / (spec.num_layers * heads)
        )
        if eviction.spec.layer_budgets:
            metrics["layer_budgets"] = list(eviction.spec.layer_budgets)
        if eviction.compact_blocks:  # blocks held with holes left in place, per compacted block
            metrics["eviction_hole_blocks_ratio"] = eviction.hole_blocks / eviction.compact_blocks
    kivi = getattr(engine.runner, "kivi", None)
    if kivi is not None and kivi.measured:  # at each sequence's last step: tensors vs estimator
        group = spec.token_groups[0]
        full = next(loaded.model.parameters()).element_size()
        fmt = parse_kv_format(kivi.format_name, spec)
        finished = list(kivi.measured.values())
        metrics["kivi_bytes_per_seq_measured"] = sum(b for _, b in finished) / len(finished)
        metrics["kivi_bytes_per_seq_estimated"] = sum(
            spec.num_layers
            * group.num_kv_heads
            * fmt.kivi_sequence_bytes(tokens, group.head_dim, full)
            for tokens, _ in finished
        ) / len(finished)
    storage = engine.allocator.tiers.storage if engine.allocator.tiers is not None else None
    for direction, moved in storage.stats.items() if storage is not None else ():
        metrics[f"measured_{direction.replace('->', '_to_')}_gbps"] = moved.gb_per_s
        metrics[f"measured_{direction.replace('->', '_to_')}_bytes"] = moved.bytes
    return metrics
