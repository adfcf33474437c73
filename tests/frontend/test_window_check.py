"""The window check (piper/frontend/window_check.py): with the resync's overlap the search prices it
over 1F1B's window, ``score`` over each plan's own; the check bounds the plans the search may
overvalue and keeps "optimal" only when no plan beats the answer as ``score`` prices them.

The instance: Llama 3 8B on 4 DGX A100 nodes at a tenth of the network bandwidth, 16 sequences per
iteration, both overlaps. The search (exact over its own pricing) answers an interleaved plan at
1.645 s, while another workload's interleaved plan, which hides more of its resync behind its wider
window, runs 1.637 s as ``score`` prices it: "optimal" would have been wrong there."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from piper import Options, evaluate
from piper.core.options import BATCH_TIME
from piper.frontend.hardware import hardware
from piper.frontend.planner import ONE_RECOMPUTE_SETTING, as_scored, search_plans
from piper.frontend.presets import preset
from piper.frontend.schedule_check import check_schedule
from piper.frontend.window_check import needs_window_check, window_check, without_resync
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from piper.solvers.registry import get_solver

CFG = preset("llama3-8b")
A100 = hardware("a100-80gb")
SLOW = replace(A100, network_bandwidth=A100.network_bandwidth / 10)
SETUP = TrainingSetup(nodes=4, global_batch=16, overlap_grad_reduce=True, overlap_param_gather=True,
                      sequence_parallel=True)
OPTIONS = Options(objective=BATCH_TIME, max_virtual_stages=4)


@pytest.fixture(scope="module")
def search():
    return search_plans(CFG, SLOW, SETUP, get_solver("dp"), OPTIONS, micro_batches=(1, 2), free=False,
                        check_schedules=True, recomputes=ONE_RECOMPUTE_SETTING, per_degree=True,
                        iteration_keys=True)


def _scored(c):
    score = as_scored(CFG, SLOW, SETUP, c)
    return None if score is None else score.batch_time


def test_the_search_alone_would_certify_an_answer_score_beats(search):
    """The premise: the search is exact over its pricing, yet a plan it found (passing the schedule
    check) beats its answer as ``score`` prices both. The check must not call the answer optimal."""
    assert search.exact
    answer = _scored(search.runnable)
    priced = [(_scored(c), c) for c in search.candidates if c.result.plan is not None
              and check_schedule(c.problem, c.result.plan, c.result.score).ok]
    best, where = min(((v, c) for v, c in priced if v is not None), key=lambda t: t[0])
    assert best < answer * (1 - 1e-3)
    assert where.result.plan.schedule.virtual_stages > 1  # a wider window than the search priced
    check = window_check(search, answer, get_solver("dp"), OPTIONS, free=False)
    assert not check.proven
    assert check.bound <= best
    assert check.schedules == "interleaved" and check.solves == len(search.candidates)


def test_each_plan_without_the_resync_is_no_slower_than_score_prices_it(search):
    """The bound's premise, plan by plan: a plan's batch time on its workload without the resync is
    at most its time as ``score`` prices it (whatever window it has), and at most the search's value."""
    checked = 0
    for c in search.candidates:
        if c.result.plan is None:
            continue
        free = evaluate(load_problem(without_resync(c.workload), strict=True), c.result.plan)
        scored = _scored(c)
        assert free.batch_time <= scored * (1 + 1e-12) and free.batch_time <= c.value * (1 + 1e-12)
        checked += 1
    assert checked >= 10


def test_without_resync_drops_only_the_resync():
    workload = build_workload(CFG, SLOW, replace(SETUP, optimizer_step=True), degrees=(2,), recompute=("none",))
    before = copy.deepcopy(workload)
    out = without_resync(workload)
    assert workload == before  # a copy
    for node, orig in zip(out["nodes"], workload["nodes"]):
        for t, entries in node["TMPCs"].items():
            for entry, o in zip(entries, orig["TMPCs"][t]):
                assert entry["parameterSize"] == 0.0 and "resyncOverlapTime" not in entry
                assert {k: v for k, v in entry.items() if k not in ("parameterSize", "expertParameterSize")} == \
                    {k: v for k, v in o.items() if k not in ("parameterSize", "expertParameterSize", "resyncOverlapTime")}
    assert any(e["parameterSize"] > 0 and e["resyncOverlapTime"] > 0
               for n in workload["nodes"] for es in n["TMPCs"].values() for e in es)
    assert {k: v for k, v in out.items() if k != "nodes"} == {k: v for k, v in workload.items() if k != "nodes"}


def test_needs_the_check_only_with_the_overlap_and_wider_windows(search):
    assert needs_window_check(SETUP, OPTIONS, search, free=False)
    assert not needs_window_check(replace(SETUP, overlap_grad_reduce=False, overlap_param_gather=False), OPTIONS,
                                  search, free=False)
    assert not needs_window_check(SETUP, replace(OPTIONS, max_virtual_stages=1), search, free=False)


def test_plan_says_feasible_with_the_bound_where_score_may_prefer_another_plan(cli):
    code, out, err = cli("piper", "plan", "llama3-8b", "--gpu", "a100-80gb", "--nodes", "4", "--global-batch", "16",
                         "--network-bandwidth", "2.5GB", "--uniform", "--overlap-grad-reduce", "--overlap-param-gather",
                         "--max-virtual-stages", "4", "--micro-batch", "1", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["exact"] is True  # the search's own proof
    assert res["status"] == "feasible" and res["window_check"]["proven"] is False
    assert res["bound"] == pytest.approx(res["window_check"]["bound"], rel=1e-12)
    assert res["bound"] < res["batch_time_with_optimizer_step_s"]


def test_plan_keeps_optimal_where_the_check_proves_it(cli):
    code, out, err = cli("piper", "plan", "llama2-13b", "--gpu", "a100-80gb", "--nodes", "2", "--global-batch", "16",
                         "--uniform", "--overlap-grad-reduce", "--overlap-param-gather", "--max-virtual-stages", "4",
                         "--micro-batch", "1", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["status"] == "optimal" and res["window_check"]["proven"] is True and res["bound"] is None
    assert res["window_check"]["bound"] >= res["window_check"]["value"] * (1 - 1e-9)


def test_per_layer_recomputation_checks_every_plan(cli):
    """With --recompute-per-layer a layer's TMPCs share the least overlap (an upper bound for 1F1B plans
    too), so the check covers every schedule, not only the interleaved plans."""
    code, out, err = cli("piper", "plan", "llama3-8b", "--gpu", "a100-80gb", "--nodes", "4", "--global-batch", "16",
                         "--network-bandwidth", "2.5GB", "--uniform", "--overlap-grad-reduce", "--recompute-per-layer",
                         "--max-virtual-stages", "1", "--micro-batch", "1", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["window_check"] is not None and res["window_check"]["schedules"] == "any"
    assert res["window_check"]["bound"] <= res["batch_time_with_optimizer_step_s"] * (1 + 1e-9)
    assert res["status"] == ("optimal" if res["window_check"]["proven"] else "feasible")


def test_plan_answers_the_better_plan_the_check_finds(cli):
    """Over micro-batches 1-16 the search's answer (b = 1, 1.645 s) is beaten as ``score`` prices it by
    a b = 2 plan (Megatron's even split at t = 4, v = 4: 1.637 s) whose workload the search cut off
    by its own pricing (1.988 s there); the check solves that workload again and answers it."""
    code, out, err = cli("piper", "plan", "llama3-8b", "--gpu", "a100-80gb", "--nodes", "4", "--global-batch", "16",
                         "--network-bandwidth", "2.5GB", "--uniform", "--overlap-grad-reduce", "--overlap-param-gather",
                         "--max-virtual-stages", "4", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["window_check"]["found_better"] is True and res["micro_batch"] == 2
    assert res["batch_time_with_optimizer_step_s"] == pytest.approx(res["window_check"]["value"], rel=1e-12)
    assert res["batch_time_with_optimizer_step_s"] < 1.645 * (1 - 1e-3) < res["batch_time_s"]
    assert res["schedule_check"]["ok"] is True
    assert res["status"] == "feasible" and res["bound"] <= res["batch_time_with_optimizer_step_s"]


def test_a_spent_time_limit_proves_nothing(search):
    check = window_check(search, 1.645, get_solver("dp"), OPTIONS, free=False, time_limit_s=0.0)
    assert check.solves == 0 and check.bound == 0.0 and not check.proven
    assert check.unproven == len({id(c.workload) for c in search.candidates})


def test_a_search_without_the_iteration_keys_is_not_called_optimal(cli):
    """A solver that does not take the keys gets workloads without the optimizer step and the overlap,
    so its proof says nothing of the iteration ``score`` prices: the check covers every plan and,
    the step being left out of its bound too, the answer stays "feasible" with that bound."""
    from piper.core.problem import CLUSTER_FEATURES, EXPERT_FEATURES
    from piper.solvers.registry import DP_OBJECTIVES, DP_PARAMS, DP_SCHEDULES, SolverInfo, register, unregister

    register(SolverInfo("dp-without-keys", "piper.dp:solve_dp", True, "the DP, registered without the keys",
                        {"knapsack": "exact"}, features=frozenset(CLUSTER_FEATURES + EXPERT_FEATURES),
                        params=DP_PARAMS, objectives=DP_OBJECTIVES, schedules=DP_SCHEDULES))
    try:
        code, out, err = cli("piper", "plan", "llama2-13b", "--gpu", "h100", "--nodes", "2", "--global-batch", "16",
                             "--uniform", "--micro-batch", "1", "--solver", "dp-without-keys", "--json")
    finally:
        unregister("dp-without-keys")
    assert code == 0, err
    res = json.loads(out)
    assert res["iteration_keys_in_search"] is False and res["exact"] is True
    check = res["window_check"]
    assert check is not None and check["schedules"] == "any" and not check["proven"]
    assert res["status"] == "feasible"
    assert 0 < res["bound"] <= res["batch_time_with_optimizer_step_s"]
    assert res["batch_time_with_optimizer_step_s"] > res["batch_time_s"]  # the step the search left out
