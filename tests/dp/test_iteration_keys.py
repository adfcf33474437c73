"""Piper's DP under the iteration keys of docs/problem.md §10 (the resync's overlap and the optimizer
step; piper/dp/iteration.py): a case by hand, agreement with brute force on tiny random instances
(every engine: the threshold and table engines, the batch-time fronts, the group engine on identical
chains and on relaxed ones, interleaved plans), and the one-line refusals of what the DP does not
price exactly. A fast subset runs in CI, the sweep with -m slow."""

from __future__ import annotations

import random

import pytest

from experiments.lib.instances import random_problem, with_iteration_keys, without_iteration_keys
from piper import Options, problem_from_dict, solve
from piper.core.errors import SolverError
from piper.core.options import BATCH_TIME, TPS, candidates
from piper.core.result import Status
from piper.dp.chain import identical_chain, relaxed_chain
from tests.dp.identical_chains import disagreement, identical_chain_problem, periodic_chain_problem
from tests.helpers import tmpc, workload


def _one_layer(h: float, step: float = 0.2, **extra) -> dict:
    return workload({0: {1: [{**tmpc("a", p=4.0, w=1.0), "resyncOverlapTime": h, "stepTime": step, **extra}]}},
                    [], k=2, N=2, B=1.0)


@pytest.mark.parametrize("h, want", [(0.0, 3.1), (1.0, 2.6), (2.0, 2.1), (4.0, 2.1)])
def test_a_layer_by_hand(h: float, want: float) -> None:
    # p = 4, w = 1, f = 4, N = 2, B = 1, o = 0.2. d = 1: 4 + 0.2 / 2 = 4.1. d = 2: the resync moves
    # 4 (d - 1) w / (d N) = 1 byte per sample, N R / B = 2 per iteration, of which h hides:
    # 4 / 2 + max(0, 2 - h) / 2 + 0.2 / 2 = 3.1, 2.6, 2.1, 2.1 for h = 0, 1, 2, 4 (h = 0: the step only)
    p = problem_from_dict(_one_layer(h))
    for objective in (TPS, BATCH_TIME):
        for uniform in (False, True):
            res = solve(p, Options(objective=objective, uniform=uniform), solver="dp")
            assert res.status == Status.OPTIMAL and res.plan.stages[0].d == 2
            assert res.tps == pytest.approx(want, rel=1e-12), (h, objective, uniform)


FAST = [with_iteration_keys(random_problem(i, n=random.Random(i).randint(2, 6)), random.Random(i))
        for i in range(16)]


def test_the_fast_cases_bind_the_keys() -> None:
    """The instances are not vacuous: with the keys dropped, brute force's optimum moves on most."""
    moved = 0
    for p in FAST:
        plain = solve(without_iteration_keys(p), Options(), solver="brute")
        keyed = solve(p, Options(), solver="brute")
        moved += plain.plan is not None and keyed.value != plain.value
    assert moved >= 8


@pytest.mark.parametrize("options", [Options(), Options(objective=BATCH_TIME), Options(uniform=True),
                                     Options(objective=BATCH_TIME, uniform=True),
                                     Options(objective=BATCH_TIME, max_virtual_stages=2)],
                         ids=["tps", "batch", "tps-uniform", "batch-uniform", "interleaved"])
def test_agrees_with_brute_force(options: Options) -> None:
    bad = [why for p in FAST if (why := disagreement(p, options))]
    assert not bad, bad[:5]


@pytest.mark.parametrize("uniform", [False, True])
def test_the_table_engine_agrees_with_brute_force(uniform: bool) -> None:
    bad = []
    for p in FAST:
        brute = solve(p, Options(uniform=uniform), solver="brute")
        dp = solve(p, Options(uniform=uniform, params={"engine": "table"}), solver="dp")
        if brute.plan is None:
            ok = dp.plan is None
        else:
            ok = dp.status == Status.OPTIMAL and dp.value == pytest.approx(brute.value, rel=1e-9)
        if not ok:
            bad.append((p.extra.get("name"), dp.status, dp.value, brute.value))
    assert not bad, bad[:5]


def _chains(count: int, offset: int = 0) -> list:
    out = []
    for seed in range(offset, offset + count):
        for base in (identical_chain_problem(seed), periodic_chain_problem(seed)):
            out.append(with_iteration_keys(base, random.Random(seed), same_per_position=True))
    return out


CHAINS = _chains(8)


def test_chains_reach_the_group_engine() -> None:
    found = [(identical_chain(p, candidates(p, Options())) is not None,
              relaxed_chain(p, candidates(p, Options())) is not None) for p in CHAINS]
    assert sum(a for a, _ in found) >= 6 and sum(b for a, b in found if not a) >= 4
    assert sum(p.has_iteration_keys for p in CHAINS) == len(CHAINS)


@pytest.mark.parametrize("options", [Options(objective=BATCH_TIME, uniform=True),
                                     Options(objective=BATCH_TIME, uniform=True, max_virtual_stages=2),
                                     Options(uniform=True, max_virtual_stages=3),
                                     Options(objective=BATCH_TIME, max_virtual_stages=2)],
                         ids=["batch-uniform", "batch-uniform-v2", "tps-uniform-v3", "batch-free-v2"])
def test_chains_agree_with_brute_force(options: Options) -> None:
    bad = [why for p in CHAINS if (why := disagreement(p, options))]
    assert not bad, bad[:5]


def test_a_layers_tmpcs_must_share_the_numbers() -> None:
    raw = workload({0: {1: [{**tmpc("a", p=4.0, w=1.0), "resyncOverlapTime": 1.0},
                            {**tmpc("b", p=5.0, w=1.0, a=0.0), "resyncOverlapTime": 0.5}]}}, [], k=2, N=2, B=1.0)
    with pytest.raises(SolverError, match=r"layer .* at t=1: TMPC 'a' and 'b' differ"):
        solve(problem_from_dict(raw), Options(), solver="dp")
    # brute force prices it
    assert solve(problem_from_dict(raw), Options(), solver="brute").status == Status.OPTIMAL


def test_more_hidden_time_than_compute_is_refused() -> None:
    # h d <= N p: with N = 2 and d up to 2, h may be at most p = 4
    assert solve(problem_from_dict(_one_layer(4.0)), Options(), solver="dp").status == Status.OPTIMAL
    with pytest.raises(SolverError, match=r"resyncOverlapTime h only up to .*h = 4\.5 > \(N / d\) p = 4 at d = 2"):
        solve(problem_from_dict(_one_layer(4.5)), Options(), solver="dp")


@pytest.mark.slow
@pytest.mark.parametrize("objective", [TPS, BATCH_TIME])
@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("v", [1, 2])
def test_agrees_with_brute_force_sweep(objective: str, uniform: bool, v: int) -> None:
    options = Options(objective=objective, uniform=uniform, max_virtual_stages=v)
    cases = [with_iteration_keys(random_problem(500 + i, n=random.Random(i).randint(2, 7)), random.Random(i))
             for i in range(120)]
    bad = [why for p in cases + _chains(40, offset=100) if (why := disagreement(p, options))]
    assert not bad, bad[:5]
