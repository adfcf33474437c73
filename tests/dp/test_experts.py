"""Piper's DP under expert parallelism (docs/problem.md §11, rule 6): the spec's worked check and
a rule-6 case by hand, and agreement with brute force on tiny random MoE instances (chains and
DAGs of 2-5 layers, some with the cluster keys; identical chains of MoE layers) under both
objectives, free and uniform plans, 1F1B and interleaved; every result passes check_result.
A fast subset runs in CI, the sweeps with -m slow."""

from __future__ import annotations

import random

import pytest

from experiments.lib.instances import random_moe_problem, with_expert_keys
from piper import Options, problem_from_dict, solve
from piper.core.options import BATCH_TIME, TPS, candidates
from piper.core.result import Status
from piper.dp.chain import identical_chain
from tests.dp.identical_chains import disagreement, identical_chain_problem
from tests.helpers import tmpc, with_random_cluster_keys, workload


def moe_cases(count: int, seed: int):
    """Random MoE instances (random_moe_problem), every third with the cluster keys."""
    out = []
    for i in range(count):
        p = random_moe_problem(seed * 1000 + i)
        out.append(with_random_cluster_keys(p, random.Random(i)) if i % 3 == 1 else p)
    return out


def moe_chain(seed: int):
    """An identical chain (tests/dp/identical_chains.py) whose layers all get the same expert keys."""
    return with_expert_keys(identical_chain_problem(seed), random.Random(seed), moe_share=0.8, same_per_position=True)


def test_worked_check_and_rule_6() -> None:
    # docs/problem.md §11: p = 4, w_x = 8, s_x = 16, e = 2, N = 4, k = 4; d = 4 gives 5, d = 2 gives
    # 4 / 2 = 2 (r = 1), d = 1 breaks rule 6; a dense TMPC p = 8 is the only one at d = 1
    ep2 = {**tmpc("ep2", p=4.0), "expertParallel": 2, "expertParameterSize": 8.0, "memoryUsageShardedExpertB": 16.0}
    for k, M, want, d, name in ((4, 1e6, 2.0, 2, "ep2"), (1, 1e6, 8.0, 1, "dense"), (4, 15.0, 2.0, 4, "dense")):
        p = problem_from_dict(workload({0: {1: [tmpc("dense", p=8.0), ep2]}}, [], k=k, N=4, B=1.0, M=M))
        for objective in (TPS, BATCH_TIME):
            for uniform in (False, True):
                res = solve(p, Options(objective=objective, uniform=uniform), solver="dp")
                assert res.status == Status.OPTIMAL and res.tps == want, (k, M, objective, uniform)
                assert (res.plan.stages[0].d, res.plan.stages[0].tmpcs[0]) == (d, name)
    # only the e = 2 TMPC and one device: infeasible
    p = problem_from_dict(workload({0: {1: [ep2]}}, [], k=1, N=4, B=1.0))
    assert solve(p, Options(), solver="dp").status == Status.INFEASIBLE


FAST = moe_cases(10, seed=3)


@pytest.mark.parametrize("objective", [TPS, BATCH_TIME])
@pytest.mark.parametrize("uniform", [False, True])
def test_agrees_with_brute_force(objective: str, uniform: bool) -> None:
    options = Options(objective=objective, uniform=uniform)
    bad = [why for p in FAST if (why := disagreement(p, options))]
    assert not bad, bad[:5]


def test_the_fast_cases_use_the_keys() -> None:
    found = [solve(p, Options(), solver="brute") for p in FAST]
    assert sum("expertParallel" in p.active_features() for p in FAST) >= 8
    assert sum(r.plan is not None for r in found) >= 6
    used = [r for p, r in zip(FAST, found) if r.plan is not None and any(
        p.node(v).tmpc(s.t, s.tmpcs[v]).expert_width > 1 for s in r.plan.stages for v in s.nodes)]
    assert len(used) >= 4


def test_interleaved_and_identical_chains() -> None:
    bad = []
    for p in FAST[:4]:
        for objective in (TPS, BATCH_TIME):
            why = disagreement(p, Options(objective=objective, max_virtual_stages=2))
            if why:
                bad.append(why)
    chains = [moe_chain(seed) for seed in range(6)]
    assert sum(identical_chain(p, candidates(p, Options())) is not None
               and "expertParallel" in p.active_features() for p in chains) >= 3
    for p in chains:
        for objective in (TPS, BATCH_TIME):
            for uniform, v in ((True, 1), (False, 2)):
                why = disagreement(p, Options(objective=objective, uniform=uniform, max_virtual_stages=v))
                if why:
                    bad.append(why)
    assert not bad, bad[:5]


@pytest.mark.slow
@pytest.mark.parametrize("objective", [TPS, BATCH_TIME])
@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("v", [1, 2])
def test_agrees_with_brute_force_sweep(objective: str, uniform: bool, v: int) -> None:
    options = Options(objective=objective, uniform=uniform, max_virtual_stages=v)
    bad = [why for p in moe_cases(150, seed=17) if (why := disagreement(p, options))]
    bad += [why for seed in range(40) if (why := disagreement(moe_chain(seed), options))]
    assert not bad, bad[:5]


@pytest.mark.slow
def test_greedy_is_never_better_than_brute_force() -> None:
    bad = [why for p in moe_cases(100, seed=23) for objective in (TPS, BATCH_TIME)
           if (why := disagreement(p, Options(objective=objective), solver="dp-greedy"))]
    assert not bad, bad[:5]


@pytest.mark.parametrize("key, value", [("expertParallel", 2), ("expertTensorParallel", 2),
                                        ("expertParameterSize", 8.0), ("memoryUsageShardedExpertB", 4.0)])
def test_expert_keys_are_part_of_a_layers_identity(key: str, value) -> None:
    """An identical chain of 4 layers stops being one when a single layer's TMPCs get one of the keys,
    and stays one when every layer's do."""
    from piper import problem_to_dict

    p = identical_chain_problem(3, n_inner=4, ends=(0, 0))
    whole = identical_chain(p, candidates(p, Options()))
    assert whole is not None and (whole.first, whole.stop) == (0, 4)
    for layers in ({1}, {0, 1, 2, 3}):
        raw = problem_to_dict(p)
        for nd in raw["nodes"]:
            if nd["id"] in layers:
                for lst in nd["TMPCs"].values():
                    for c in lst:
                        c[key] = value
        q = problem_from_dict(raw)
        got = identical_chain(q, candidates(q, Options()))
        span = None if got is None else (got.first, got.stop)
        assert (span == (0, 4)) == (len(layers) == 4), (layers, span)
