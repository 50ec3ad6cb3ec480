"""The promise every failing kvplan command keeps, as one assertion.

exit code 2, exactly one line on stderr that starts with `error:` and names the culprit
(or typer's own usage error for a value typer cannot parse, e.g. --tp nan: a box naming the option),
no traceback, and no file that existed before the command changed (hashed before/after).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner, Result

from kvplan.cli.app import app

runner = CliRunner()
QUICK = ["--num-requests", "12", "--rate", "50"]  # a bench of a second


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def invoke(args: list[str]) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def assert_clean_failure(result: Result, *culprits: str) -> str:
    """The one-line error contract; returns the line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    if result.stderr.startswith("Usage:"):  # typer's own parse error (a box naming the option)
        assert "Invalid value for" in result.stderr or "No such option" in result.stderr, (
            result.stderr
        )
        return result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    assert "Traceback" not in result.output
    for culprit in culprits:
        assert culprit in line, (culprit, line)
    return line


def fails_cleanly(args: list[str], folder: Path, *culprits: str) -> str:
    """Run `kvplan args` and check the contract, including that no file in folder changed
    (files the failed command newly created are allowed only if hidden temp files are not)."""
    before = digests(folder)
    result = invoke(args)
    line = assert_clean_failure(result, *culprits)
    after = digests(folder)
    assert {k: v for k, v in after.items() if k in before} == before, "an existing file changed"
    assert not [k for k in after if k not in before], f"left behind: {set(after) - set(before)}"
    return line
