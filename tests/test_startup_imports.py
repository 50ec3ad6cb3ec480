"""`kvplan estimate`, `explain` and `profiles` import nothing from the engine, the simulator
or numpy: they answer from the specs and the memory model, and start at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "numpy",
    "pandas",
    "torch",
    "matplotlib",
    "kvplan.core.engine",
    "kvplan.core.scheduler",
    "kvplan.sim",
    "kvplan.bench.matrix",
    "kvplan.workload.arrivals",
)
LOG = Path(__file__).parent / "data" / "vllm_issue_12330.log"


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "llama-3.1-8b", "--gpu", "h100-80gb"],
        ["estimate", "llama-3.1-70b", "--gpu", "h100-80gb", "--tp", "2", "--json"],
        ["explain", str(LOG)],
        ["profiles", "gpus"],
    ],
)
def test_light_commands_import_no_engine(args: list[str]) -> None:
    code = (
        "import json, sys\nfrom kvplan.cli.app import app\n"
        f"try:\n    app({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        # a heavy module or one of its submodules (kvplan.core.engine, not
        # kvplan.core.engine_factory)
        "print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') "
        f"for h in {HEAVY!r}))),"
        " file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "HOME": str(Path.home())},
    )
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert loaded == [], f"{' '.join(args)} imported {loaded}"


def test_the_entry_point_loads_only_the_command_it_runs() -> None:
    code = (
        "import sys\nsys.argv = ['kvplan', 'estimate', 'llama-3.1-8b', '--gpu', 'h100-80gb', "
        "'--json']\n"
        "from kvplan.cli.app import run\ntry:\n    run()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('kvplan.cli.')), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "HOME": str(Path.home())},
    )
    assert json.loads(done.stdout)["model"] == "llama-3.1-8b"  # the command ran
    commands = {
        m
        for m in eval(done.stderr.strip().splitlines()[-1])
        if m.rsplit(".", 1)[1]
        in ("bench", "plan", "calibrate", "report", "sweep", "explain", "profiles", "estimate")
    }
    assert commands == {"kvplan.cli.estimate"}
