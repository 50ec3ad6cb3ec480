"""Triton's interpreter switch for the kernel test modules (TRITON_INTERPRET).

Imports neither torch nor triton: a test module imports this first, turns the interpreter
on, and only then imports what imports triton. conftest.py imports it at its top, before any
test module is imported, so _CALLER_INTERPRET is the caller's own setting.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

HAS_TRITON = importlib.util.find_spec("triton") is not None

# The caller's setting, before any test module is imported (e.g. TRITON_INTERPRET=0 on a GPU).
_CALLER_INTERPRET = os.environ.get("TRITON_INTERPRET")


def _set_interpret(value: str | None) -> None:
    if value is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = value


def triton_interpreter_for_module():
    """Turn Triton's interpreter on (unless TRITON_INTERPRET is set) before triton is first
    imported (its standard library is jitted at import); returns a module-scoped autouse
    fixture that turns it on for the module's own tests and puts the variable back
    afterwards, so it leaks into no other module (kvplan's kernels jit per mode at first
    launch, so switching between modules is safe).
    Call at the top of a test module: `_interpreter = triton_interpreter_for_module()`."""
    os.environ.setdefault("TRITON_INTERPRET", "1")

    @pytest.fixture(scope="module", autouse=True)
    def restore_interpret_flag():
        before = os.environ.get("TRITON_INTERPRET")
        _set_interpret(_CALLER_INTERPRET if _CALLER_INTERPRET is not None else "1")
        yield
        _set_interpret(before)

    return restore_interpret_flag


def require_compiled_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled (not interpreted) kernels: kvplan jits at first launch, after this. Fails
    when triton's standard library was jitted for the interpreter at import: compiled
    kernels calling it then fail to build with an unrelated-looking error."""
    import triton.language as tl

    if type(tl.zeros_like).__name__ == "InterpretedFunction":
        pytest.fail(
            "triton was imported with TRITON_INTERPRET=1: run the GPU tests with "
            "TRITON_INTERPRET=0 set"
        )
    monkeypatch.setenv("TRITON_INTERPRET", "0")
