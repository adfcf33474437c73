"""Piper's DP over interleaved plans (docs/problem.md §9.2, rule 5), both objectives: exact by
counts on chains of identical layers (detected from the numbers, piper/dp/chain.py), checked
against brute force; on other graphs a plan with an honest status and bound; and, on a model
front-end workload, the counts search against the DP over ideals."""

from __future__ import annotations

import copy
import math

import pytest

from experiments.lib.instances import random_problem
from piper import Options, Problem, problem_from_dict, problem_to_dict, solve
from piper.core.checks import check_result
from piper.core.options import BATCH_TIME, TPS, candidates
from piper.core.result import Status
from piper.dp.batch import solve_batch_1f1b
from piper.dp.chain import identical_chain
from piper.frontend.hardware import hardware
from piper.frontend.presets import preset
from piper.frontend.workload import TrainingSetup, build_workload
from tests.dp.identical_chains import disagreement, identical_chain_problem

OPTIONS = [Options(objective=objective, schedule=schedule, max_virtual_stages=v, uniform=uniform)
           for objective in (TPS, BATCH_TIME) for v in (2, 3) for schedule in ("any", "interleaved")
           for uniform in (False, True) if not (uniform and schedule == "interleaved")]


def test_identical_chain_is_found_from_the_numbers() -> None:
    p = identical_chain_problem(5, n_inner=4, ends=(1, 2), sync_free=True, flush=True)
    chain = identical_chain(p, candidates(p))
    assert chain is not None and (chain.first, chain.stop, chain.n) == (1, 5, 7) and chain.sync_free
    raw = problem_to_dict(p)
    for i, nd in enumerate(raw["nodes"]):  # names and kinds never matter
        nd["name"], nd["kind"] = f"x{i}", "whatever"
    assert identical_chain(problem_from_dict(raw), candidates(p)) == chain
    # edges into and out of the block that cost more: the block loses its first and last layer
    q = identical_chain_problem(5, n_inner=4, ends=(1, 2), sync_free=True)
    assert [e.communication_cost for e in q.edges][:2] != [e.communication_cost for e in q.edges][1:3]
    shrunk = identical_chain(q, candidates(q))
    assert shrunk is not None and (shrunk.first, shrunk.stop) == (2, 4)


def test_a_different_number_shrinks_or_breaks_the_block() -> None:
    p = identical_chain_problem(5, n_inner=4, ends=(1, 2), sync_free=True, flush=True)
    raw = problem_to_dict(p)
    changed = copy.deepcopy(raw)
    for lst in changed["nodes"][2]["TMPCs"].values():  # the second identical layer: slower
        lst[0]["timePerSample"] += 1.0
    q = problem_from_dict(changed)
    chain = identical_chain(q, candidates(q))
    assert chain is None or chain.stop - chain.first < 4
    sync = copy.deepcopy(raw)  # sync bytes that depend on the TMPC: still identical, not sync-free
    for nd in sync["nodes"][1:5]:
        for lst in nd["TMPCs"].values():
            for j, c in enumerate(lst):
                c["syncTimeFw"] = {u: 1.0 + j for u in c["syncTimeFw"]}
    q = problem_from_dict(sync)
    chain = identical_chain(q, candidates(q))
    assert chain is not None and not chain.sync_free
    dag = random_problem(7, n=5, shape="branchy")
    assert identical_chain(dag, candidates(dag)) is None


def test_excluded_tmpcs_count() -> None:
    """Identity is judged on the TMPCs the options allow."""
    p = identical_chain_problem(9, n_inner=4, ends=(0, 0))
    ids = {c.id for nd in p.nodes for lst in nd.tmpcs.values() for c in lst}
    assert identical_chain(p, candidates(p)) is not None
    for tid in ids:
        cand = candidates(p, Options(exclude_tmpcs=frozenset({tid})))
        if cand.infeasible_reason is None:
            chain = identical_chain(p, cand)
            assert chain is None or chain.inner >= 2


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"{o.objective}-{o.schedule}-v{o.max_virtual_stages}"
                         f"{'-uniform' if o.uniform else ''}")
def test_interleaved_equals_brute_force_on_identical_chains(options: Options) -> None:
    bad = []
    exact = 0
    for seed in range(30):
        p = identical_chain_problem(seed)
        on_chain = identical_chain(p, candidates(p, options)) is not None
        why = disagreement(p, options)
        if why:
            bad.append(why)
        res = solve(p, options, solver="dp")
        if on_chain and res.plan is not None:
            exact += 1
            assert res.status == Status.OPTIMAL, (seed, res.status, res.message)
    assert not bad, bad[:5]
    assert exact >= 10


@pytest.mark.slow
def test_interleaved_equals_brute_force_sweep() -> None:
    bad = []
    for seed in range(30, 230):
        p = identical_chain_problem(seed, n_inner=2 + seed % 4)
        for options in OPTIONS:
            why = disagreement(p, options)
            if why:
                bad.append(why)
    assert not bad, bad[:5]


def test_other_graphs_get_an_honest_status() -> None:
    """Not an identical chain: the interleaved plan comes from a heuristic; "optimal" only when it
    meets its bound, and the bound never exceeds brute force's optimum.  The heuristic may find no
    plan where one exists: then "unknown", never "infeasible"."""
    bad, missed, found = [], 0, 0
    for seed in range(40):
        p = random_problem(seed, n=4 + seed % 3, devices=4, microbatches=4)
        for options in (Options(objective=BATCH_TIME, schedule="interleaved", max_virtual_stages=2),
                        Options(objective=TPS, max_virtual_stages=2)):
            res = solve(p, options, solver="dp")
            brute = solve(p, options, solver="brute")
            if res.status == Status.UNKNOWN and brute.plan is not None:
                missed += 1
                assert res.plan is None and res.bound <= brute.value and check_result(p, options, res) == []
                continue
            found += brute.plan is not None
            why = disagreement(p, options)
            if why:
                bad.append(why)
    assert not bad, bad[:5]
    assert missed <= found // 10, (missed, found)


def test_more_virtual_stages_never_hurt() -> None:
    """A larger plan space never gives a worse optimum (both objectives)."""
    for seed in range(20):
        p = identical_chain_problem(seed)
        for objective in (TPS, BATCH_TIME):
            values = [solve(p, Options(objective=objective, max_virtual_stages=v), solver="dp").value
                      for v in (1, 2, 3)]
            assert values[1] <= values[0] * (1 + 1e-12) and values[2] <= values[1] * (1 + 1e-12), (seed, values)


def small_llama() -> Problem:
    raw = build_workload(preset("llama3-8b"), hardware("h100-sxm-80gb"), TrainingSetup(nodes=2, global_batch=32))
    return problem_from_dict(raw)


def test_front_end_workload_counts_against_ideals() -> None:
    """Llama 3 8B on 16 GPUs: the identical chain is found, and the uniform 1F1B optimum by counts
    equals the DP over ideals run per (t, d)."""
    p = small_llama()
    cand = candidates(p)
    chain = identical_chain(p, cand)
    assert chain is not None and (chain.first, chain.inner) == (1, 32)
    uniform = Options(objective=BATCH_TIME, uniform=True)
    by_counts = solve(p, uniform, solver="dp")
    by_ideals = solve_batch_1f1b(p, uniform, cand)
    assert by_counts.status == Status.OPTIMAL and check_result(p, uniform, by_counts) == []
    assert math.isclose(by_counts.value, by_ideals.value, rel_tol=1e-9)
    free = solve(p, Options(objective=BATCH_TIME), solver="dp")
    assert free.status == Status.OPTIMAL and free.value <= by_counts.value * (1 + 1e-12)
    assert math.isclose(free.value, solve_batch_1f1b(p, Options(objective=BATCH_TIME), cand).value, rel_tol=1e-9)
    for options in (Options(objective=BATCH_TIME, max_virtual_stages=4),
                    Options(objective=TPS, schedule="interleaved", max_virtual_stages=4)):
        res = solve(p, options, solver="dp")
        assert res.status == Status.OPTIMAL and check_result(p, options, res) == []
