"""The solver registry's feature declarations and its guard: a solver registered without a
cluster feature (nodes of devices, intra-node bandwidth, all-reduce factor, sharded optimizer
state) refuses an instance that uses it, naming the feature; every shipped solver has them all."""

import pytest

from piper import Options, SolverError, problem_from_dict, problem_to_dict, solve
from piper.core.problem import CLUSTER_FEATURES, ITERATION_FEATURES, WINDOW_FEATURES, WORKLOAD_FEATURES
from piper.solvers.registry import SOLVERS, SolverInfo, get_solver, register, unregister
from tests.helpers import tmpc, workload


def two_layers(**top):
    """Two layers on k = 8 devices, with the given top-level keys."""
    nodes = {0: {1: [tmpc(p=2.0, w=4.0, bw={"1": 0.0})]}, 1: {1: [tmpc(p=3.0, w=4.0, fw={"0": 0.0})]}}
    raw = workload(nodes, [(0, 1, 1.0)], k=8, N=8, B=1.0)
    raw.update(top)
    return problem_from_dict(raw)


def test_solver_infos_declare_their_features():
    # brute force scores every plan with the evaluator, so it honours the iteration keys too
    assert get_solver("brute").features == frozenset(WORKLOAD_FEATURES)
    for name, info in SOLVERS.items():
        assert info.features <= frozenset(WORKLOAD_FEATURES), name


def test_dp_and_dp_greedy_declare_every_workload_feature():
    for name in ("dp", "dp-greedy"):
        assert SOLVERS[name].features == frozenset(WORKLOAD_FEATURES), name


def test_the_exact_models_declare_every_workload_feature():
    # every workload key, the iteration keys of docs/problem.md §10 included (docs/formulations.md §12);
    # equi scores its candidates with the evaluator; the aggregated model refuses expert parallelism;
    # resyncOverlapWindow (§10.1) changes only interleaved plans, which only the DP and brute force make
    for name in ("milp-highs", "cpsat", "milp", "brute", "equi"):
        assert SOLVERS[name].features == frozenset(WORKLOAD_FEATURES), name
    assert SOLVERS["aggregate"].features == frozenset(CLUSTER_FEATURES + ITERATION_FEATURES + WINDOW_FEATURES)


@pytest.fixture
def solver_without_features():
    """A solver registered without the cluster features (every shipped solver has them all
    now): the guard must refuse instances that use them."""
    info = register(SolverInfo("v1-only", "piper.dp:solve_dp", True, "the DP, registered without features",
                               {"knapsack": "exact"}))
    yield info
    unregister("v1-only")


def test_a_solver_without_the_features_refuses_and_dp_solves(solver_without_features):
    p = two_layers(devicesPerNode=4, intraNodeBandwidth=50.0)
    with pytest.raises(SolverError) as err:
        solve(p, solver="v1-only")
    msg = str(err.value)
    assert msg.startswith("solver 'v1-only' does not support devicesPerNode (G=4 < k=8)")
    assert "intraNodeBandwidth" in msg and "use --solver brute or drop the keys" in msg
    assert solve(p, solver="dp").tps == solve(p, solver="brute").tps  # dp honours the cluster keys
    plain = two_layers()
    assert plain.active_features() == ()
    res = solve(plain, solver="v1-only")
    assert res.status.value == "optimal" and res.tps == solve(plain, solver="brute").tps


@pytest.mark.parametrize("key, value", [("allReduceFactor", 2), ("devicesPerNode", 2), ("intraNodeBandwidth", 3.0)])
def test_every_solver_without_a_feature_refuses_it(key, value, solver_without_features):
    p = two_layers(**{key: value})
    assert p.active_features() == (key,)
    refused = []
    for name, info in SOLVERS.items():
        if key in info.features:
            assert info(p, Options()).status.value in ("optimal", "feasible"), name
            continue
        with pytest.raises(SolverError, match=f"solver '{name}' does not support {key} .* use --solver brute or drop the key$"):
            info(p, Options())
        refused.append(name)
    assert refused == ["v1-only"]
    assert solve(p, solver="brute").status.value == "optimal"


def test_inactive_keys_do_not_trigger_the_guard():
    p = two_layers(devicesPerNode=8, intraNodeBandwidth=1.0, allReduceFactor=4)
    assert p.active_features() == ()
    assert solve(p, solver="dp").tps == solve(two_layers(), solver="dp").tps


def test_sharded_memory_is_refused_without_the_feature(solver_without_features):
    raw = problem_to_dict(two_layers())
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 2.0
    with pytest.raises(SolverError, match="memoryUsageShardedB"):
        get_solver("v1-only")(problem_from_dict(raw))
    assert get_solver("dp")(problem_from_dict(raw)).tps == solve_brute_tps(problem_from_dict(raw))


def solve_brute_tps(problem):
    return solve(problem, solver="brute").tps