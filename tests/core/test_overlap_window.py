"""``resyncOverlapWindow`` (docs/problem.md §10.1): with "schedule" a device group of an interleaved
plan hides its h times its schedule's window W = min(N // d, ((v - 1) L + 1) / v); the loader, the
evaluator (a hand-computed plan), brute force and Piper's DP (against brute force on chains) honour
it, and the DP refuses an h it cannot price."""

from __future__ import annotations

import random

import pytest

from baselines.brute import solve_brute
from experiments.lib.instances import with_iteration_keys, with_schedule_window
from piper import Options, evaluate, problem_from_dict, problem_to_dict, solve
from piper.core.errors import ProblemError, SolverError
from piper.core.options import BATCH_TIME, TPS
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.core.problem import overlap_window
from tests.dp.identical_chains import disagreement, identical_chain_problem, periodic_chain_problem
from tests.helpers import tmpc, workload


def _chain(h: float, window: str | None, w: float = 1.0) -> dict:
    # four layers, p = 1, w bytes, h each; N = 4, k = 4, B = 1, f = 4 (the default)
    nodes = {i: {1: [{**tmpc("a", p=1.0, w=w), "resyncOverlapTime": h}]} for i in range(4)}
    w = workload(nodes, [(i, i + 1, 0.0) for i in range(3)], k=4, N=4, B=1.0)
    if window is not None:
        w["resyncOverlapWindow"] = window
    return w


def _interleaved_plan() -> Plan:
    # L = 2 groups of d = 2, v = 2: chunk j (one layer each) on group j mod 2
    return Plan(tuple(Stage((i,), 2, 1, {i: "a"}) for i in range(4)), Schedule(INTERLEAVED, 2))


@pytest.mark.parametrize("window, want", [(None, 1.5), ("microbatch", 1.5), ("schedule", 1.25)])
def test_a_plan_by_hand(window, want):
    # per group: compute 2 layers x p / d = 1.0; resync bytes per sample 2 x f (d - 1) w / (d N) = 1.0,
    # N R / B = 4 per iteration, of which H = 2 h = 2 hides ("microbatch": exposed (4 - 2) / 4 = 0.5)
    # or W H with W = min(N // d, ((v - 1) L + 1) / v) = min(2, 1.5) = 1.5 ("schedule": (4 - 3) / 4 = 0.25)
    p = problem_from_dict(_chain(1.0, window))
    assert overlap_window(p, 2, 2, 2) == (1.5 if window == "schedule" else 1.0)
    assert overlap_window(p, 2, 1, 2) == 1.0  # 1F1B: one micro-batch
    score = evaluate(p, _interleaved_plan())
    assert score.tps == pytest.approx(want, rel=1e-12)
    assert all(st.resync == pytest.approx(want - 1.0, rel=1e-12) for st in score.stages)


def test_a_1f1b_plan_is_priced_as_before():
    plan = Plan((Stage((0, 1), 2, 1, {0: "a", 1: "a"}), Stage((2, 3), 2, 1, {2: "a", 3: "a"})))
    a = evaluate(problem_from_dict(_chain(1.0, "microbatch")), plan)
    b = evaluate(problem_from_dict(_chain(1.0, "schedule")), plan)
    assert a.tps == b.tps and a.batch_time == b.batch_time


@pytest.mark.parametrize("objective", [TPS, BATCH_TIME])
def test_dp_and_brute_force_price_the_window(objective):
    # interleaved plans only: by TPS the best 1F1B plan (four stages of d = 1, no resync) wins either way
    options = Options(objective=objective, uniform=True, schedule="interleaved", max_virtual_stages=2)
    values = {}
    for window in ("microbatch", "schedule"):
        p = problem_from_dict(_chain(1.0, window))
        brute = solve_brute(p, options)
        dp = solve(p, options, solver="dp")
        assert dp.status.value == brute.status.value == "optimal"
        assert dp.value == pytest.approx(brute.value, rel=1e-12)
        values[window] = brute.value
    assert values["schedule"] < values["microbatch"] * (1 - 1e-3)  # the window moves the optimum


def test_the_window_decides_between_schedules():
    """w = 1.1: the interleaved plan above (L = 2, d = 2, v = 2) takes 3 + 4 w = 7.4 with one
    micro-batch's overlap and 2 + 4 w = 6.4 with its window (batch = N TPS + (sum tau - max tau) / v,
    TPS = 1 + (4 w - H) / 4, tau = 2 per group), and the four-stage 1F1B plan of d = 1 (no resync) 4 + 3
    = 7: the window changes the optimal schedule, and the DP must see it to pick the right one."""
    options = Options(objective=BATCH_TIME, uniform=True, max_virtual_stages=2)
    for window, want, kind in (("microbatch", 7.0, "1f1b"), ("schedule", 6.4, "interleaved")):
        p = problem_from_dict(_chain(1.0, window, w=1.1))
        brute, dp = solve_brute(p, options), solve(p, options, solver="dp")
        assert brute.value == pytest.approx(want, rel=1e-12) and brute.plan.schedule.kind == kind
        assert dp.status.value == "optimal" and dp.value == pytest.approx(want, rel=1e-12)
        assert dp.plan.schedule.kind == kind


def test_the_window_decides_between_interleaved_layouts():
    """w = 1.6, interleaved plans only: d = 2 takes 3 + 4 w = 9.4 with one micro-batch's overlap and
    2 + 4 w = 8.4 with its window; d = 1 (no resync, TPS 2 per group) 4 x 2 + 1 = 9. The DP ranks its
    layouts by its own numbers, so it must price the window to pick d = 2."""
    options = Options(objective=BATCH_TIME, uniform=True, schedule="interleaved", max_virtual_stages=2)
    for window, want, d in (("microbatch", 9.0, 1), ("schedule", 8.4, 2)):
        p = problem_from_dict(_chain(1.0, window, w=1.6))
        brute, dp = solve_brute(p, options), solve(p, options, solver="dp")
        assert brute.value == pytest.approx(want, rel=1e-12) and brute.plan.stages[0].d == d
        assert dp.status.value == "optimal" and dp.value == pytest.approx(want, rel=1e-12)
        assert dp.plan.stages[0].d == d


def _long_chain(n: int, w: float, n_mb: int, k: int) -> dict:
    nodes = {i: {1: [{**tmpc("a", p=1.0, w=w), "resyncOverlapTime": 1.0}]} for i in range(n)}
    out = workload(nodes, [(i, i + 1, 0.0) for i in range(n - 1)], k=k, N=n_mb, B=1.0)
    out["resyncOverlapWindow"] = "schedule"
    return out


@pytest.mark.parametrize("objective, n, n_mb, k, w", [(TPS, 6, 4, 4, 1.0), (TPS, 6, 4, 4, 1.5), (TPS, 8, 8, 8, 2.5),
                                                      (BATCH_TIME, 6, 4, 4, 1.8), (BATCH_TIME, 8, 8, 8, 3.0)])
def test_the_dps_layout_bounds_count_the_window(objective, n, n_mb, k, w):
    """Chains where a layout bound without the window (too high) prunes the best layout: the DP would
    certify a worse plan "optimal" (found by mutating the bound, piper/dp/groups.py _layout_rows)."""
    options = Options(objective=objective, uniform=True, schedule="interleaved", max_virtual_stages=4)
    p = problem_from_dict(_long_chain(n, w, n_mb, k))
    brute, dp = solve_brute(p, options), solve(p, options, solver="dp")
    assert brute.status.value == "optimal"
    assert dp.status.value == "optimal" and dp.value == pytest.approx(brute.value, rel=1e-12)


def test_the_loader_checks_the_key():
    for bad in ("sched", 1, None, ["schedule"]):
        w = _chain(1.0, None)
        w["resyncOverlapWindow"] = bad
        with pytest.raises(ProblemError, match="resyncOverlapWindow"):
            problem_from_dict(w)
    p = problem_from_dict(_chain(1.0, "schedule"))
    assert problem_to_dict(p)["resyncOverlapWindow"] == "schedule"
    assert "resyncOverlapWindow" not in problem_to_dict(problem_from_dict(_chain(1.0, "microbatch")))
    assert "resyncOverlapWindow" in p.active_features()
    assert "resyncOverlapWindow" not in problem_from_dict(_chain(0.0, "schedule")).active_features()


def test_the_dp_refuses_an_h_above_p_with_the_window():
    p = problem_from_dict(_chain(1.5, "schedule"))  # h = 1.5 > p = 1 (h d <= N p still holds at d = 4)
    with pytest.raises(SolverError, match="h only up to the layer's time per sample"):
        solve(p, Options(uniform=True, max_virtual_stages=2), solver="dp")
    assert solve_brute(p, Options(uniform=True, max_virtual_stages=2)).status.value == "optimal"


CHAINS = [with_schedule_window(with_iteration_keys(base, random.Random(seed), same_per_position=True))
          for seed in range(10) for base in (identical_chain_problem(seed), periodic_chain_problem(seed))]


INTERLEAVED_ONLY = Options(objective=BATCH_TIME, uniform=True, schedule="interleaved", max_virtual_stages=3)


@pytest.mark.parametrize("options", [Options(objective=BATCH_TIME, uniform=True, max_virtual_stages=2),
                                     Options(uniform=True, max_virtual_stages=3),
                                     Options(objective=BATCH_TIME, max_virtual_stages=4),
                                     Options(uniform=True, schedule="interleaved", max_virtual_stages=2),
                                     INTERLEAVED_ONLY],
                         ids=["batch-v2", "tps-v3", "batch-v4", "tps-interleaved-v2", "batch-interleaved-v3"])
def test_dp_agrees_with_brute_force_on_chains_with_the_window(options):
    bad = [why for p in CHAINS if (why := disagreement(p, options))]
    assert not bad, bad[:5]


def test_the_window_moves_the_chains_optima():
    """The cases above are not vacuous: over interleaved plans the window changes brute force's
    optimum on some chains."""
    moved = 0
    for p in CHAINS:
        plain = problem_from_dict({**problem_to_dict(p), "resyncOverlapWindow": "microbatch"})
        a, b = solve_brute(p, INTERLEAVED_ONLY), solve_brute(plain, INTERLEAVED_ONLY)
        moved += a.plan is not None and b.plan is not None and a.value < b.value * (1 - 1e-9)
    assert moved >= 2
