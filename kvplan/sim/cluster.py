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
from typing import Any, ClassVar

from kvplan.core.engine import Engine
from kvplan.core.hashing import block_hashes
from kvplan.core.kv import hit_rate
from kvplan.core.metric_registry import METRICS, REPORTED_BY_CLUSTER, ClusterRule, Metric
from kvplan.core.metrics import request_metrics
from kvplan.core.router_config import RouterConfig
from kvplan.core.summary import stream_load, throughput
from kvplan.workload.request import Request

PREFIX_HASH_BLOCKS = 4


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
    """Picks the pod for each request; one subclass per routing rule, found by its name."""

    name: ClassVar[str]

    def __init__(self, config: RouterConfig, pods: list[Engine], block_size: int) -> None:
        self.config = config
        self.pods = pods
        self.block_size = block_size
        self.turn = 0

    def choose(self, request: Request) -> int:
        raise NotImplementedError

    def next_in_turn(self) -> int:
        index = self.turn % len(self.pods)
        self.turn += 1
        return index


class RoundRobin(Router):
    name = "round-robin"

    def choose(self, request: Request) -> int:
        return self.next_in_turn()


class LeastLoaded(Router):
    name = "least-loaded"

    def choose(self, request: Request) -> int:
        return min(range(len(self.pods)), key=lambda i: (_load(self.pods[i]), i))


class Sticky(Router):
    name = "sticky"

    def choose(self, request: Request) -> int:
        if request.session_id is None:
            return self.next_in_turn()
        return _stable_hash(request.session_id) % len(self.pods)


class PrefixHash(Router):
    name = "prefix-hash"

    def choose(self, request: Request) -> int:
        hashes = block_hashes(request, self.block_size)[:PREFIX_HASH_BLOCKS]
        if not hashes:
            return self.next_in_turn()
        return _stable_hash(tuple(hashes)) % len(self.pods)


class KvAware(Router):
    name = "kv-aware"

    def choose(self, request: Request) -> int:
        # Filter, then score, as llm-d's scheduler does: pods with requests already waiting
        # for memory are skipped while any pod has room, so a popular prefix cannot pile
        # its whole traffic onto the pod that cached it first.
        candidates = [i for i, pod in enumerate(self.pods) if not pod.scheduler.waiting] or range(
            len(self.pods)
        )
        hashes = block_hashes(request, self.block_size)
        busiest = max(1, max(_load(self.pods[i]) for i in candidates))
        scores = [
            (
                self.config.w_hit * cached_prefix_fraction(self.pods[i], hashes)
                - self.config.w_load * _load(self.pods[i]) / busiest,
                -_load(self.pods[i]),
                -i,
            )
            for i in candidates
        ]
        return -max(scores)[2]


# each router by the name core.router_config.ROUTERS lists (the command line's help reads that
# list without loading the engine; tests/test_prefix.py holds the two equal)
ROUTER_CLASSES: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobin, LeastLoaded, Sticky, PrefixHash, KvAware)
}


def make_router(config: RouterConfig, pods: list[Engine], block_size: int) -> Router:
    return ROUTER_CLASSES[config.name](config, pods, block_size)


def run_cluster(
    pods: list[Engine],
    requests: list[Request],
    router_config: RouterConfig,
    block_size: int,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Route every request to a pod and run all pods to completion; cluster metrics."""
    router = make_router(router_config, pods, block_size)
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


def cluster_metrics(
    pods: list[Engine], assigned: list[int], requests: list[Request]
) -> dict[str, Any]:
    """The cluster's figures: each registered metric (kvplan.core.metric_registry) whose
    cluster rule reports it, in the registry's order; the rule of every other pod figure
    (POD_ONLY) says the cluster leaves it out, so none drops out unsaid."""
    pod_metrics = [pod.result().metrics for pod in pods]
    whole = _whole_cluster(pods, assigned, requests, pod_metrics)
    return {
        entry.name: _aggregate(entry, pod_metrics, whole)
        for entry in METRICS
        if entry.cluster in REPORTED_BY_CLUSTER
    }


def _whole_cluster(
    pods: list[Engine],
    assigned: list[int],
    requests: list[Request],
    pod_metrics: list[dict[str, Any]],
) -> dict[str, Any]:
    """The figures computed over the whole cluster (ClusterRule.CLUSTER): routing, the
    makespan, throughput and latencies over every pod's requests, the pooled hit rate."""
    finished = [seq for pod in pods for seq in pod.finished]
    rejected = [seq for pod in pods for seq in pod.rejected]
    ceilings = [m.get("sustainable_requests_per_s") for m in pod_metrics]
    start = min(r.arrival_s for r in requests) if requests else 0.0
    makespan = max((pod.now for pod in pods), default=start) - start
    queries = sum(m.get("prefix_cache_queries", 0) for m in pod_metrics)
    hits = sum(m.get("prefix_cache_hits", 0) for m in pod_metrics)
    mean = sum(assigned) / len(assigned) if assigned else 0.0
    return {
        "pods": len(pods),
        "makespan_s": makespan,
        "pod_requests": assigned,
        "load_imbalance": max(assigned) / mean if mean else 0.0,  # 1.0 = perfectly even
        "prefix_hit_rate": hit_rate(hits, queries),
        **throughput(finished, makespan),
        **request_metrics(finished),
        **stream_load(finished, rejected, [pod.step_metrics for pod in pods]),
        # the cluster's ceiling is its pods' together, known when every pod's is
        "sustainable_requests_per_s": (
            None if None in ceilings else sum(c for c in ceilings if c is not None)
        ),
    }


def _aggregate(entry: Metric, pod_metrics: list[dict[str, Any]], whole: dict[str, Any]) -> Any:
    match entry.cluster:
        case ClusterRule.SUM:
            return sum(m.get(entry.name, 0) for m in pod_metrics)
        case ClusterRule.POD_MEAN:
            return sum(m[entry.name] for m in pod_metrics) / len(pod_metrics)
        case ClusterRule.PER_POD:
            return [m.get(entry.per_pod_of) for m in pod_metrics]
        case ClusterRule.CLUSTER:
            return whole[entry.name]
    raise ValueError(f"a cluster does not report '{entry.name}' ({entry.cluster.value})")
