"""The planner's search (piper/frontend/planner.py): the free searches cut off below the best
free plan found so far (the DP's ``upper_bound`` knob) end with the same winner as the searches
without cut-offs, and the search still counts as exact."""

from __future__ import annotations

from dataclasses import replace

from piper.core.options import BATCH_TIME, Options
from piper.frontend.hardware import hardware
from piper.frontend.planner import search_plans
from piper.frontend.presets import preset
from piper.frontend.workload import TrainingSetup
from piper.solvers.registry import get_solver


def test_cut_off_free_searches_find_the_same_winner() -> None:
    cfg = preset("megatron-1.7b")
    hw = hardware("a100-80gb")
    setup = TrainingSetup(nodes=1, global_batch=64)
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=4)
    dp = get_solver("dp")
    plain_info = replace(dp, params={k: v for k, v in dp.params.items() if k != "upper_bound"})
    with_cuts = search_plans(cfg, hw, setup, dp, options, micro_batches=(1, 2, 4, 8))
    without = search_plans(cfg, hw, setup, plain_info, options, micro_batches=(1, 2, 4, 8))
    assert with_cuts.exact and without.exact
    assert with_cuts.free is not None and without.free is not None
    assert abs(with_cuts.free.value - without.free.value) <= 1e-9 * without.free.value
    assert with_cuts.runnable.value == without.runnable.value
    # the cut-offs were used: some free search after the first proved it holds nothing better
    cut = [c for c in with_cuts.candidates if not c.uniform and "upper_bound" in c.result.message]
    assert cut, [c.result.message for c in with_cuts.candidates]


def test_per_degree_workloads_price_each_degrees_resync_at_its_own_bandwidth() -> None:
    """megatron-1.7b on 4 DGX A100 nodes: a workload offering every degree prices the resync between
    nodes at t = 8's bandwidth (one link per device), 8x too slow for t = 1. The per-degree search's
    winner is the best of the searches of one degree each (computed apart), at least as fast as the
    all-degree search's, and here strictly faster (its t < 8 layouts were overpriced)."""
    from piper.frontend.workload import resync_bandwidths, tensor_parallel_degrees

    cfg = preset("megatron-1.7b")
    hw = hardware("a100-80gb")
    setup = TrainingSetup(nodes=4, global_batch=512)
    assert resync_bandwidths(hw, setup, 1)[0] == 8 * resync_bandwidths(hw, setup, 8)[0]
    options = Options(objective=BATCH_TIME, max_virtual_stages=1)
    dp = get_solver("dp")
    kwargs = {"micro_batches": (1, 2), "free": False, "prune": True}
    per_degree = search_plans(cfg, hw, setup, dp, options, per_degree=True, **kwargs)
    each = [search_plans(cfg, hw, setup, dp, options, degrees=(t,), **kwargs).runnable
            for t in tensor_parallel_degrees(cfg, hw)]
    every = search_plans(cfg, hw, setup, dp, options, **kwargs).runnable
    assert per_degree.exact and {c.degrees for c in per_degree.candidates} == {(t,) for t in (1, 2, 4, 8)}
    assert per_degree.runnable.value == min(c.value for c in each if c is not None)
    assert per_degree.runnable.value < every.value * (1 - 1e-3)


def test_a_rejected_interleaved_plan_is_replaced_by_the_best_with_fewer_virtual_stages() -> None:
    """megatron-1.7b on 2 DGX A100 nodes, t = 1, micro-batch 1: the best plan of at most 8 virtual
    stages (v = 8, 0.2741 s) fails the schedule check, so does the best of at most 7; the best of at
    most 6 (v = 6, 0.2749 s) passes and is the workload's answer, where the fallback to 1F1B gave
    0.2931 s."""
    cfg = preset("megatron-1.7b")
    hw = hardware("a100-80gb")
    setup = TrainingSetup(nodes=2, global_batch=32)
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=8)
    dp = get_solver("dp")
    search = search_plans(cfg, hw, setup, dp, options, micro_batches=(1,), free=False, degrees=(1,),
                          check_schedules=True)
    one_f = search_plans(cfg, hw, setup, dp, replace(options, max_virtual_stages=1), micro_batches=(1,), free=False,
                         degrees=(1,))
    (cand,), (base,) = search.candidates, one_f.candidates
    assert cand.rejected is not None and cand.rejected.plan.schedule.virtual_stages == 8
    assert cand.result.plan.schedule.virtual_stages == 6
    assert cand.value < base.value * (1 - 1e-2)
    assert search.rejected == (cand,) and search.exact


def test_the_plan_beside_the_answer_is_optimal_only_when_its_whole_search_is_proven() -> None:
    """``plan`` shows the free plan beside the runnable answer (and the runnable one under --free)
    with a status of its own. It used to print its one solve's status: "optimal" for the free plan
    while other free solves had run out of time (DeepSeek-V3 on 128 nodes at the 300 s default). The
    status is the search's: one free solve left unproven lowers the free plan to "feasible" and
    leaves the runnable plan's status alone."""
    from piper.cli.plan import _side_status
    from piper.core.result import Status
    from piper.frontend.schedule_check import check_schedule

    cfg = preset("megatron-1.7b")
    hw = hardware("a100-80gb")
    setup = TrainingSetup(nodes=1, global_batch=64)
    options = Options(objective=BATCH_TIME, max_virtual_stages=1)
    search = search_plans(cfg, hw, setup, get_solver("dp"), options, micro_batches=(1, 2, 4), iteration_keys=True)
    assert search.exact and search.free is not None and search.runnable is not None

    def side(s, c):
        return _side_status(setup, options, s, c, check_schedule(c.problem, c.result.plan, c.result.score))

    assert side(search, search.free) == "optimal" and side(search, search.runnable) == "optimal"
    # a free solve other than the winner ends without a proof (as when the time limit cuts it)
    loser = next(c for c in search.candidates if not c.uniform and c is not search.free)
    cut = replace(loser, result=replace(loser.result, status=Status.UNKNOWN, bound=0.0, plan=None, score=None))
    timed_out = replace(search, candidates=tuple(cut if c is loser else c for c in search.candidates))
    assert not timed_out.exact_over(False) and timed_out.exact_over(True)
    assert side(timed_out, search.free) == "feasible" and side(timed_out, search.runnable) == "optimal"


def test_no_workload_is_built_nor_solved_once_the_time_limit_is_spent() -> None:
    """With no time left neither a workload is built nor a solve started (GPT-OSS's 2,625 workloads
    ran 56 s past a 20 s limit, then 20 s past a 1 s limit on the building alone): each such key is
    "unknown" without a problem, its message says why, and the search is not exact."""
    from piper.core.result import Status

    cfg = preset("megatron-1.7b")
    hw = hardware("a100-80gb")
    setup = TrainingSetup(nodes=1, global_batch=64)
    search = search_plans(cfg, hw, setup, get_solver("dp"), Options(objective=BATCH_TIME, time_limit_s=0.0),
                          micro_batches=(1, 2))
    assert search.candidates and search.runnable is None and search.free is None and not search.exact
    for c in search.candidates:
        assert c.result.status == Status.UNKNOWN and c.result.plan is None and c.result.time_s == 0.0
        assert c.result.message == "time limit hit before this workload was built"
        assert c.problem is None and c.workload is None


def test_a_plan_found_under_a_cutoff_stays_when_its_solve_again_runs_out_of_time() -> None:
    """A workload that ends within TIE of the best under a cutoff is solved again without it; when
    the time limit cuts that solve (no plan), the plan found under the cutoff stays (it was replaced
    by the plan-less result, and a tie for the best plan could be lost)."""
    from piper.core.result import Status
    from piper.frontend.planner import _pruned_uniform

    cfg = preset("megatron-1.7b")
    search = search_plans(cfg, hardware("a100-80gb"), TrainingSetup(nodes=1, global_batch=64), get_solver("dp"),
                          Options(objective=BATCH_TIME, max_virtual_stages=1), micro_batches=(1,), free=False)
    best = search.runnable
    problems = {"a": (best.problem, best.workload), "b": (best.problem, best.workload)}  # a tie
    seen: set = set()

    def run(key, uniform, cutoff):
        if cutoff is None and key in seen:  # the solve again, cut by the time limit
            return replace(best, cutoff=None, result=replace(best.result, status=Status.UNKNOWN, plan=None,
                                                                 score=None, bound=0.0))
        seen.add(key)
        return replace(best, cutoff=cutoff)

    done, resolved = _pruned_uniform(["a", "b"], problems, Options(objective=BATCH_TIME, uniform=True), run)
    assert resolved == 1 and all(c.result.plan is not None for c in done)
    assert [c.cutoff for c in done] == [None, best.value]
