"""equi under the batch-time objective (docs/problem.md §9): it picks, among its own candidate
plans, the one the evaluator scores best by the objective asked for."""

from __future__ import annotations

import pytest

from experiments.lib.suites import WORKLOADS_DIR
from piper import Options, solve
from piper.core.checks import check_result
from piper.io.workload import load_problem


@pytest.mark.parametrize("N", [4, 64])
def test_equi_minimizes_the_objective_asked_for(N: int) -> None:
    problem = load_problem(WORKLOADS_DIR / "bert32a100.json").with_cluster(devices=16, microbatches=N)
    by_tps = solve(problem, Options(), solver="equi")
    by_batch = solve(problem, Options(objective="batch-time"), solver="equi")
    assert by_batch.objective_kind == "batch-time" and by_batch.objective == by_batch.batch_time
    assert by_batch.batch_time <= by_tps.batch_time and by_tps.tps <= by_batch.tps
    assert check_result(problem, Options(objective="batch-time"), by_batch) == []
