"""`kvplan plan`: how many of which GPUs serve a traffic within an SLO. The question
(`demand.py`), the per-candidate search for the fewest replicas (`replica_search.py`, its
trials in `trials.py`), branch and bound over candidates with the cluster check
(`deploy_plan.py`, rows in `plan_rows.py`), disaggregated pools (`disagg_plan.py`), SLOs,
prices and the plan's output. It runs kvplan bench's simulated engine (kvplan.bench)."""
