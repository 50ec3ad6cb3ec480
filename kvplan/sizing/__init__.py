"""The analytic estimator: KV bytes, GPU fit, blocks and concurrency through each engine's
rules (kvplan.engines), vectorized sweeps over all of them, and the operators one forward pass
runs (`operators/`), which the step model times."""
