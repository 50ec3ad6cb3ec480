"""`import kvplan`, `kvplan estimate` and `kvplan explain` stay instant: no heavy libraries are
loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "triton", "transformers", "pandas", "matplotlib")

PROBE = """
import sys
from typer.testing import CliRunner
import kvplan
from kvplan.cli.app import app
result = CliRunner().invoke(
    app, ["estimate", "llama-3.1-70b", "--tp", "4", "--sweep", "context=1k..8k"]
)
assert result.exit_code == 0, result.output
result = CliRunner().invoke(app, ["estimate", "gpt-oss-120b"])
assert result.exit_code == 0, result.output
result = CliRunner().invoke(
    app, ["explain", {fixture!r}, "--model", "llama-3.1-8b", "--gpu", "a100-40gb"]
)
assert result.exit_code == 0, result.output
print(",".join(name for name in {heavy!r} if name in sys.modules))
"""


def test_import_and_estimate_load_no_heavy_modules() -> None:
    fixture = str(Path(__file__).parent / "data" / "vllm_issue_12330.log")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY, fixture=fixture)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
