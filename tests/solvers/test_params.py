"""Solver knobs are validated (issue 19): a misspelt key or a value of the wrong type is an
error naming the key and the known ones, never a silent default."""

from __future__ import annotations

import pytest

from experiments.lib.instances import random_problem
from piper import Options, solve
from piper.core.errors import SolverError
from piper.solvers.registry import SOLVERS, solver_names


@pytest.mark.parametrize("solver, params, fragment", [
    ("dp", {"engin": "table"},
     "unknown parameter 'engin' (known: curve, curve_points, engine, greedy_bound, max_ideal_pairs, upper_bound)"),
    ("milp", {"verify": "yes"}, "parameter 'verify' must be bool, got 'yes'"),
    ("cpsat", {"num_workers": True}, "parameter 'num_workers' must be int, got True"),
    ("cpsat", {"cutoff": False}, "unknown parameter 'cutoff'"),
    ("equi", {"curve": True}, "unknown parameter 'curve'"),
    ("brute", {"msg": True}, "unknown parameter 'msg' (known: none)"),
])
def test_bad_knob_names_the_key(solver: str, params: dict, fragment: str) -> None:
    with pytest.raises(SolverError) as info:
        solve(random_problem(1), Options(params=params), solver=solver)
    assert fragment in str(info.value) and repr(solver) in str(info.value)


def test_every_registered_solver_declares_its_knobs() -> None:
    solver_names()  # load the plugins
    assert all(info.params is not None for info in SOLVERS.values())


def test_good_knobs_pass() -> None:
    res = solve(random_problem(1), Options(params={"engine": "table", "curve": False}), solver="dp")
    assert res.plan is not None or res.status.value == "infeasible"
