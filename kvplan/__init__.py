"""kvplan: KV-cache capacity planning and benchmarking for LLM inference.

Importing kvplan loads no torch, triton, transformers, pandas or matplotlib: those live
inside the functions that need them, so estimation stays instant.
"""

from importlib import import_module
from typing import Any, overload

__version__ = "0.1.0"
# bytes in a GiB and a MiB: every layer reads memory in these units
GIB = 2**30
MIB = 2**20


@overload
def cdiv(numerator: int, denominator: int) -> int: ...
@overload
def cdiv(numerator: Any, denominator: Any) -> Any: ...
def cdiv(numerator: Any, denominator: Any) -> Any:
    """Ceiling division (how many blocks hold `numerator` tokens), for ints and numpy arrays."""
    return -(-numerator // denominator)


def lazy_attribute(package: str, homes: dict[str, str], name: str) -> Any:
    """A package's module `__getattr__` (PEP 562): its public names load on first use, so
    importing one light module of a package (a request record, a registry of names) does not
    import everything beside it. The package lists where each name lives:

        _HOMES = {"Request": "kvplan.workload.request", ...}
        __all__ = sorted(_HOMES)

        def __getattr__(name: str) -> Any:
            return lazy_attribute(__name__, _HOMES, name)
    """
    if name not in homes:
        raise AttributeError(f"module '{package}' has no attribute '{name}'")
    return getattr(import_module(homes[name]), name)
