"""Disaggregated prefill/decode (xPyD): a prefill pool computes each prompt's KV and first
token, the KV crosses a link to a decode pool, and the decode pool generates the rest.

As vLLM's P/D setups run it (a proxy in front, a KV connector such as NIXL between them):
the prefill instance gets the request with one output token; the decode instance gets the
whole request, loads the prompt's KV as external tokens and computes the last prompt token
again to sample (`Request.transferred_tokens`), so the user's first token comes from the
decode side, after the prefill, the transfer and one decode step.

Named simplifications (SIMPLIFICATIONS, which `kvplan plan --disagg` prints).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kvplan.core.engine import Engine
from kvplan.core.metrics import percentiles, request_metrics
from kvplan.core.summary import throughput
from kvplan.sim.cluster import RouterConfig, run_cluster
from kvplan.workload.request import Request

SIMPLIFICATIONS = (
    "the prefill pool frees a request's KV when its first token is out (vLLM holds it until the "
    "decode side has read it)",
    "the decode pool allocates the KV when the transfer ends (vLLM at its start)",
    "transfers do not contend for the link",
    "the decode pool serves no prefix-cache hits of its own (prefix caching is the prefill pool's)",
    "both pools use the same GPU type",
)


class Phase(Enum):
    """Which part of a request an engine serves."""

    WHOLE = "whole"  # aggregated serving: prefill and decode on one instance
    PREFILL = "prefill"  # the prompt and its first token only
    DECODE = "decode"  # the rest, with the prompt's KV computed elsewhere

    def requests(self, requests: list[Request]) -> list[Request]:
        if self is Phase.PREFILL:
            return [prefill_request(r) for r in requests]
        if self is Phase.DECODE:
            return [dataclasses.replace(r, transferred_tokens=r.prompt_len) for r in requests]
        return requests


def prefill_request(request: Request) -> Request:
    """What the P/D proxy sends the prefill instance: the prompt, one output token."""
    first = request.output_tokens[:1] if request.output_tokens else None
    return dataclasses.replace(request, output_len=1, output_tokens=first, n=1)


@dataclass(frozen=True)
class KvLink:
    """The KV transfer from a prefill replica to a decode replica: each GPU sends (or receives)
    its own shard, so a transfer takes latency + tokens x the larger side's per-GPU KV bytes
    per token / the per-GPU bandwidth."""

    bytes_per_token_per_gpu: float
    gbps: float  # GB/s per GPU, one direction
    latency_s: float

    def seconds(self, tokens: int) -> float:
        return self.latency_s + tokens * self.bytes_per_token_per_gpu / (self.gbps * 1e9)


def run_disaggregated(
    prefill_pods: list[Engine],
    decode_pods: list[Engine],
    requests: list[Request],
    link: KvLink,
    prefill_router: RouterConfig,
    block_size: int,
) -> dict[str, Any]:
    """Every request through the prefill pool, the link and the decode pool; the user's
    latencies (from the original arrival) and each pool's figures."""
    prefilled = run_cluster(
        prefill_pods, Phase.PREFILL.requests(requests), prefill_router, block_size
    )
    first_token = {
        seq.request.request_id: seq.served[0]
        for pod in prefill_pods
        for seq in pod.finished
        if seq.sample_index == 0
    }
    rejected = [r.request_id for r in requests if r.request_id not in first_token]
    transfer = {
        r.request_id: link.seconds(r.prompt_len) for r in requests if r.request_id in first_token
    }
    handed = [
        dataclasses.replace(
            r,
            arrival_s=first_token[r.request_id] + transfer[r.request_id],
            transferred_tokens=r.prompt_len,
        )
        for r in requests
        if r.request_id in first_token
    ]
    decoded = run_cluster(decode_pods, handed, RouterConfig("least-loaded"), block_size)
    finished = [seq for pod in decode_pods for seq in pod.finished]
    arrivals = {r.request_id: r.arrival_s for r in requests}
    start = min(arrivals.values(), default=0.0)
    makespan = max((seq.served[1] for seq in finished), default=start) - start
    return {
        **request_metrics(finished, arrivals),
        **throughput(finished, makespan),
        **percentiles(list(transfer.values()), "kv_transfer_s"),
        "requests_finished": decoded["requests_finished"],
        "requests_rejected": len(rejected) + decoded["requests_rejected"],
        "makespan_s": makespan,
        "kv_cache_usage_mean": decoded["kv_cache_usage_mean"],  # where KV capacity binds
        "prefill_kv_cache_usage_mean": prefilled["kv_cache_usage_mean"],
        "prefill_ttft_s_p90": prefilled["ttft_s_p90"],
        "decode_wait_s_p90": decoded["ttft_s_p90"],  # transfer's end to the first token
        "prefix_hit_rate": prefilled.get("prefix_hit_rate"),
        "preemptions": prefilled["preemptions"] + decoded["preemptions"],
        "prefill_pods": len(prefill_pods),
        "decode_pods": len(decode_pods),
    }
