"""`kvplan plan`'s ranked table for the terminal: one row per candidate, the winner and why."""

from __future__ import annotations

from rich.markup import escape

from kvplan.cli.common import console
from kvplan.cli.fit_table import RULED, fitted_table
from kvplan.deploy.search_status import SearchStatus


def _money(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 0.01:  # a KV transfer over NVLink: tenths of a millisecond
        return f"{value * 1000:.2f} ms"
    return f"{value * 1000:,.0f} ms" if value < 10 else f"{value:,.1f} s"


def _headroom(row: dict) -> str:
    upper = row["headroom_upper_rps"]
    return (
        f">={row['headroom_rps']:,.1f}/s"
        if upper is None
        else f"{row['headroom_rps']:,.1f}-{upper:,.1f}/s"
    )


def render_plan(data: dict, figures: list[str]) -> None:
    """The ranked table: the predicted figures the SLO names (and, on a wide terminal, p90 TTFT
    and TPOT, $/M tokens and KV use too)."""
    wide = console.width >= 120
    if wide:
        figures = list(dict.fromkeys([*figures, "ttft_s_p90", "tpot_s_p90"]))
    heads = [f"{name.split('_')[0].upper()} {name.split('_')[-1]}" for name in figures]
    columns = [
        "#",
        "GPUs",
        "deployment",
        "$/hour",
        *(["$/M tok"] if wide else []),
        *heads,
        *(["KV use"] if wide else []),
        "headroom",
        "why not",
    ]
    rows = []
    for i, row in enumerate(data["candidates"], 1):
        feasible = row["status"] == SearchStatus.OK
        mark = (
            "" if row["verified"] else "*"
        )  # figures of one replica at its capacity, not the cluster
        usage = row["predicted"].get("kv_cache_usage_mean")
        rows.append(
            [
                str(i),
                str(row["gpus"]) if feasible else "-",
                escape(row["layout"]),
                _money(row["usd_per_hour"]),
                *([_money(row["usd_per_million_output_tokens"], 3)] if wide else []),
                *[_ms(row["predicted"].get(name)) + mark if feasible else "-" for name in figures],
                *(
                    ["-" if usage is None or not feasible else f"{100 * usage:.0f}%"]
                    if wide
                    else []
                ),
                _headroom(row) if feasible else "-",
                escape(row["verdict"] or ""),
            ]
        )
    title = escape(
        f"{data['model']} at {data['rate_rps']:g} req/s of {data['workload']}, SLO {data['slo']}"
    )
    # the deployment and the reason wrap between words, the figures never do; on a narrow
    # terminal the columns spread over more tables, each led by the row's number, GPUs and
    # deployment (kvplan.cli.fit_table)
    text = ("deployment", "why not")
    console.print(
        fitted_table(title, columns, rows, console.width, text, key=3, wrap=text, look=RULED)
    )
    winner = data["candidates"][0] if data["winner"] is not None else None
    if winner is None:
        console.print(
            "[bold red]no candidate meets the SLO at this rate[/]; the table says why each failed: "
            "try more GPU types or TP sizes (--gpu, --tp), fp8 KV (--kv-dtype auto,fp8) or a "
            "looser --slo"
        )
    else:
        cost = (
            f" for {_money(winner['usd_per_hour'])}/hour"
            if winner["usd_per_hour"] is not None
            else " (no price given: ranked by GPU count)"
        )
        gpus = f"{winner['gpus']} GPU{'s' if winner['gpus'] > 1 else ''}{cost}"
        split = winner["disaggregated"]
        if split is None:
            why = (
                f"each replica sustains at least {winner['replica_capacity_rps']:.2f} req/s "
                "within the SLO, and a "
                f"cluster of {winner['replicas']} behind the {data['router']} router met it at "
                f"{data['rate_rps']:g} req/s"
            )
        else:
            transfer = split["kv_transfer_s_mean"]
            why = (
                f"{split['prefill_replicas']} prefill replica(s) at TP {split['prefill_tp']} and "
                f"{split['decode_replicas']} decode replica(s) at TP {split['decode_tp']}; the "
                "pipeline (KV transfer "
                f"{_ms(transfer)} on average) met the SLO at {data['rate_rps']:g} req/s"
            )
        console.print(f"[bold]winner:[/] {escape(winner['layout'])} = {gpus}: {why}.")
        band = winner.get("time_error_band") or {}
        if band.get("output_throughput_error") is not None:
            console.print(
                f"[dim]modeled times: held-out error for {band.get('kind', '')} models on "
                f"{band.get('gpu_family')} under {band.get('engine')} "
                f"±{100 * band['output_throughput_error']:.0f}% on tok/s"
                + (" (unvalidated GPU family)" if band.get("unvalidated") else "")
                + "[/]"
            )
    if any(row["disaggregated"] is not None for row in data["candidates"]):
        from kvplan.sim.disagg import SIMPLIFICATIONS

        console.print("[dim]disaggregated rows, simplified: " + "; ".join(SIMPLIFICATIONS) + "[/]")
    if any(row["status"] == SearchStatus.OK and not row["verified"] for row in data["candidates"]):
        console.print(
            "[dim]* not verified as a cluster: one replica's p90s at its own capacity, "
            "not at the target rate[/]"
        )
    console.print(
        f"[dim]{data['simulations']} simulations; replicas = the fewest n for which one replica "
        "meets "
        "the SLO at rate / n; 'cost >=' rows stopped once they could not beat the best (--json "
        "says why "
        "each row lost); headroom = replicas x per-replica capacity, between the highest rate "
        "seen to "
        "meet the SLO and the lowest seen to miss it[/]"
    )
