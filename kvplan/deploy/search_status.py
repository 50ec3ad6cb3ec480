"""The plan search's vocabulary, light enough for the command line's modules (no engine):
where one candidate's search ended, and how many requests a trial sends."""

from __future__ import annotations

from enum import StrEnum


class SearchStatus(StrEnum):
    """Where one candidate's search ended; the text is what plan.json carries."""

    OK = "ok"  # searched: the fewest replicas found
    MEMORY = "memory"  # does not fit: weights, or one request
    LATENCY = "latency"  # misses the SLO with no queue, or at every replica count tried
    COST = "cost"  # pruned: it cannot beat the best plan found
    GPUS = "gpus"  # needs more GPUs than --max-gpus
    CLUSTER = "cluster"  # its replicas meet the SLO alone, the cluster does not


# requests per replica and trial (Demand.num_requests, `kvplan plan --num-requests`)
TRIAL_REQUESTS = 300
