"""`kvplan estimate`'s tables for one capacity plan: the KV cache size, the memory per GPU, the
verdict and, when it fits, the decode roofline."""

from __future__ import annotations

from rich.panel import Panel
from rich.table import Table

from kvplan import GIB
from kvplan.cli.common import console, escape, fmt_bytes, fmt_int
from kvplan.engines.engine_releases import SAMPLER_PATH_NAMES
from kvplan.engines.serving_engine import SERVING_ENGINES, SGLangEngine
from kvplan.sizing.capacity import CapacityPlan, engine_memory, smallest_tp_for_weights
from kvplan.spec.attention_group import (
    FullAttentionSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from kvplan.spec.roofline import Roofline


def render_plan(result: CapacityPlan) -> None:
    i = result.inputs
    m = i.model
    ctx = i.max_model_len
    moe = f", {m.params.active / 1e9:.1f}B active" if m.params.is_moe else ""
    console.print(
        f"[bold]{escape(m.name)}[/] ({m.kv_kind}, {m.params.total / 1e9:.2f}B params{moe}) on "
        f"{i.tp} x {i.gpu.display_name}, KV {i.kv_format.name}, context {ctx:,}, batch {i.batch}"
    )

    size = Table(title="KV cache size", show_header=False, title_justify="left")
    size.add_column(style="cyan")
    size.add_column(justify="right")
    size.add_column(style="dim")
    per_token = m.kv_bytes_per_token(i.kv_format)
    size.add_row(
        "KV per token (all layers)",
        f"{per_token:,.0f} B",
        "; ".join(g.describe() for g in m.groups),
    )
    if i.tp > 1:
        size.add_row("KV per token per GPU", f"{result.kv_bytes_per_token:,.0f} B", f"TP={i.tp}")
    naive = result.naive_kv_bytes_per_token
    if abs(naive - per_token) > 0.5:
        size.add_row(
            "naive 2 x layers x hidden",
            f"{naive:,.0f} B",
            f"{naive / per_token:.1f}x off: it ignores {_naive_gap(result)}",
        )
    applies = "every layer at full length" + (
        " (chosen)" if m.has_windows and not i.respect_windows else ""
    )
    if i.kv_budget is not None:  # the full size first, then what the eviction budget keeps
        size.add_row(
            f"one {ctx:,}-token sequence",
            fmt_bytes(result.seq_bytes_unbudgeted),
            "without --kv-budget, per GPU",
        )
        size.add_row(
            f"  kept under --kv-budget {i.kv_budget:,}",
            fmt_bytes(result.seq_bytes),
            f"each layer keeps at most {i.kv_budget:,} tokens (whole blocks); concurrency below "
            "uses this",
        )
    else:
        size.add_row(
            f"one {ctx:,}-token sequence", fmt_bytes(result.seq_bytes_full), applies + ", per GPU"
        )
    if i.kv_budget is None and (m.has_windows or result.seq_bytes_ideal != result.seq_bytes_full):
        chosen = " (chosen)" if i.respect_windows else ""
        size.add_row(
            "  ideal, windows kept",
            fmt_bytes(result.seq_bytes_ideal),
            f"sliding layers hold only their window{chosen}; vLLM's hybrid KV cache manager "
            "allocates this",
        )
    if m.state_bytes_per_seq(i.tp):
        size.add_row(
            "  of which per-sequence state",
            fmt_bytes(m.state_bytes_per_seq(i.tp)),
            "linear-attention layers",
        )
    size.add_row(f"batch of {i.batch}", fmt_bytes(result.seq_bytes * i.batch), "per GPU")
    console.print(size)

    memory = Table(title="Memory per GPU", show_header=False, title_justify="left")
    memory.add_column(style="cyan")
    memory.add_column(justify="right")
    memory.add_column(style="dim")
    profile = engine_memory(i)
    total_note = (
        "--gpu-mem-gib"
        if i.gpu_memory_gib
        else "driver total seen in a real log; kvplan profiles gpus"
        if i.gpu.driver_memory_gib
        else (
            f"datasheet {i.gpu.memory_gib:g} GiB x 15/16: inline GDDR ECC (driver total not "
            "observed)"
            if i.gpu.gddr_ecc
            else f"datasheet {i.gpu.memory_gib:g} GiB x 0.99 (driver total not observed)"
        )
    )
    memory.add_row(
        "usable",
        fmt_bytes(result.usable_bytes),
        f"{profile.total_bytes / GIB:.2f} GiB x {i.utilization} ({total_note})",
    )
    memory.add_row(
        "weights",
        fmt_bytes(result.weight_bytes_per_gpu),
        f"{m.weight_format_name(i.weight_dtype)}, / TP {i.tp}",
    )
    if i.reserve_bytes is not None:
        memory.add_row("reserve", fmt_bytes(result.reserve_bytes), "--reserve-gib")
    else:
        memory.add_row(
            "activation peak",
            fmt_bytes(profile.activation_bytes),
            f"profiling run: {profile.batched_tokens:,} tokens, sampler for "
            f"{profile.sampler_rows:,} sequences"
            + (f" ({SAMPLER_PATH_NAMES[profile.sampler_path]})" if profile.sampler_path else "")
            + (
                "; not modeled: the vision encoder's own profiling pass, which vLLM runs first "
                "unless "
                "--language-model-only"
                if m.params.vision and not isinstance(SERVING_ENGINES[profile.engine], SGLangEngine)
                else ""
            ),
        )
        memory.add_row(
            "non-torch memory",
            fmt_bytes(profile.non_torch_bytes),
            "CUDA context, loaded kernels (fitted)",
        )
        memory.add_row(
            "CUDA graphs",
            fmt_bytes(profile.cuda_graph_bytes),
            "counted before KV sizing" if profile.cuda_graph_bytes else "captured after KV sizing",
        )
    memory.add_row(
        "KV budget",
        fmt_bytes(result.kv_pool_bytes),
        f"{result.num_blocks:,} blocks of {fmt_bytes(result.block_bytes)}",
    )
    report = result.engine_report()
    budget_note = (
        f"each request keeps {i.kv_budget:,} tokens per layer (--kv-budget)" if i.kv_budget else ""
    )
    if report is not None and i.kv_budget is None:
        groups = (
            f"{report['kv_cache_groups']} KV cache groups, block {report['block_size']}"
            if "kv_cache_groups" in report
            else "SGLang's token pool"
        )
        memory.add_row(
            "GPU KV cache size",
            f"{report['reported_tokens']:,} tokens",
            f"as the engine logs it ({groups})",
        )
        memory.add_row(
            f"Maximum concurrency for {ctx:,} tokens per request",
            f"{report['reported_concurrency']:.2f}x",
            "as the engine logs it",
        )
        if (
            "true_concurrency" in report
            and abs(report["true_concurrency"] - report["reported_concurrency"]) > 0.005
        ):
            memory.add_row(
                "  concurrency once prefilled",
                f"{report['true_concurrency']:.2f}x",
                "sliding-window layers then hold only their window (kvplan)",
            )
    else:
        memory.add_row(
            "GPU KV cache size", f"{result.kv_cache_tokens:,} tokens", "blocks x block size"
        )
        memory.add_row(
            f"Maximum concurrency for {ctx:,} tokens per request",
            f"{result.max_concurrency:.2f}x",
            budget_note,
        )
    memory.add_row(f"largest batch at {ctx:,} tokens", fmt_int(result.max_batch), "")
    limit_note = "the model's maximum context" if result.max_context >= result.context_limit else ""
    memory.add_row(f"largest context at batch {i.batch}", fmt_int(result.max_context), limit_note)
    smallest = smallest_tp_for_weights(i)
    memory.add_row(
        "smallest TP that fits the weights", str(smallest) if smallest else "none up to 64", ""
    )
    console.print(memory)
    console.print(
        f"[dim]memory model: {i.serving_engine.rules}"
        f"{'; KV budget fixed by --kv-cache-gib' if i.kv_cache_bytes is not None else ''}[/]"
    )

    if result.fits:
        console.print(
            Panel(
                f"[bold green]FITS[/]: {i.batch} x {ctx:,} tokens on {i.tp} x {i.gpu.name}",
                expand=False,
            )
        )
        render_roofline(result)
    else:
        lines = [f"[bold red]DOES NOT FIT[/] ({result.verdict})", *result.reasons]
        lines += [f"  -> {tip}" for tip in result.suggestions]
        console.print(Panel("\n".join(lines), expand=False))


def _naive_gap(result: CapacityPlan) -> str:
    m = result.inputs.model
    kinds = []
    if m.has_group(MLAAttentionSpec):
        kinds.append("MLA's compressed latent")
    full = [g for g in m.groups if isinstance(g, (FullAttentionSpec, SlidingWindowSpec))]
    if full and full[0].num_kv_heads < m.num_heads:
        kinds.append(f"the {full[0].num_kv_heads} KV heads of {m.num_heads} query heads")
    if full and full[0].head_dim * m.num_heads != m.hidden_size:
        kinds.append(f"head_dim {full[0].head_dim} x {m.num_heads} heads != hidden {m.hidden_size}")
    if m.has_state:
        kinds.append("linear-attention layers that keep no per-token KV")
    return ", ".join(kinds) or "the model's KV layout"


def render_roofline(result: CapacityPlan) -> None:
    i = result.inputs
    roof = Roofline(i.model, i.gpu, i.tp, i.kv_format, i.weight_dtype, i.kv_budget)
    ctx = i.max_model_len
    kept = (
        f", {i.kv_budget:,} kept (--kv-budget)"
        if i.kv_budget is not None and i.kv_budget < ctx
        else ""
    )
    table = Table(
        title=f"Decode roofline at {ctx:,} tokens{kept} (lower bound, per replica of {i.tp} GPU)",
        title_justify="left",
        header_style="bold",
    )
    for column in ("batch", "ITL (ms)", "tokens/s", "bound"):
        table.add_column(column, justify="right")
    batches = sorted(
        {
            b
            for b in (1, 8, 32, 128, 512, i.batch, result.max_batch)
            if 1 <= b <= max(1, result.max_batch)
        }
    )
    for b in batches:
        step = roof.decode_step_time(b, ctx)
        bound = "memory" if roof.decode_memory_time(b, ctx) >= step * 0.999 else "compute"
        table.add_row(str(b), f"{step * 1e3:.2f}", f"{b / step:,.0f}", bound)
    console.print(table)
    console.print(
        f"[dim]prefill of {ctx:,} tokens >= {roof.prefill_time(ctx) * 1e3:,.1f} ms "
        f"({'FP8' if roof.uses_fp8_compute else 'BF16'} peak {roof.peak_flops / 1e12:,.0f} "
        "TFLOP/s, "
        f"HBM {i.gpu.hbm_tbps} TB/s; source: {i.gpu.source})[/]"
    )
