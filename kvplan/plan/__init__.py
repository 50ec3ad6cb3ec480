"""The analytic estimator: KV bytes, GPU fit, blocks and concurrency, the decode roofline, and
vectorized sweeps over all of them. Imports only kvplan.spec (and numpy)."""
