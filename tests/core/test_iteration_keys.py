"""docs/problem.md §10: resyncOverlapTime, stepTime, stepTimeSharded in the loader, the evaluator
(hand-computed), the brute-force oracle and Piper's DP (tests/dp/test_iteration_keys.py has its
sweeps) and every shipped solver; a solver registered without them refuses."""

import pytest

from piper import evaluate, load_problem, plan_from_dict
from piper.core.errors import SolverError


def _workload(h=0.0, o=0.0, o_s=0.0):
    def tmpc(p):
        c = {"id": "x", "timePerSample": p, "parameterSize": 100.0, "memoryUsageA": 1.0, "memoryUsageB": 1.0,
             "syncTimeFw": {}, "syncTimeBw": {}}
        if h:
            c["resyncOverlapTime"] = h
        if o:
            c["stepTime"] = o
        if o_s:
            c["stepTimeSharded"] = o_s
        return c

    nodes = [{"id": 0, "TMPCs": {"1": [tmpc(2.0)]}}, {"id": 1, "TMPCs": {"1": [tmpc(2.0)]}}]
    for i, n in enumerate(nodes):
        n["TMPCs"]["1"][0]["syncTimeFw"] = {"0": 0.0} if i == 1 else {}
        n["TMPCs"]["1"][0]["syncTimeBw"] = {"1": 0.0} if i == 0 else {}
    return {"maxDevices": 2, "maxMemoryPerDevice": 100.0, "bandwidth": 10.0, "mbsInBatch": 4,
            "allReduceFactor": 2.0, "nodes": nodes, "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 0.0}]}


PLAN = {"stages": [{"nodes": [0, 1], "dataParallelDegree": 2, "tensorParallelDegree": 1, "TMPCids": {"0": "x", "1": "x"}}]}


def test_by_hand():
    # d = 2, N = 4: R = 2 * 1 * 100 / (2 * 4) per node = 25 bytes, two nodes 50 -> 5 s per sample at 10 B/s;
    # per iteration 20 s; compute 4 / 2 = 2 per sample
    base = evaluate(load_problem(_workload()), plan_from_dict(PLAN))
    assert base.tps == pytest.approx(7.0)
    p = load_problem(_workload(h=3.0, o=1.0, o_s=2.0))
    assert set(p.active_features()) >= {"resyncOverlapTime", "stepTime", "stepTimeSharded"}
    s = evaluate(p, plan_from_dict(PLAN))
    # H = 6: exposed resync (20 - 6) / 4 = 3.5; O = 2 * (1 + 2 / 2) = 4 -> 1 per sample
    assert s.stages[0].resync == pytest.approx(3.5)
    assert s.stages[0].step == pytest.approx(1.0)
    assert s.tps == pytest.approx(2 + 3.5 + 1)
    assert s.batch_time == pytest.approx(4 * 6.5)
    # the overlap never makes the resync negative
    assert evaluate(load_problem(_workload(h=100.0)), plan_from_dict(PLAN)).stages[0].resync == 0.0
    # round trip
    assert load_problem(p.to_dict()).nodes[0].tmpcs[1][0].step_time_sharded == 2.0


def test_bad_values_and_refusals():
    w = _workload(h=1.0)
    w["nodes"][0]["TMPCs"]["1"][0]["resyncOverlapTime"] = -1
    with pytest.raises(Exception, match="resyncOverlapTime"):
        load_problem(w)
    from piper import solve

    p = load_problem(_workload(h=3.0, o=1.0))
    import baselines  # noqa: F401  registers brute, equi and the exact models
    from piper.solvers.registry import SolverInfo, register, unregister

    # a solver registered without the keys refuses (every shipped one honours them)
    register(SolverInfo("no-iteration-keys", "piper.dp:solve_dp", True, "the DP without the iteration keys",
                        {"knapsack": "exact"}))
    try:
        with pytest.raises(SolverError, match="resyncOverlapTime"):
            solve(p, None, "no-iteration-keys")
    finally:
        unregister("no-iteration-keys")
    res = solve(p, None, "brute")
    assert res.tps == pytest.approx(evaluate(p, res.plan).tps)
    for name in ("dp", "milp-highs", "cpsat", "aggregate"):
        other = solve(p, None, name)
        assert other.status.value == "optimal" and other.tps == pytest.approx(res.tps, rel=1e-9), name
    # equi is a heuristic: its plan is scored with the keys, never better than the optimum
    equi = solve(p, None, "equi")
    assert equi.tps == pytest.approx(evaluate(p, equi.plan).tps) and equi.tps >= res.tps * (1 - 1e-12)
