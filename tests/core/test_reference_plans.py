"""The evaluator scores every plan of the authors' planner to the TPS the authors' code reported."""

import pytest

from piper import evaluate
from tests.reference import plan_of, problem_of, rows

ROWS = [r for r in rows() if r.get("stages")]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['config_id']}-{r['variant']}" for r in ROWS])
def test_evaluator_reproduces_reference_tps(row):
    problem, plan = problem_of(row), plan_of(row)
    score = evaluate(problem, plan)
    assert score.tps == pytest.approx(row["tps"], rel=1e-9)
    assert score.devices_used == row["devices_used"] and score.sum_d == row["sum_d"]
    assert len(score.stages) == row["num_stages"]


def test_reference_sample_has_the_expected_rows():
    assert len(rows()) == 16 and len(ROWS) >= 12
