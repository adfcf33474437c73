"""The long fuzz run (``python -m pytest -m slow tests/fuzz``): every property of
tests/fuzz/bodies.py, over and over with fresh random inputs, for a time budget
(``PIPER_FUZZ_SECONDS``, default 720 s in all: 12 minutes), plus real ``experiments.compare``
runs and the exact models on extreme numbers. Skipped without ``-m slow``."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import bodies
from tests.fuzz.inputs import FLAG_VALUES, base_hardware, base_hf, base_plan, base_workload, corrupted_text, mutated

BUDGET_S = float(os.environ.get("PIPER_FUZZ_SECONDS", "720"))
SETTINGS = settings(max_examples=50, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(mutated(base_workload(), bodies.V2_KEYS))
def _workload_dicts(raw):
    bodies.workload_dict(raw)


@SETTINGS
@given(st.data())
def _workload_files(data):
    bodies.workload_file(data.draw(corrupted_text(data.draw(mutated(base_workload(), bodies.V2_KEYS)))))


@SETTINGS
@given(mutated(base_plan(), ("schedule", "madeFor")), st.data())
def _plans(raw, data):
    bodies.plan_input(raw, data.draw(corrupted_text(raw)))


@SETTINGS
@given(mutated(base_hf(), bodies.MOE_KEYS), st.data())
def _hf_configs(raw, data):
    bodies.hf_config(raw, data.draw(corrupted_text(raw)))


@SETTINGS
@given(st.data())
def _hardware_files(data):
    bodies.hardware_file(data.draw(corrupted_text(data.draw(mutated(base_hardware(), bodies.HW_KEYS)))))


@SETTINGS
@given(bodies.solve_argv(("dp", "dp-greedy", "brute", "equi", "milp", "milp-highs", "cpsat")))
def _solve_flags(case):
    bodies.solve_cli(*case)


@SETTINGS
@given(bodies.file_argv())
def _files(argv):
    bodies.file_cli(argv)


@SETTINGS
@given(bodies.model_argv())
def _model(argv):
    bodies.model_cli(argv)


@SETTINGS
@given(bodies.score_argv())
def _score(argv):
    bodies.score_cli(argv)


@SETTINGS
@given(bodies.experiment_argv())
def _experiments(case):
    bodies.experiment_cli(*case)


@SETTINGS
@given(bodies.extreme_workloads(), st.sampled_from(["dp", "dp-greedy", "brute", "equi", "cpsat", "milp", "milp-highs"]))
def _extreme(raw, solver):
    bodies.solve_api(raw, solver, 3.0)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["-k", "-M", "-N", "-B", "--exclude-tmpc", "--rtol", "--jobs"]), FLAG_VALUES),
                max_size=2))
def _compare(pairs):
    bodies.compare_run([f"{flag}={value}" for flag, value in pairs], 2.0)


#: (property, share of the budget)
RUNS = [(_workload_dicts, 1), (_workload_files, 1), (_plans, 1), (_hf_configs, 1), (_hardware_files, 0.5),
        (_solve_flags, 2), (_files, 1), (_model, 1), (_score, 1), (_experiments, 0.5), (_extreme, 2), (_compare, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("prop, share", RUNS, ids=[f.__name__.strip("_") for f, _ in RUNS])
def test_fuzz_for_minutes(prop, share) -> None:
    """Skipped unless the slow tests are selected (--runslow or -m slow: tests/conftest.py)."""
    end = time.monotonic() + BUDGET_S * share / sum(s for _, s in RUNS)
    rounds = 0
    while time.monotonic() < end or rounds == 0:
        prop()  # 50 fresh examples per round (no example database: new ones each time)
        rounds += 1
