"""Fitting the step model to measured runs, apart from the runtime that uses the fit: measured
runs read and checked (`measured.py`, `vllm_results.py`, `run_checks.py`), replayed through
the simulated engine (`replay.py`), the engine overheads fitted to them (`overhead_fit.py` on
`minimize.py`; aiconfigurator's silicon sample as runs in `aic_runs.py`) and `kvplan
calibrate`'s fit with each run held out (`calibrate_runs.py`)."""
