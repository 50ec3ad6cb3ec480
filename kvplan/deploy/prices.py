"""GPU prices a plan costs with: a TOML file of dollars per GPU-hour, written by the user.

    # what you pay, $/GPU-hour (kvplan ships no prices: they change by provider and month)
    [usd_per_gpu_hour]
    h100-80gb = 2.49
    "NVIDIA L40S" = 0.86       # any name kvplan's GPU reader takes

Names go through the same GPU reader as `--gpu`, so a price keyed by a log's or a price
page's spelling lands on the catalog entry.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from kvplan.spec.resolve import load_gpu

TABLE = "usd_per_gpu_hour"


def load_prices(path: str | Path) -> dict[str, float]:
    """Catalog GPU name -> $/GPU-hour."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"price file '{path}' does not exist; write a TOML file with a [{TABLE}] table"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(
            f"malformed price file '{path}': {str(err).splitlines()[0]}; fix the TOML"
        ) from None
    table = data.get(TABLE)
    if not isinstance(table, dict) or not table:
        raise ValueError(
            f"price file '{path}' has no [{TABLE}] table; add one, e.g. h100-80gb = 2.49"
        )
    prices: dict[str, float] = {}
    for name, value in table.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(
                f"price file '{path}': {name} = {value!r} must be a positive number of $/GPU-hour"
            )
        prices[load_gpu(str(name)).name] = float(value)
    return prices


def unit_price(prices: dict[str, float], gpu: str) -> float | None:
    """What a plan ranks one GPU-hour of `gpu` by: its price, or 1 per GPU when no prices are
    given (plans then rank by GPU count); None for a GPU the price file leaves out."""
    return prices.get(gpu) if prices else 1.0
