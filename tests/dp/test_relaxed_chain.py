"""The relaxed identical chain (piper/dp/chain.py ``relaxed_chain``): a chain whose inner layers differ
only in their numbers is bounded by the exact optimum of its relaxation (the least numbers over the
run), which raises the DP's bound on its interleaved plans (piper/dp/schedules.py) and lets the
planner cut its workloads off (``uniform_lower_bound``). Checked against brute force."""

from __future__ import annotations

import dataclasses

import pytest

from piper import Options, solve
from piper.core.options import BATCH_TIME, TPS, candidates
from piper.core.result import Status
from piper.dp.chain import RELAXED_FIELDS, identical_chain, relaxed_chain
from tests.dp.identical_chains import disagreement, periodic_chain_problem

SWEEP = range(0, 60)
OPTIONS = (Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=2),
           Options(objective=BATCH_TIME, schedule="interleaved", max_virtual_stages=3),
           Options(objective=TPS, schedule="any", max_virtual_stages=2))


def test_the_relaxation_is_an_identical_chain_below_every_layer() -> None:
    found = 0
    for seed in SWEEP:
        p = periodic_chain_problem(seed)
        cand = candidates(p)
        assert identical_chain(p, cand) is None, seed
        relaxed = relaxed_chain(p, cand)
        if relaxed is None:
            continue
        found += 1
        rp, rcand, chain = relaxed
        assert chain.stop - chain.first >= 2 and identical_chain(rp, rcand) == chain
        for nd, rnd in zip(p.nodes, rp.nodes):
            assert nd.id == rnd.id and sorted(nd.tmpcs) == sorted(rnd.tmpcs)
            for t, lst in nd.tmpcs.items():
                for c, r in zip(lst, rnd.tmpcs[t], strict=True):
                    assert r.id == c.id and r.expert_width == c.expert_width
                    for f in RELAXED_FIELDS:
                        assert getattr(r, f) <= getattr(c, f), (seed, nd.id, f)
                    assert all(r.sync_fw[u] <= x for u, x in c.sync_fw.items())
                    assert all(r.sync_bw[v] <= x for v, x in c.sync_bw.items())
        for e, re in zip(p.edges, rp.edges):
            assert (re.u, re.v) == (e.u, e.v) and re.communication_cost <= e.communication_cost
        # the candidates list the same choices of the relaxed TMPCs
        for v, per_t in cand.tmpcs.items():
            assert {t: [k for k, _ in lst] for t, lst in per_t.items()} == \
                   {t: [k for k, _ in lst] for t, lst in rcand.tmpcs[v].items()}
    assert found >= len(SWEEP) // 2


def test_a_structural_difference_is_not_relaxed() -> None:
    """Layers whose TMPC ids differ are not one run: no relaxation spans them."""
    p = periodic_chain_problem(0)
    cand = candidates(p)
    _, _, chain = relaxed_chain(p, cand)
    inner = [p.nodes[i] for i in chain.order[chain.first:chain.stop]]
    # every second inner layer's TMPCs renamed: the same numbers, another structure
    renamed = {nd.id: dataclasses.replace(nd, tmpcs={t: tuple(dataclasses.replace(c, id=f"{c.id}-other") for c in lst)
                                                     for t, lst in nd.tmpcs.items()})
               for nd in inner[1::2]}
    q = dataclasses.replace(p, nodes=tuple(renamed.get(nd.id, nd) for nd in p.nodes))
    got = relaxed_chain(q, candidates(q))
    assert got is None or got[2].stop - got[2].first < chain.stop - chain.first


def _disagreements(seeds: range) -> list[str]:
    """Every disagreement with brute force on the periodic chains of ``seeds`` under :data:`OPTIONS`."""
    return [why for seed in seeds for options in OPTIONS
            if (why := disagreement(periodic_chain_problem(seed), options))]


def test_every_status_and_bound_agrees_with_brute_force() -> None:
    """"optimal" is brute force's optimum, "feasible" carries a bound at most it, on the sweep and
    three option sets (both objectives, interleaved plans allowed)."""
    bad = _disagreements(SWEEP)
    assert not bad, bad[:5]


@pytest.mark.parametrize("seed, optimum", [(0, 33.0), (1, 97.0), (5, 93.5), (26, 97.0)])
def test_the_relaxed_bound_proves_the_1f1b_answer(seed: int, optimum: float) -> None:
    """Instances whose best plan is 1F1B: the heuristic's bound on the interleaved plans (the layouts'
    least compute) was below it, so the DP answered "feasible"; the relaxation's exact optimum is not,
    and the answer is proven (brute force's optimum, found by hand in the sweep)."""
    p = periodic_chain_problem(seed)
    options = OPTIONS[0]
    res = solve(p, options, solver="dp")
    assert res.status == Status.OPTIMAL and res.value == pytest.approx(optimum, rel=1e-12)
    assert res.plan.schedule.kind == "1f1b"
    assert solve(p, options, solver="brute").value == pytest.approx(optimum, rel=1e-12)
    relaxed = res.stats["parts"]["interleaved"]["relaxed_chain"]
    assert relaxed["complete"] and relaxed["lower"] >= optimum * (1 - 1e-9)


def test_the_planner_orders_and_cuts_relaxed_chains() -> None:
    """uniform_lower_bound gives a relaxed chain a bound (the planner then searches it under a
    cutoff) and it holds: at most the uniform optimum."""
    from piper.frontend.planner import uniform_lower_bound

    checked = 0
    for seed in SWEEP:
        p = periodic_chain_problem(seed)
        if relaxed_chain(p, candidates(p)) is None:
            continue
        options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=2, uniform=True)
        bound = uniform_lower_bound(p, options)
        assert bound is not None, seed
        best = solve(p, options, solver="brute")
        if best.plan is not None:
            assert bound <= best.value * (1 + 1e-9), seed
            checked += 1
    assert checked >= 10


@pytest.mark.slow  # about a minute on 2 cores; the first 60 seeds run in CI above
def test_a_wider_sweep_agrees_with_brute_force() -> None:
    bad = _disagreements(range(60, 400))
    assert not bad, bad[:5]
