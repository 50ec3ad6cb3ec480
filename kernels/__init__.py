"""Triton kernels with naive torch references beside them (installed as kvplan.kernels)."""
