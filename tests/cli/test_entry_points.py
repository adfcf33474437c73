"""The real entry points as separate processes (``python -m piper``, ``python -m baselines``,
``python -m experiments``, ``python -m experiments.compare``): their exit status, one line on
stderr for a user error, and stdout that is exactly one JSON object even when native solver
code writes to file descriptor 1. Every other command test runs in process (the ``cli``
fixture of tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands import run_python_module
from tests.helpers import two_layer_workload, write_json

ROOT = Path(__file__).resolve().parents[2]
REPRO = str(ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json")


#: HiGHS's run takes 10 s on 2 cores: with the slow tests (CP-SAT checks the same contract in CI)
@pytest.mark.parametrize("solver", ["cpsat", pytest.param("milp-highs", marks=pytest.mark.slow)])
def test_json_stdout_is_one_object_even_with_the_solver_log(solver: str) -> None:
    """CP-SAT and HiGHS print their logs on stdout from native code; --json must still be
    one JSON object on stdout, the log (asked for with --log) on stderr."""
    proc = run_python_module("piper", "solve", REPRO, "--solver", solver, "--json", "--log")
    assert proc.returncode == 0, proc.stderr[-500:]
    out = json.loads(proc.stdout)
    assert out["status"] == "optimal" and out["solver"] == solver
    assert proc.stdout.count("\n") == 1
    assert proc.stderr.strip(), "the log goes to stderr"


def test_alias_runs_the_same_code_and_prints_the_same_json() -> None:
    a = json.loads(run_python_module("piper", "solve", REPRO, "--solver", "dp", "--json").stdout)
    b = json.loads(run_python_module("baselines", "solve", REPRO, "--solver", "dp", "--json").stdout)
    for out in (a, b):
        out.pop("time_s")
        out["stats"].pop("time_s", None)
    assert a.keys() == b.keys()
    assert a["plan"] == b["plan"] and a["tps"] == b["tps"] and a["status"] == b["status"]


def test_python_dash_m_piper_end_to_end(tmp_path):
    path = write_json(tmp_path, two_layer_workload(intraNodeBandwith=1))
    r = run_python_module("piper", "info", path, "--strict", timeout_s=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "intraNodeBandwith" in r.stderr
    r = run_python_module("piper", "info", path, "-G", "0", timeout_s=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_python_dash_m_experiments_and_compare() -> None:
    """``python -m experiments compare`` dispatches to ``python -m experiments.compare``; a
    bad solver name there is exit 2 and one line."""
    listing = run_python_module("experiments", "compare", "--list", timeout_s=120)
    assert listing.returncode == 0, listing.stderr
    assert "paper-slices" in listing.stdout and "dp-greedy" in listing.stdout
    bad = run_python_module("experiments.compare", "--solvers", "nope", "--no-plots", timeout_s=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "unknown solver 'nope'" in bad.stderr and "Traceback" not in bad.stderr
