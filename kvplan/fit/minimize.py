"""A derivative-free minimizer for the few parameters kvplan fits (kvplan/fit/overhead_fit.py):
the losses are sums of absolute log errors over replayed runs, not smooth enough for a
gradient method and cheap enough to evaluate hundreds of times."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, iterations: int = 250, step: float = 0.5
) -> np.ndarray:
    """Plain Nelder-Mead (reflection 1, expansion 2, contraction 0.5, shrink 0.5)."""
    simplex = [x0] + [x0 + step * np.eye(len(x0))[i] for i in range(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-6 * (1.0 + abs(values[0])):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex]
                values = [f(x) for x in simplex]
    return simplex[int(np.argmin(values))]
