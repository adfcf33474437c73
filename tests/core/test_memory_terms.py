"""``memory_terms``: a stage's memory split into the activations of the micro-batches in flight,
the state kept whole, the state sharded over d and the expert terms (docs/problem.md §2, §9.2,
§11). By hand on a two-stage chain, and on solved random instances (1F1B, interleaved, MoE) the
terms add up to the evaluator's memory of every stage."""

from __future__ import annotations

import pytest

from experiments.lib.instances import random_moe_problem, random_problem
from experiments.lib.suites import schedules_suite
from piper import Options, problem_from_dict, solve
from piper.core.evaluate import evaluate, memory_terms
from piper.core.plan import Plan, Schedule, Stage
from tests.helpers import tmpc, workload


def test_a_two_stage_chain_by_hand() -> None:
    sharded = {**tmpc("x", p=1.0, a=3.0, b=5.0), "memoryUsageShardedB": 8.0}
    problem = problem_from_dict(workload({0: {1: [sharded]}, 1: {1: [tmpc("y", p=1.0, a=2.0, b=7.0)]}},
                                         [(0, 1, 0.0)], k=4, N=8))
    plan = Plan((Stage((0,), 2, 1, {0: "x"}), Stage((1,), 2, 1, {1: "y"})), Schedule())
    score = evaluate(problem, plan)
    first, second = memory_terms(problem, plan, score)
    # stage 1: y = ceil((2 + 2) / 2) = 2 micro-batches in flight; stage 2: y = 1
    assert (first.y, first.activations, first.state, first.sharded_state, first.experts) == (2, 6.0, 5.0, 4.0, 0.0)
    assert (second.y, second.activations, second.state, second.sharded_state) == (1, 2.0, 7.0, 0.0)
    assert [first.total, second.total] == [st.memory for st in score.stages] == [15.0, 9.0]


def _check(problem, plan) -> None:
    score = evaluate(problem, plan)
    terms = memory_terms(problem, plan, score)
    assert len(terms) == len(score.stages)
    for st, t in zip(score.stages, terms, strict=True):
        assert t.total == pytest.approx(st.memory, rel=1e-12, abs=1e-9)
        assert t.y == st.y and min(t.activations, t.state, t.sharded_state, t.experts) >= 0


@pytest.mark.parametrize("seed", range(8))
def test_the_terms_add_up_to_the_evaluators_memory(seed: int) -> None:
    problem = random_problem(seed, n=6, shape="chain", devices=4, microbatches=4, memory_tightness=3.0)
    res = solve(problem, Options(), solver="brute")
    assert res.plan is not None
    _check(problem, res.plan)


def test_the_terms_of_interleaved_device_groups() -> None:
    """schedules_suite's instances, where an interleaved plan beats every 1F1B plan: each group's
    chunks are summed."""
    seen = 0
    for inst in schedules_suite(4):
        if not inst.max_virtual_stages:
            continue
        res = solve(inst.problem, Options(objective=inst.objective, max_virtual_stages=inst.max_virtual_stages),
                    solver="brute")
        assert res.plan is not None
        seen += res.plan.schedule.interleaved
        _check(inst.problem, res.plan)
    assert seen


def test_expert_terms_are_counted() -> None:
    seen = 0
    for seed in range(20):
        problem = random_moe_problem(seed)
        res = solve(problem, Options(), solver="brute")
        if res.plan is None:
            continue
        _check(problem, res.plan)
        score = evaluate(problem, res.plan)
        seen += any(t.experts > 0 for t in memory_terms(problem, res.plan, score))
    assert seen  # some optimum holds expert state
