from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

# Helpers whose asserts check the tests' invariants: rewritten like a test module's, so a
# failure still reports the values compared (only works before they are first imported).
pytest.register_assert_rewrite("generation_helpers", "property_helpers")

# Imported before any test module, so the caller's TRITON_INTERPRET is captured first.
from triton_helpers import _CALLER_INTERPRET, _set_interpret  # noqa: E402

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


def pytest_collection_finish(session: pytest.Session) -> None:
    """Kernel test modules turn the interpreter on when imported (triton must see it then),
    and collection imports every module first: put the caller's setting back, so modules
    that run before them (real mode's CPU runs) keep the torch path instead of interpreting
    Triton (4 minutes for one 3-request real bench)."""
    _set_interpret(_CALLER_INTERPRET)


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
