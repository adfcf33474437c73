"""The fast fuzz suite (CI, well under a minute): each entry point on a few dozen hostile
inputs (tests/fuzz/bodies.py has the properties; ``-m slow`` runs them for minutes:
tests/fuzz/test_fuzz_slow.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import bodies
from tests.fuzz.inputs import base_hardware, base_hf, base_plan, base_workload, corrupted_text, mutated


def fast(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@fast(60)
@given(mutated(base_workload(), bodies.V2_KEYS))
def test_workload_dicts(raw):
    bodies.workload_dict(raw)


@fast(40)
@given(st.data())
def test_workload_files(data):
    bodies.workload_file(data.draw(corrupted_text(data.draw(mutated(base_workload(), bodies.V2_KEYS)))))


@fast(40)
@given(mutated(base_plan(), ("schedule", "madeFor")), st.data())
def test_plans(raw, data):
    bodies.plan_input(raw, data.draw(corrupted_text(raw)))


@fast(50)
@given(mutated(base_hf(), bodies.MOE_KEYS), st.data())
def test_hf_configs(raw, data):
    bodies.hf_config(raw, data.draw(corrupted_text(raw)))


@fast(30)
@given(st.data())
def test_hardware_files(data):
    bodies.hardware_file(data.draw(corrupted_text(data.draw(mutated(base_hardware(), bodies.HW_KEYS)))))


@fast(25)
@given(bodies.solve_argv())
def test_solve_flags(case):
    bodies.solve_cli(*case)


@fast(6)
@given(bodies.solve_argv(("milp", "dp")))
def test_baselines_solve_flags(case):
    from baselines.__main__ import main

    bodies.solve_cli(case[0][1:], case[1], main=lambda argv: main(["solve", *argv]), prog="baselines")


@fast(20)
@given(bodies.file_argv())
def test_commands_on_corrupted_files(argv):
    bodies.file_cli(argv)


@fast(20)
@given(bodies.model_argv())
def test_model_command(argv):
    bodies.model_cli(argv)


@fast(25)
@given(bodies.score_argv())
def test_score_command(argv):
    bodies.score_cli(argv)


@fast(14)
@given(bodies.experiment_argv())
def test_experiments_refuse_bad_flags(case):
    bodies.experiment_cli(*case)


@fast(12)
@given(bodies.extreme_workloads(), st.sampled_from(["dp", "brute", "equi", "cpsat", "milp-highs"]))
def test_solvers_on_extreme_numbers(raw, solver):
    bodies.solve_api(raw, solver, 2.0)
