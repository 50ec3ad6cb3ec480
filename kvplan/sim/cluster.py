"""N engine instances ("pods"), each with its own KV pool, behind a request router.

Pods advance in simulated time: before routing a request, every pod runs the steps that
start before its arrival, so the router sees each pod's queue and prefix cache as they
are at that moment.

Routers: round-robin; least-loaded (fewest running + waiting requests); sticky (session
affinity by a stable hash of the session id); prefix-hash (a stable hash of the first
prompt blocks, so equal prefixes always meet - and a popular prefix makes a hot pod);
kv-aware (pods with requests waiting for memory are filtered out while another pod has
room, then score = w_hit x cached-prefix fraction - w_load x load, llm-d's published
defaults 0.8 / 0.2, with load = the pod's queue relative to the busiest candidate).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvplan.core.engine import Engine
from kvplan.core.hashing import block_hashes
from kvplan.core.kv import hit_rate
from kvplan.core.metrics import request_metrics
from kvplan.core.summary import throughput
from kvplan.workload.request import Request

ROUTERS = ("round-robin", "least-loaded", "sticky", "prefix-hash", "kv-aware")
PREFIX_HASH_BLOCKS = 4


@dataclass(frozen=True)
class RouterConfig:
    name: str = "round-robin"
    w_hit: float = 0.8  # llm-d's default weight for the prefix-cache scorer
    w_load: float = 0.2  # and for the load (queue) scorer

    def __post_init__(self) -> None:
        if self.name not in ROUTERS:
            raise ValueError(f"unknown router '{self.name}'; use one of: {', '.join(ROUTERS)}")


def _load(engine: Engine) -> int:
    return len(engine.scheduler.running) + len(engine.scheduler.waiting)


def _stable_hash(value: object) -> int:
    return zlib.crc32(repr(value).encode())  # str hashes are salted per process; this is not


def cached_prefix_fraction(engine: Engine, hashes: list[int]) -> float:
    """Share of the request's full prompt blocks the pod's prefix cache holds, as a chain."""
    if not hashes:
        return 0.0
    return engine.allocator.cached_prefix_blocks(hashes) / len(hashes)


class Router:
    def __init__(self, config: RouterConfig, pods: list[Engine], block_size: int) -> None:
        self.config = config
        self.pods = pods
        self.block_size = block_size
        self.turn = 0
        self.choose: Callable[[Request], int] = getattr(self, "_" + config.name.replace("-", "_"))

    def _round_robin(self, request: Request) -> int:
        index = self.turn % len(self.pods)
        self.turn += 1
        return index

    def _least_loaded(self, request: Request) -> int:
        return min(range(len(self.pods)), key=lambda i: (_load(self.pods[i]), i))

    def _sticky(self, request: Request) -> int:
        if request.session_id is None:
            return self._round_robin(request)
        return _stable_hash(request.session_id) % len(self.pods)

    def _prefix_hash(self, request: Request) -> int:
        hashes = block_hashes(request, self.block_size)[:PREFIX_HASH_BLOCKS]
        if not hashes:
            return self._round_robin(request)
        return _stable_hash(tuple(hashes)) % len(self.pods)

    def _kv_aware(self, request: Request) -> int:
        # Filter, then score, as llm-d's scheduler does: pods with requests already waiting
        # for memory are skipped while any pod has room, so a popular prefix cannot pile
        # its whole traffic onto the pod that cached it first.
        candidates = [i for i, pod in enumerate(self.pods) if not pod.scheduler.waiting] or range(len(self.pods))
        hashes = block_hashes(request, self.block_size)
        busiest = max(1, max(_load(self.pods[i]) for i in candidates))
        scores = [(self.config.w_hit * cached_prefix_fraction(self.pods[i], hashes)
                   - self.config.w_load * _load(self.pods[i]) / busiest, -_load(self.pods[i]), -i) for i in candidates]
        return -max(scores)[2]


def run_cluster(pods: list[Engine], requests: list[Request], router_config: RouterConfig, block_size: int,
                progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Route every request to a pod and run all pods to completion; cluster metrics."""
    router = Router(router_config, pods, block_size)
    assigned = [0] * len(pods)
    for pod in pods:
        pod.progress = progress
    for request in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
        for pod in pods:
            pod.advance(request.arrival_s)
        index = router.choose(request)
        assigned[index] += 1
        pods[index].submit(request)
    for pod in pods:
        pod.advance(math.inf)
    return cluster_metrics(pods, assigned, requests)


def cluster_metrics(pods: list[Engine], assigned: list[int], requests: list[Request]) -> dict[str, Any]:
    results = [pod.result() for pod in pods]
    finished = [seq for pod in pods for seq in pod.finished]
    start = min(r.arrival_s for r in requests) if requests else 0.0
    makespan = max((pod.now for pod in pods), default=start) - start
    queries = sum(r.metrics.get("prefix_cache_queries", 0) for r in results)
    hits = sum(r.metrics.get("prefix_cache_hits", 0) for r in results)
    mean = sum(assigned) / len(assigned) if assigned else 0.0
    rates = throughput(finished, makespan)
    pod_running = [r.metrics["running_mean"] for r in results]
    metrics: dict[str, Any] = {
        "pods": len(pods),
        "requests_finished": sum(r.metrics["requests_finished"] for r in results),
        "requests_rejected": sum(r.metrics["requests_rejected"] for r in results),
        "makespan_s": makespan,
        "pod_requests": assigned,
        "pod_running_mean": pod_running,
        "pod_prefix_hit_rate": [r.metrics.get("prefix_hit_rate") for r in results],
        "pod_kv_cache_usage_mean": [r.metrics["kv_cache_usage_mean"] for r in results],
        "load_imbalance": max(assigned) / mean if mean else 0.0,  # 1.0 = perfectly even
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_hit_rate": hit_rate(hits, queries),
        "output_tokens_per_s": rates["output_tokens_per_s"],
        "requests_per_s": rates["requests_per_s"],
        "preemptions": sum(r.metrics["preemptions"] for r in results),
        "running_mean": sum(pod_running),
        "kv_cache_usage_mean": sum(r.metrics["kv_cache_usage_mean"] for r in results) / len(results),
        **request_metrics(finished),
    }
    for key in ("token_states_share", "reservation_share", "internal_fragmentation_share",
                "external_fragmentation_share", "cached_share", "free_share", "waste", "sharing_savings"):
        metrics[key] = sum(r.metrics[key] for r in results) / len(results)
    return metrics
