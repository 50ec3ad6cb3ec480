"""The startup-log patterns run in time linear in the log: inputs that make a backtracking
pattern try every split of a run (one line of 100,000 digits took minutes with `[\\d,]*\\.?\\d+`
at every position; a run of blank lines with `^\\s*`) are parsed in a child process that is
given 20 seconds, far above the fraction of a second each takes, so a pattern that turns
quadratic again fails here rather than hanging a user's `kvplan explain`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = {
    "digits": "'1' * 100_000",
    "spaces": "' ' * 100_000",
    "blank lines": "'\\n' * 100_000",
    "digits and commas": "'1,' * 50_000",
    "digits and dots": "'1.' * 50_000",
    "exponents": "'1e' * 50_000",
    "a label, then spaces": "'total_gpu_memory' + ' ' * 100_000",
    "a label, then digits": "'GPU KV cache size: ' + '9' * 100_000",
    "digits before the text a figure ends with": "'1' * 100_000 + ' GiB for peak activation'",
    "device lines of one word": "('GPU 0: ' * 2_000 + '\\n') * 50",
    "an argument dict that never closes": "'non-default args: {' + '} x' * 30_000",
    "an image tag that never ends": "'vllm/vllm-openai:' * 6_000",
    "hard-wrapped lines": "'y' * 130 + '\\n' + 'z\\n' * 100_000",
}
SCRIPT = """
from kvplan.spec.server_log import parse_server_log
for name, text in {cases}.items():
    try:
        parse_server_log(text)
    except ValueError:
        pass
    print(name, flush=True)
"""


def test_hostile_lines_parse_in_linear_time() -> None:
    cases = "{" + ", ".join(f"{name!r}: {text}" for name, text in HOSTILE.items()) + "}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(cases=cases)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=20,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == list(HOSTILE)
