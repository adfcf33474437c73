"""The equi (PipeDream-2BW-like) baseline: golden rows, ablations, generic graphs."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from baselines.equi import (
    TransformerLayout,
    authors_topological_order,
    solve_equi,
    split_evenly,
    transformer_layout,
)
from experiments.lib.instances import random_problem
from piper import solve
from piper.core.evaluate import check_plan, evaluate
from piper.core.options import NO_AR, Options, candidates
from piper.core.problem import ACTIVATION_RECOMP, Problem, problem_to_dict
from piper.core.result import Status
from piper.io.bert_layers import insert_bert_layers
from piper.io.workload import load_problem, problem_from_dict
from tests.helpers import random_cluster_cases
from tests.reference import problem_of, rows

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "experiments" / "workloads"


def _options(variant: str) -> Options:
    """The sample's equi variants as Options (as experiments.paper builds them)."""
    if variant == "equi":
        return Options()
    if variant == "equi_noTP":
        return Options(tensor_parallel=False)
    if variant == "equi_nonTransformer":
        return Options(tensor_parallel=False, params={"equi_mode": "topological"})
    raise AssertionError(variant)


EQUI_ROWS = [r for r in rows() if r["variant"].startswith("equi")]


@pytest.fixture(scope="module")
def bert() -> Problem:
    return load_problem(WORKLOADS / "bert32a100.json")


def test_sample_has_equi_rows() -> None:
    assert {r["variant"] for r in EQUI_ROWS} == {"equi", "equi_noTP", "equi_nonTransformer"}


@pytest.mark.parametrize("row", EQUI_ROWS, ids=[f"{r['config_id']}-{r['variant']}" for r in EQUI_ROWS])
def test_reproduces_reference_equi_rows(row: dict[str, Any]) -> None:
    problem = problem_of(row)
    res = solve(problem, _options(row["variant"]), solver="equi")
    assert res.solver == "equi"
    assert res.bound == 0.0
    if row["tps"] is None:
        assert res.status is Status.UNKNOWN  # no plan in equi's family is no proof
        assert res.plan is None and math.isinf(res.tps)
        return
    assert res.status is Status.FEASIBLE
    assert res.tps == pytest.approx(row["tps"], rel=1e-9)
    assert res.objective == pytest.approx(row["tps"], rel=1e-12)
    assert res.plan is not None
    # the same plan, stage by stage (node order too: the authors' discovery order)
    assert len(res.plan.stages) == row["num_stages"]
    for mine, ref in zip(res.plan.stages, row["stages"]):
        assert list(mine.nodes) == ref["nodes"]
        assert (mine.d, mine.t) == (ref["d"], ref["t"])
        assert [mine.tmpcs[v] for v in mine.nodes] == ref["tmpc"]
    assert res.plan.devices_used == row["devices_used"]
    assert res.plan.sum_d == row["sum_d"]


def test_split_evenly_puts_the_longer_groups_last() -> None:
    assert [len(g) for g in split_evenly(list(range(32)), 5)] == [6, 6, 6, 7, 7]
    assert split_evenly([1, 2, 3], 3) == [[1], [2], [3]]
    assert [len(g) for g in split_evenly(list(range(7)), 1)] == [7]


def test_bert_layout(bert: Problem) -> None:
    layout = transformer_layout(bert)
    assert isinstance(layout, TransformerLayout)
    assert len(layout.transformers) == 32
    assert layout.transformers[0] == 3 and layout.transformers[-1] == 35
    assert layout.initial == (1, 4, 0, 2)
    assert layout.final == (36,)
    assert sorted(authors_topological_order(bert)) == sorted(nd.id for nd in bert.nodes)


def test_bert48_layout_and_plan_valid(bert: Problem) -> None:
    p48 = insert_bert_layers(bert, 48).with_cluster(devices=64, microbatches=512)
    layout = transformer_layout(p48)
    assert isinstance(layout, TransformerLayout) and len(layout.transformers) == 48
    res = solve_equi(p48)
    assert res.status is Status.FEASIBLE and res.plan is not None
    check_plan(p48, res.plan)
    assert len({(s.d, s.t) for s in res.plan.stages}) == 1


@pytest.mark.parametrize("k,mem_gib", [(32, 2), (128, 8), (512, 1)])
def test_ablations_are_respected(bert: Problem, k: int, mem_gib: int) -> None:
    p = bert.with_cluster(devices=k, memory=mem_gib * 2**30, microbatches=1920, bandwidth=25 * 2**30)
    full = solve_equi(p)
    no_tp = solve_equi(p, Options(tensor_parallel=False))
    no_dp = solve_equi(p, Options(data_parallel=False))
    no_ar = solve_equi(p, Options(exclude_tmpcs=NO_AR))
    for res in (full, no_tp, no_dp, no_ar):
        if res.plan is None:
            assert res.status is Status.UNKNOWN
            continue
        stages = res.plan.stages
        # same d and t everywhere, recomputation on every layer or none
        assert len({(s.d, s.t) for s in stages}) == 1
        assert len({c for s in stages for c in s.tmpcs.values()}) == 1
        assert evaluate(p, res.plan).tps == res.tps
    if no_tp.plan:
        assert all(s.t == 1 for s in no_tp.plan.stages)
    if no_dp.plan:
        assert all(s.d == 1 for s in no_dp.plan.stages)
    if no_ar.plan:
        assert all(c != ACTIVATION_RECOMP for s in no_ar.plan.stages for c in s.tmpcs.values())
    # every ablation only shrinks the search space
    for res in (no_tp, no_dp, no_ar):
        assert res.tps >= full.tps


def test_no_separate_stages_only_shrinks_the_space(bert: Problem) -> None:
    p = bert.with_cluster(devices=64, memory=2 * 2**30, microbatches=1920, bandwidth=25 * 2**30)
    both = solve_equi(p)
    merged = solve_equi(p, Options(params={"equi_separate": False}))
    assert merged.tps >= both.tps
    assert merged.stats["non_transformer_separately"] is False


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_valid_and_never_beat_the_optimum(seed: int) -> None:
    """Topological mode on random graphs: valid plans, never better than brute force."""
    p = random_problem(seed)
    res = solve_equi(p)
    assert res.stats["mode"] == "topological"
    assert res.bound == 0.0
    opt = solve(p, None, solver="brute")
    if res.plan is None:
        # a proof only when brute force agrees that nothing fits
        assert res.status is (Status.INFEASIBLE if candidates(p).infeasible_reason else Status.UNKNOWN)
    else:
        check_plan(p, res.plan)
        assert res.status is Status.FEASIBLE
        assert res.tps >= opt.tps * (1 - 1e-12)


def _mini_transformer(extra_isolated: bool) -> Problem:
    """emb -> T1 -> T2 -> T3 -> head, plus (optionally) a layer on its own."""
    def tm(p: float) -> dict[str, Any]:
        return {"1": [
            {"id": "vanilla", "timePerSample": p, "parameterSize": 10.0, "memoryUsageA": 4.0, "memoryUsageB": 1.0,
             "syncTimeFw": {}, "syncTimeBw": {}},
            {"id": "activation recomp", "timePerSample": 1.5 * p, "parameterSize": 10.0, "memoryUsageA": 1.0,
             "memoryUsageB": 1.0, "syncTimeFw": {}, "syncTimeBw": {}},
        ]}

    names = ["emb", "ParallelTransformerLayer", "ParallelTransformerLayer", "ParallelTransformerLayer", "head"]
    if extra_isolated:
        names.append("lonely")
    edges = [(0, 1), (1, 2), (2, 3), (3, 4)]
    nodes = []
    for i, name in enumerate(names):
        t = tm(float(i + 1))
        for c in t["1"]:
            c["syncTimeFw"] = {str(u): 0.0 for u, v in edges if v == i}
            c["syncTimeBw"] = {str(v): 0.0 for u, v in edges if u == i}
        nodes.append({"id": i, "name": name, "TMPCs": t})
    raw = {"maxDevices": 6, "maxMemoryPerDevice": 100.0, "mbsInBatch": 4, "bandwidth": 8.0, "nodes": nodes,
           "edges": [{"sourceId": u, "destId": v, "communicationCost": 2.0} for u, v in edges]}
    return problem_from_dict(raw)


def test_small_transformer_graph_matches_hand_enumeration() -> None:
    p = _mini_transformer(False)
    res = solve_equi(p)
    assert res.stats["mode"] == "transformer"
    # hand enumeration of the authors' search space
    best = math.inf
    from piper.core.plan import Plan, Stage

    layouts = {
        1: [[[1, 2, 3, 0, 4]]],
        2: [[[1, 0], [2, 3, 4]]],
        3: [[[1, 0], [2], [3, 4]], [[0], [1, 2, 3], [4]]],
        4: [[[0], [1], [2, 3], [4]]],
        5: [[[0], [1], [2], [3], [4]]],
    }
    for n_st, parts_list in layouts.items():
        for parts in parts_list:
            for d in (1, 2, 4):
                if n_st * d > 4:
                    continue
                for tid in ("vanilla", "activation recomp"):
                    plan = Plan(tuple(Stage(tuple(s), d, 1, {v: tid for v in s}) for s in parts))
                    best = min(best, evaluate(p, plan).tps)
    assert res.tps == pytest.approx(best, rel=1e-12)


def test_layer_unrelated_to_transformers_falls_back_to_topological() -> None:
    p = _mini_transformer(True)
    res = solve_equi(p, Options(params={"equi_mode": "transformer"}))
    assert res.stats["mode"] == "topological"
    assert "not applicable" in res.message
    assert res.plan is not None
    check_plan(p, res.plan)


def test_layer_between_transformers_falls_back_to_topological() -> None:
    """emb -> T1 -> x -> T2 -> T3 -> head: x is no transformer, so no transformer split is valid."""
    p = _mini_transformer(False)
    raw = problem_to_dict(p)
    raw["nodes"][2]["name"] = "not a transformer"
    q = problem_from_dict(raw)
    assert "backwards" in str(transformer_layout(q))
    res = solve_equi(q)
    assert res.stats["mode"] == "topological" and res.plan is not None
    check_plan(q, res.plan)


def test_nothing_fits_is_unknown_with_zero_bound_not_a_proof(bert: Problem) -> None:
    # every layer fits alone (its least a + b is at most M), but no equi plan fits
    least = max(min(c.memory_a + c.memory_b for lst in nd.tmpcs.values() for c in lst) for nd in bert.nodes)
    p = bert.with_cluster(devices=8, memory=least, microbatches=8)
    res = solve_equi(p)
    assert res.status is Status.UNKNOWN and res.bound == 0.0 and res.plan is None


def test_a_layer_that_fits_in_no_stage_is_a_proof_of_infeasibility(bert: Problem) -> None:
    p = bert.with_cluster(devices=8, memory=1e6, microbatches=8)
    res = solve_equi(p)
    assert res.status is Status.INFEASIBLE and math.isinf(res.bound) and res.plan is None
    assert "does not fit in memory with any allowed TMPC" in res.message


def test_a_layer_without_usable_tmpc_is_a_proof_of_infeasibility(bert: Problem) -> None:
    p = bert.with_cluster(devices=8, memory=80e9, microbatches=8)
    res = solve_equi(p, Options(exclude_tmpcs=frozenset({"vanilla", "activation recomp"})))
    assert res.status is Status.INFEASIBLE and math.isinf(res.bound) and "no usable TMPC" in res.message


def test_bad_mode_is_a_clear_error(bert: Problem) -> None:
    with pytest.raises(ValueError, match="equi_mode"):
        solve_equi(bert, Options(params={"equi_mode": "nope"}))


def test_problem_roundtrip_keeps_names(bert: Problem) -> None:
    # transformer detection relies on node names surviving a dict round trip
    again = problem_from_dict(problem_to_dict(bert))
    assert isinstance(transformer_layout(again), TransformerLayout)
    assert replace(again, devices=again.devices) == again


def test_plans_on_clusters_of_nodes_are_valid_uniform_and_scored_by_the_evaluator() -> None:
    found = 0
    for p in random_cluster_cases(120, seed=17):
        res = solve(p, solver="equi")
        if res.plan is None:
            continue
        found += 1
        check_plan(p, res.plan)
        assert res.tps == evaluate(p, res.plan).tps and res.objective == res.tps
        assert len({(s.d, s.t) for s in res.plan.stages}) == 1
        # an equi plan is a uniform plan: the uniform DP optimum is no worse
        assert solve(p, Options(uniform=True), solver="dp").tps <= res.tps * (1 + 1e-9)
    assert found >= 60
