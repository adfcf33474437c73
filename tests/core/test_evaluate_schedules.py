"""Version 3 (docs/problem.md §9): the batch-time objective's numbers and the interleaved
schedule, on the spec's worked check, by rule 5, and against the formulas written out again
here independently of the evaluator."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from piper import Options, evaluate, plan_from_dict, problem_from_dict
from piper.core.checks import check_result
from piper.core.errors import PlanError, PlanFormatError, SolverError
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.core.result import Status, make_result
from piper.solvers.registry import SolverInfo


def chain(n: int, *, p=lambda i: 1.0, k: int = 2, N: int = 4, M: float = 1e12, a: float = 0.0, b: float = 0.0,
          c: float = 0.0, w: float = 0.0, B: float = 1.0, extra: dict | None = None):
    def tmpc(i: int) -> dict:
        return {"id": "a", "timePerSample": p(i), "parameterSize": w, "memoryUsageA": a, "memoryUsageB": b,
                "syncTimeFw": {str(i - 1): 0.0} if i else {}, "syncTimeBw": {str(i + 1): 0.0} if i < n - 1 else {}}

    raw = {"maxDevices": k, "maxMemoryPerDevice": M, "bandwidth": B, "mbsInBatch": N,
           "nodes": [{"id": i, "TMPCs": {"1": [tmpc(i)], "2": [tmpc(i)]}} for i in range(n)],
           "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": c} for i in range(n - 1)]}
    raw.update(extra or {})
    return problem_from_dict(raw)


def stage(nodes, d: int = 1, t: int = 1) -> dict:
    return {"nodes": list(nodes), "dataParallelDegree": d, "tensorParallelDegree": t,
            "TMPCids": {str(v): "a" for v in nodes}}


def interleaved(chunks, v: int, d: int = 1, t: int = 1) -> Plan:
    return plan_from_dict({"stages": [stage(c, d, t) for c in chunks],
                           "schedule": {"kind": "interleaved", "virtualStages": v}})


def test_worked_check_of_the_spec() -> None:
    problem = chain(4)
    one = evaluate(problem, plan_from_dict({"stages": [stage([0, 1]), stage([2, 3])]}))
    assert (one.tps, one.batch_time) == (2.0, 10.0)
    two = evaluate(problem, interleaved([[0], [1], [2], [3]], 2))
    assert (two.tps, two.batch_time) == (2.0, 9.0)
    assert [s.y for s in two.stages] == [2.5, 1.5]
    assert [s.chunks for s in two.stages] == [(0, 2), (1, 3)]
    assert [s.tau for s in two.stages] == [2.0, 2.0]


def test_interleaved_y_of_the_first_group_is_korthikanti_s() -> None:
    """y_0 = L (1 + (L - 1) / (L v)) whenever m is large enough."""
    for groups, v in ((2, 2), (4, 2), (4, 4), (3, 3)):
        n = groups * v
        problem = chain(n, k=groups, N=4 * groups * v)
        score = evaluate(problem, interleaved([[i] for i in range(n)], v))
        assert score.stages[0].y == pytest.approx(groups * (1 + (groups - 1) / (groups * v)))


def test_y_is_capped_by_the_microbatches_per_replica() -> None:
    problem = chain(8, k=4, N=4)  # m = 4 = L
    score = evaluate(problem, interleaved([[i] for i in range(8)], 2))
    assert score.stages[0].y == 4  # (2 * 3 + 4 + 1) / 2 = 5.5 > m = 4


@pytest.mark.parametrize("seed", range(40))
def test_interleaved_matches_the_formulas_written_again(seed: int) -> None:
    """Exact rationals: the group sums, memory with a rational y, resync, the batch time."""
    rng = random.Random(seed)
    groups, v = rng.choice([2, 3, 4]), rng.choice([2, 3])
    n = groups * v + rng.randrange(0, 4)
    d, t = rng.choice([1, 2]), rng.choice([1, 2])
    m = groups * rng.choice([1, 2, 3])
    N = m * d
    times = [rng.choice([1, 2, 3, 5]) / 8 for _ in range(n)]
    c, w, a, b, B = rng.choice([0.0, 1.0, 4.0]), rng.choice([0.0, 8.0]), 2.0, 3.0, 2.0
    problem = chain(n, p=lambda i: times[i], k=groups * d * t, N=N, M=1e9, a=a, b=b, c=c, w=w, B=B)
    cuts = sorted(rng.sample(range(1, n), groups * v - 1))
    bounds = [0, *cuts, n]
    chunks = [list(range(bounds[j], bounds[j + 1])) for j in range(groups * v)]
    score = evaluate(problem, interleaved(chunks, v, d, t))
    f = Fraction
    taus, tpss = [], []
    for g in range(groups):
        mine = [chunks[j] for j in range(g, groups * v, groups)]
        tau = f(0)
        tps = f(0)
        nodes = 0
        for ch in mine:
            P = sum(f(times[i]) for i in ch)
            X = f(2) * f(c) * ((ch[0] > 0) + (ch[-1] < n - 1))  # a chain: one in-edge, one out-edge
            tau += P + X / f(B)
            tps += X / (d * f(B)) + P / d
            nodes += len(ch)
        tps += f(4) * (d - 1) * f(w) * nodes / (d * N) / f(B)
        y = min(f(m), f(2 * (groups - g - 1) + (v - 1) * groups + 1, v))
        assert score.stages[g].memory == pytest.approx(float(nodes * (f(a) * y + f(b))), rel=1e-12)
        assert score.stages[g].tau == pytest.approx(float(tau), rel=1e-12)
        assert score.stages[g].tps == pytest.approx(float(tps), rel=1e-12)
        taus.append(tau)
        tpss.append(tps)
    assert score.tps == pytest.approx(float(max(tpss)), rel=1e-12)
    assert score.batch_time == pytest.approx(float(N * max(tpss) + (sum(taus) - max(taus)) / v), rel=1e-12)


@pytest.mark.parametrize("chunks, v, d, t, k, N, rule", [
    ([[0], [1], [2, 3]], 2, 1, 1, 2, 4, "not a multiple of virtualStages"),
    ([[0, 1], [2, 3]], 2, 1, 1, 2, 4, "at least 2 needed"),
    ([[0], [1], [2], [3]], 2, 1, 1, 2, 3, "not a multiple of the 2 device groups"),
    ([[0], [1], [2], [3]], 2, 1, 2, 2, 4, "rule 4"),
    ([[0], [2], [1], [3]], 2, 1, 1, 2, 4, "rule 2"),
])
def test_rule_5(chunks, v, d, t, k, N, rule) -> None:
    with pytest.raises(PlanError, match=rule):
        evaluate(chain(4, k=k, N=N), interleaved(chunks, v, d, t))


def test_rule_5_one_layout() -> None:
    plan = Plan((Stage((0,), 1, 1, {0: "a"}), Stage((1,), 1, 2, {1: "a"}), Stage((2,), 1, 1, {2: "a"}),
                 Stage((3,), 1, 1, {3: "a"})), Schedule(INTERLEAVED, 2))
    with pytest.raises(PlanError, match=r"chunk 2 has \(d, t\) = \(1, 2\)"):
        evaluate(chain(4, k=8), plan)


def test_plan_files_round_trip_and_1f1b_files_are_unchanged() -> None:
    plan = interleaved([[0], [1], [2], [3]], 2)
    assert plan.to_dict()["schedule"] == {"kind": "interleaved", "virtualStages": 2}
    assert plan_from_dict(plan.to_dict()) == plan
    plain = plan_from_dict({"stages": [stage([0, 1, 2, 3])]})
    assert "schedule" not in plain.to_dict()
    assert plan_from_dict({"stages": [stage([0])], "schedule": {"kind": "1f1b"}}) == plan_from_dict({"stages": [stage([0])]})
    one = evaluate(chain(4), plain).to_dict()
    assert "schedule" not in one and "chunks" not in one["stages"][0]
    two = evaluate(chain(4), plan).to_dict()
    assert two["schedule"] == {"kind": "interleaved", "virtualStages": 2} and two["stages"][1]["chunks"] == [1, 3]


@pytest.mark.parametrize("schedule, message", [
    ("1f1b", "must be an object"),
    ({"kind": "gpipe"}, "kind must be one of"),
    ({"kind": "interleaved"}, "needs 'virtualStages'"),
    ({"kind": "interleaved", "virtualStages": 1}, ">= 2"),
    ({"kind": "interleaved", "virtualStages": 2.5}, "expected an integer"),
    ({"kind": "1f1b", "virtualStages": 2}, "virtualStages 1"),
    ({"kind": "interleaved", "virtualStages": 2, "chunks": 4}, "unknown key"),
])
def test_bad_schedules_are_refused_by_name(schedule, message) -> None:
    with pytest.raises(PlanFormatError, match=message):
        plan_from_dict({"stages": [stage([0])], "schedule": schedule})


@pytest.mark.parametrize("fields, message", [
    ({"objective": "latency"}, "unknown objective"),
    ({"schedule": "gpipe"}, "unknown schedule"),
    ({"max_virtual_stages": 0}, ">= 1"),
    # the solvers list the v they try: 2^31 - 1 of them filled the machine's memory
    ({"max_virtual_stages": 2**31 - 1}, "<= 65536"),
    ({"schedule": "interleaved"}, "needs max_virtual_stages >= 2"),
])
def test_bad_options_are_refused(fields, message) -> None:
    with pytest.raises(SolverError, match=message):
        Options(**fields)


def test_virtual_stage_choices() -> None:
    assert Options().virtual_stage_choices() == (1,)
    assert Options(max_virtual_stages=3).virtual_stage_choices() == (1, 2, 3)
    assert Options(schedule="interleaved", max_virtual_stages=3).virtual_stage_choices() == (2, 3)
    assert Options(schedule="1f1b", max_virtual_stages=3).virtual_stage_choices() == (1,)


def test_check_result_measures_the_objective_asked_for() -> None:
    problem = chain(4)
    plan = plan_from_dict({"stages": [stage([0, 1]), stage([2, 3])]})
    batch = Options(objective="batch-time")
    good = make_result(problem, "brute", Status.OPTIMAL, plan, time_s=0.0, objective=10.0, objective_kind="batch-time")
    assert good.bound == 10.0 and good.value == 10.0 and good.batch_time == 10.0
    assert check_result(problem, batch, good, exact=True) == []
    # a TPS claimed where the batch time was asked for
    wrong = make_result(problem, "brute", Status.OPTIMAL, plan, time_s=0.0, objective=2.0)
    checks = {i.check for i in check_result(problem, batch, wrong, exact=True)}
    assert {"options", "objective"} <= checks
    # a bound above the plan's batch time
    high = make_result(problem, "brute", Status.FEASIBLE, plan, time_s=0.0, objective=10.0, bound=10.5,
                       objective_kind="batch-time")
    assert [i.check for i in check_result(problem, batch, high, exact=True)] == ["bound"]
    # the optimum is a batch time too
    assert check_result(problem, batch, good, exact=True, optimum=9.0)[0].check == "optimum"


def test_check_result_refuses_a_schedule_the_options_do_not_allow() -> None:
    problem = chain(4)
    plan = interleaved([[0], [1], [2], [3]], 2)
    res = make_result(problem, "brute", Status.FEASIBLE, plan, time_s=0.0, objective=2.0)
    assert [i.check for i in check_result(problem, Options(), res, exact=True)] == ["options"]
    assert check_result(problem, Options(max_virtual_stages=2), res, exact=True) == []


def test_result_json_carries_the_batch_time_and_the_objective_kind() -> None:
    problem = chain(4)
    res = make_result(problem, "x", Status.FEASIBLE, interleaved([[0], [1], [2], [3]], 2), time_s=0.0, objective=9.0,
                      objective_kind="batch-time")
    raw = res.to_dict()
    assert raw["batch_time"] == 9.0 and raw["objective_kind"] == "batch-time" and raw["plan"]["schedule"]["kind"] == INTERLEAVED
    from piper.core.result import Result

    back = Result.from_dict(raw, problem)
    assert back.batch_time == 9.0 and back.objective_kind == "batch-time" and back.plan == res.plan
    none = make_result(problem, "x", Status.UNKNOWN, None, time_s=0.0)
    assert none.to_dict()["batch_time"] is None and math.isinf(Result.from_dict(none.to_dict()).batch_time)


def test_the_registry_refuses_an_objective_or_schedule_a_solver_does_not_declare() -> None:
    info = SolverInfo("tps-only", "piper.dp:solve_dp", True, "the DP as registered before version 3")
    with pytest.raises(SolverError, match="does not minimize 'batch-time'"):
        info(chain(4), Options(objective="batch-time"))
    with pytest.raises(SolverError, match="plans 1f1b schedules only"):
        info(chain(4), Options(max_virtual_stages=2))
