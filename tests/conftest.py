from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# No test reaches the Hugging Face Hub, whatever the user's shell holds: the resolver's Hub
# step is tested against a mocked huggingface_hub (tests/test_resolver.py), and a user's own
# cache must not change what a name resolves to.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = str(Path(__file__).resolve().parent / "data" / "empty-hf-cache")
# Nor does the terminal's width: rich fixes a console's width from COLUMNS when it is built,
# so an exported COLUMNS would pin kvplan's module-level consoles before any test could set
# its own. Without it they follow COLUMNS at each print (80 when unset), and a test that
# depends on the width sets it (monkeypatch.setenv or CliRunner's env).
os.environ.pop("COLUMNS", None)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (a fresh clone has none)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def stories260k() -> Path:
    """The stories260K folder shipped inside kvplan (hf/, tok512.bin and
    tinystories_validation_0.txt, as in ../shared/data/models/stories260K), so tests on the
    real model run on a fresh clone too. Other shipped inputs: kvplan.samples.sample_path."""
    from kvplan.samples import sample_path

    return sample_path("stories260k").parent


def require_in_ci(available: bool, what: str, install: str) -> None:
    """Skip a test whose tool is missing on a user's machine, but fail it in CI (CI=true),
    where .ci/run installs the tool: a broken install must not pass as a skip."""
    if available:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is missing in CI; {install}")
    pytest.skip(f"{what} is not installed ({install})")


# The caller's setting, before any test module is imported (e.g. TRITON_INTERPRET=0 on a GPU).
_CALLER_INTERPRET = os.environ.get("TRITON_INTERPRET")


def _set_interpret(value: str | None) -> None:
    if value is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = value


def pytest_collection_finish(session: pytest.Session) -> None:
    """Kernel test modules turn the interpreter on when imported (triton must see it then),
    and collection imports every module first: put the caller's setting back, so modules
    that run before them (real mode's CPU runs) keep the torch path instead of interpreting
    Triton (4 minutes for one 3-request real bench)."""
    _set_interpret(_CALLER_INTERPRET)


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


# The hardening cases' folder of results a failing command must not touch
# (test_hardening_cases.py, test_hardening_traces.py).
@pytest.fixture(scope="module")
def bench_record(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from hardening_helpers import QUICK, invoke

    out = tmp_path_factory.mktemp("bench") / "r.jsonl"
    result = invoke(["bench", *QUICK, "--optimizations", "paged", "--out", out])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text().splitlines()[0])


@pytest.fixture
def ws(tmp_path: Path, bench_record: dict[str, Any]) -> Path:
    """A folder holding results a failing command must not touch."""
    (tmp_path / "keep.jsonl").write_text(json.dumps(bench_record) + "\n")
    (tmp_path / "keep.csv").write_text("old,csv\n")
    return tmp_path
