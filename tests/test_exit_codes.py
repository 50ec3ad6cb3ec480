"""What a command's exit code means: 0 an answer, 2 bad input (one line), 3 a plan search that
found no deployment within the SLO (an answer, with its table), and KVPLAN_DEBUG=1 adds the
traceback behind a one-line error."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvplan.cli.app import app
from kvplan.cli.common import BAD_INPUT, NO_DEPLOYMENT

runner = CliRunner()
QUICK = ["--rate", "1", "--step-model", "roofline", "--num-requests", "10", "--workers", "1"]


def test_a_plan_with_no_deployment_within_the_slo_exits_3_with_its_answer() -> None:
    result = runner.invoke(
        app,
        [
            "plan",
            "llama-3.1-8b",
            "--gpu",
            "l4",
            "--tp",
            "1",
            *QUICK,
            "--slo",
            "ttft_p90=1ms",
            "--json",
        ],
        env={"COLUMNS": "120", "KVPLAN_DEBUG": ""},
    )
    assert result.exit_code == NO_DEPLOYMENT == 3, result.output
    assert json.loads(result.stdout)["winner"] is None


def test_a_plan_that_finds_a_deployment_exits_0() -> None:
    result = runner.invoke(
        app,
        ["plan", "llama-3.1-8b", "--gpu", "h100-80gb", "--tp", "1", *QUICK, "--json"],
        env={"COLUMNS": "120", "KVPLAN_DEBUG": ""},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["winner"] == 0


def test_kvplan_debug_prints_the_traceback_behind_the_one_line_error() -> None:
    args = ["estimate", "llama-3.1-8b", "--context", "-5"]
    quiet = runner.invoke(app, args, env={"COLUMNS": "120", "KVPLAN_DEBUG": ""})
    assert quiet.exit_code == BAD_INPUT == 2
    assert "Traceback" not in quiet.stderr
    loud = runner.invoke(app, args, env={"COLUMNS": "120", "KVPLAN_DEBUG": "1"})
    assert loud.exit_code == BAD_INPUT
    assert "Traceback" in loud.stderr
    assert loud.stderr.strip().splitlines()[-1] == quiet.stderr.strip()
