"""Where one candidate's search ended, light enough for the plan table's module: no engine."""

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
