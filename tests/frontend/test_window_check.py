"""The overlap window in the planner's search (docs/problem.md §10.1) and the window check
(piper/frontend/window_check.py).

The instance: Llama 3 8B on 4 DGX A100 nodes at a tenth of the network bandwidth, 16 sequences per
iteration, both overlaps. Until 2026-12-04 the search priced every plan's resync overlap over 1F1B's
window of one micro-batch: it was exact over that pricing and answered a b = 1 plan at 1.645 s, while
a b = 2 plan (Megatron's even split at t = 4, v = 4) runs 1.637 s as ``score`` prices it (the search
had it at 1.988 s). The search now prices each plan's own window (``resyncOverlapWindow``
"schedule"); the window check remains for the searches whose pricing still differs from ``score``'s
(per-layer recomputation, a solver without the iteration keys), and its machinery is tested here on
the old pricing too (``old_pricing``)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from piper import Options, evaluate
from piper.core.options import BATCH_TIME
from piper.frontend import planner
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
KW = {"micro_batches": (1, 2), "free": False, "check_schedules": True, "recomputes": ONE_RECOMPUTE_SETTING,
      "per_degree": True, "iteration_keys": True}


_SEARCH_SETUP = planner.search_setup


def _old_search_setup(setup: TrainingSetup, iteration_keys: bool) -> TrainingSetup:
    """The search's setup before 2026-12-04: every plan's overlap over 1F1B's window."""
    return replace(_SEARCH_SETUP(setup, iteration_keys), resync_overlap_window="microbatch")


@pytest.fixture(scope="module")
def search():
    return search_plans(CFG, SLOW, SETUP, get_solver("dp"), OPTIONS, **KW)


@pytest.fixture(scope="module")
def old_pricing():
    """The same search with every plan's overlap over 1F1B's window (the pricing before 2026-12-04)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner, "search_setup", _old_search_setup)
        found = search_plans(CFG, SLOW, SETUP, get_solver("dp"), OPTIONS, **KW)
    return found


def _scored(c):
    score = as_scored(CFG, SLOW, SETUP, c)
    return None if score is None else score.batch_time


def test_the_search_prices_each_plan_as_score_does(search):
    """Every plan the search found is worth what ``score`` prices its layout (its own schedule's
    window), and the answer is the b = 2 plan at 1.637 s that the old pricing missed."""
    interleaved = 0
    for c in search.candidates:
        if c.result.plan is None:
            continue
        assert c.value == pytest.approx(_scored(c), rel=1e-9)
        interleaved += c.result.plan.schedule.interleaved
    assert interleaved >= 3
    best = search.runnable
    assert best.micro_batch == 2 and best.result.plan.schedule.virtual_stages == 4
    assert best.value < 1.645 * (1 - 1e-3)


def test_the_old_pricing_would_certify_an_answer_score_beats(old_pricing, search):
    """The premise of the window check: over 1F1B's window the search is exact yet beaten as ``score``
    prices its plans, and the check refuses to call its answer optimal."""
    assert old_pricing.exact
    answer = _scored(old_pricing.runnable)
    assert answer == pytest.approx(1.645, rel=1e-3)
    better = _scored(search.runnable)
    assert better < answer * (1 - 1e-3)
    check = window_check(old_pricing, answer, get_solver("dp"), OPTIONS, free=False)
    assert not check.proven and check.bound <= better
    assert check.schedules == "interleaved" and check.solves == len(old_pricing.candidates)


def test_the_check_finds_the_better_plan_on_the_old_pricing(old_pricing, search):
    """With ``rescore`` and ``resolve`` the check solves again the workloads it cannot prune that the
    search had cut off (here with the old pricing, as the search of that workload was) and finds the
    b = 2 plan."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planner, "search_setup", _old_search_setup)
        pruned = search_plans(CFG, SLOW, SETUP, get_solver("dp"), OPTIONS, prune=True, **KW)

        def resolve(c):
            one = search_plans(CFG, SLOW, SETUP, get_solver("dp"), OPTIONS, **{
                **KW, "micro_batches": (c.micro_batch,), "recomputes": (c.recompute,), "degrees": c.degrees})
            return one.runnable

        answer = _scored(pruned.runnable)
        check = window_check(pruned, answer, get_solver("dp"), OPTIONS, free=False, rescore=_scored, resolve=resolve)
    assert check.better is not None and check.better.micro_batch == 2
    assert check.value == pytest.approx(_scored(search.runnable), rel=1e-9) and check.value < answer
    assert check_schedule(check.better.problem, check.better.result.plan, check.better.result.score).ok
    assert not check.proven and check.bound <= check.value


def test_each_plan_without_the_resync_is_no_slower_than_score_prices_it(old_pricing):
    """The bound's premise, plan by plan: a plan's batch time on its workload without the resync is
    at most its time as ``score`` prices it (whatever window it has), and at most the search's value."""
    checked = 0
    for c in old_pricing.candidates:
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


def test_when_the_check_is_needed(search):
    # the search prices each plan's own window: nothing to check with one recomputation setting
    assert not needs_window_check(SETUP, OPTIONS, search, free=False)
    assert not needs_window_check(replace(SETUP, overlap_grad_reduce=False, overlap_param_gather=False), OPTIONS,
                                  search, free=False)
    # a layer choosing its recomputation shares the least h; a search without the keys left out the step
    per_layer = replace(search, candidates=tuple(replace(c, recompute=None) for c in search.candidates))
    assert needs_window_check(SETUP, OPTIONS, per_layer, free=False)
    assert needs_window_check(SETUP, OPTIONS, replace(search, iteration_keys=False), free=False)


def test_a_spent_time_limit_proves_nothing(old_pricing):
    check = window_check(old_pricing, 1.645, get_solver("dp"), OPTIONS, free=False, time_limit_s=0.0)
    assert check.solves == 0 and check.bound == 0.0 and not check.proven
    assert check.unproven == len({id(c.workload) for c in old_pricing.candidates})


def test_plan_answers_what_score_prices_best(cli):
    code, out, err = cli("piper", "plan", "llama3-8b", "--gpu", "a100-80gb", "--nodes", "4", "--global-batch", "16",
                         "--network-bandwidth", "2.5GB", "--uniform", "--overlap-grad-reduce", "--overlap-param-gather",
                         "--max-virtual-stages", "4", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["micro_batch"] == 2 and res["schedule"] == {"kind": "interleaved", "virtualStages": 4}
    assert res["batch_time_s"] == pytest.approx(res["batch_time_with_optimizer_step_s"], rel=1e-9)
    assert res["batch_time_s"] < 1.645 * (1 - 1e-3)
    assert res["window_check"] is None  # the search's own pricing is score's


@pytest.mark.parametrize("model, extra, proven", [
    ("llama2-13b", (), True),
    ("llama3-8b", ("--network-bandwidth", "2.5GB", "--nodes", "4"), False),
])
def test_per_layer_recomputation_is_checked_over_every_plan(cli, model, extra, proven):
    """With --recompute-per-layer a layer's TMPCs share the least overlap (an upper bound for 1F1B
    plans too), so the check covers every schedule: proven on Llama 2 13B, not on the slow network."""
    args = ("--nodes", "2", *extra) if "--nodes" not in extra else extra
    code, out, err = cli("piper", "plan", model, "--gpu", "a100-80gb", *args, "--global-batch", "16", "--uniform",
                         "--overlap-grad-reduce", "--overlap-param-gather", "--recompute-per-layer",
                         "--max-virtual-stages", "4", "--micro-batch", "1", "--json")
    assert code == 0, err
    res = json.loads(out)
    check = res["window_check"]
    assert check is not None and check["schedules"] == "any" and check["proven"] is proven
    assert check["bound"] <= res["batch_time_with_optimizer_step_s"] * (1 + 1e-9)
    if proven:
        assert res["status"] == "optimal" and res["bound"] is None
    else:
        assert res["status"] == "feasible"


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


def test_the_workload_carries_the_window_key_only_with_the_overlap():
    from piper.core.errors import FrontendError

    keyed = replace(SETUP, resync_overlap_window="schedule")
    assert build_workload(CFG, SLOW, keyed, degrees=(2,), recompute=("none",))["resyncOverlapWindow"] == "schedule"
    no_overlap = replace(keyed, overlap_grad_reduce=False, overlap_param_gather=False)
    assert "resyncOverlapWindow" not in build_workload(CFG, SLOW, no_overlap, degrees=(2,), recompute=("none",))
    assert "resyncOverlapWindow" not in build_workload(CFG, SLOW, SETUP, degrees=(2,), recompute=("none",))
    assert planner.search_setup(SETUP, True).resync_overlap_window == "schedule"
    assert planner.search_setup(SETUP, False).resync_overlap_window == "microbatch"
    with pytest.raises(FrontendError, match="resync_overlap_window"):
        replace(SETUP, resync_overlap_window="1f1b")
