"""Every eviction policy, found as the EvictionPolicy subclasses with a listing `order` in
this package's modules: a new policy is one module here (plus its tests), and the CLI's
help, the optimization parser, the engines and their errors read it from this registry."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from kvplan.core.policies.base import EvictionPolicy, KeepAll

FULL = KeepAll()


@cache
def policies() -> dict[str, EvictionPolicy]:
    """Policy name -> the policy, in listing order."""
    package = importlib.import_module(__package__ or "kvplan.core.policies")
    modules = {
        f"{package.__name__}.{module.name}" for module in pkgutil.iter_modules(package.__path__)
    }
    loaded = {name: importlib.import_module(name) for name in sorted(modules)}
    # A class counts while its module defines it (a reloaded module's old class does not).
    found = [
        cls()
        for cls in _subclasses(EvictionPolicy)
        if cls.__dict__.get("order") is not None
        and getattr(loaded.get(cls.__module__), cls.__name__, None) is cls
    ]
    found.sort(key=lambda policy: policy.order if policy.order is not None else 0)
    names = [policy.name for policy in found]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two eviction policies share a name: {names}")
    return {policy.name: policy for policy in found}


def policy_names() -> tuple[str, ...]:
    return tuple(policies())


def lookup(name: str) -> EvictionPolicy:
    """The policy called `name` ("full": the full cache)."""
    if name == FULL.name:
        return FULL
    known = policies()
    if name not in known:
        raise ValueError(f"unknown policy '{name}'; use one of: full, {', '.join(known)}")
    return known[name]


def _subclasses(cls: type[EvictionPolicy]) -> list[type[EvictionPolicy]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found
