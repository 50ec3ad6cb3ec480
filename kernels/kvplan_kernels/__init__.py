"""Triton kernels with naive torch references beside them (installed as kvplan.kernels).

Importing this package loads neither torch nor triton -- `import kvplan` must stay
instant -- so the public functions below resolve lazily from their submodules:

* `paged_attention_reference`, and `paged_attention` from `kvplan.kernels.paged_attention`
  (the function shares its module's name, so the package attribute is the module once
  that is imported; import the function from the submodule): decode attention (GQA/MQA).
* `write_kv` / `write_kv_reference`: scatter a step's K/V into the paged caches.
* `allocate_kv_cache`, `get_format`, `CacheFormat`, `quantize`, `dequantize`,
  `cache_bytes_per_token_per_head`, `tensor_scale`: KV formats as tensor layouts.

Backends: "triton" (CUDA tensors, or CPU tensors when TRITON_INTERPRET=1), "torch"
(vectorized gather + masked softmax, for CPU users) and "reference" (the naive loops).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

BACKENDS = ("triton", "torch", "reference")

_LAZY = {
    "paged_attention_reference": "reference",
    "write_kv": "cache_ops",
    "write_kv_reference": "reference",
    "allocate_kv_cache": "quant",
    "get_format": "quant",
    "CacheFormat": "quant",
    "PagedKVCache": "quant",
    "quantize": "quant",
    "dequantize": "quant",
    "cache_bytes_per_token_per_head": "quant",
    "tensor_scale": "quant",
}

__all__ = [
    "BACKENDS",
    "interpreting",
    "jit_on_first_use",
    "select_backend",
    "triton_available",
    "triton_helper",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def triton_available() -> bool:
    """Whether triton can be imported (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """TRITON_INTERPRET=1 runs Triton kernels on CPU tensors through its interpreter."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on")


_JITTED: dict[tuple[str, str, bool], Any] = {}
_HELPERS: dict[str, Any] = {}  # "module.qualname" -> the plain Python function


def triton_helper(fn: Any) -> Any:
    """Mark a function that Triton kernels call (a @triton.jit helper, jitted with them)."""
    _HELPERS[f"{fn.__module__}.{fn.__qualname__}"] = fn
    fn.kvplan_helper = True
    return fn


def jit_on_first_use(fn: Any) -> Any:
    """triton.jit(fn), done at first launch rather than at import.

    triton.jit reads TRITON_INTERPRET when it decorates, so decorating at import would fix
    the mode before a caller (or a test module) had the chance to set it. Helpers the
    kernel calls (marked with `triton_helper`) are bound in the kernel's module for the
    same mode: plain functions for the interpreter, jitted ones for the compiler.
    """
    key = (fn.__module__, fn.__qualname__, interpreting())
    if key not in _JITTED:
        import triton

        _bind_helpers(fn.__globals__, interpreting(), set())
        _JITTED[key] = triton.jit(fn)
    return _JITTED[key]


def _bind_helpers(namespace: dict[str, Any], interpret: bool, seen: set[int]) -> None:
    """Bind every helper a module names, and the helpers those helpers' modules name, for
    the mode: the compiler needs each helper a helper calls (attend_tile -> load_kv_tile)
    to be a JITFunction too, the interpreter wants plain functions throughout."""
    if id(namespace) in seen:
        return
    seen.add(id(namespace))
    for name, value in list(namespace.items()):
        plain = _helper_of(value)
        if plain is not None:
            namespace[name] = plain if interpret else _jit_helper(plain)
            _bind_helpers(plain.__globals__, interpret, seen)


def _helper_of(value: Any) -> Any:
    plain = getattr(value, "fn", value)  # a JITFunction keeps the Python function in .fn
    return plain if getattr(plain, "kvplan_helper", False) else None


def _jit_helper(plain: Any) -> Any:
    key = (plain.__module__, plain.__qualname__, False)
    if key not in _JITTED:
        import triton

        _JITTED[key] = triton.jit(plain)
    return _JITTED[key]


def select_backend(backend: str | None, on_cuda: bool) -> str:
    """Resolve `backend` ("auto"/None picks Triton where it can run, else torch)."""
    if backend in (None, "auto"):
        return "triton" if triton_available() and (on_cuda or interpreting()) else "torch"
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}'; use one of: auto, {', '.join(BACKENDS)}")
    if backend == "triton":
        if not triton_available():
            raise ValueError("backend 'triton' needs the triton package")
        if not (on_cuda or interpreting()):
            raise ValueError(
                "backend 'triton' needs CUDA tensors, or TRITON_INTERPRET=1 for CPU tensors"
            )
    return backend
