"""The planner's pruned uniform search (``search_plans(prune=True)``, what ``python -m piper plan``
runs; piper/frontend/planner.py, docs/frontend.md "Pruning"):
best-first by the DP's layout bound, each solve below the best uniform plan so far. It must return
exactly the unpruned search's plan, value and status (the same constants on both sides: nothing
here pins a number), and the bound that orders it must be a lower bound."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from piper.core.options import BATCH_TIME, Options
from piper.frontend import planner
from piper.frontend.hardware import hardware
from piper.frontend.hf import config_from_hf
from piper.frontend.planner import PlanSearch, search_plans, uniform_lower_bound
from piper.frontend.presets import preset
from piper.frontend.workload import TrainingSetup
from piper.solvers.registry import get_solver
from tests.frontend.test_moe_plan import TINY

#: 8 identical MoE layers between embedding and head, 8 experts (e in 1, 2, 4, 8)
TINY8 = {**TINY, "num_hidden_layers": 8}
OPTIONS = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=4)
MICRO_BATCHES = (1, 2, 4, 8)


def _searches(monkeypatch: pytest.MonkeyPatch | None = None,
              worst_first: bool = False) -> tuple[PlanSearch, PlanSearch]:
    cfg = config_from_hf(TINY8, name="tiny-moe-8")
    hw, setup = hardware("h100"), TrainingSetup(nodes=2, global_batch=64)
    dp = get_solver("dp")
    plain = replace(dp, params={k: v for k, v in dp.params.items() if k != "upper_bound"})
    if worst_first:
        # the worst order for the cutoffs: the winner comes late and is solved under a cutoff
        real = planner.uniform_lower_bound
        monkeypatch.setattr(planner, "uniform_lower_bound", lambda p, o: -real(p, o))
    pruned = search_plans(cfg, hw, setup, dp, OPTIONS, micro_batches=MICRO_BATCHES, free=False, prune=True)
    if worst_first:
        monkeypatch.undo()
    # unpruned twice: the default (prune off), and a DP without the knob (no cutoffs at all)
    unpruned = search_plans(cfg, hw, setup, dp, OPTIONS, micro_batches=MICRO_BATCHES, free=False)
    plain_search = search_plans(cfg, hw, setup, plain, OPTIONS, micro_batches=MICRO_BATCHES, free=False, prune=True)
    assert [c.result.plan for c in unpruned.candidates] == [c.result.plan for c in plain_search.candidates]
    return pruned, unpruned


def _same_answer(pruned: PlanSearch, unpruned: PlanSearch) -> None:
    assert pruned.runnable is not None and unpruned.runnable is not None
    a, b = pruned.runnable, unpruned.runnable
    assert (a.context_parallel, a.expert_parallel, a.micro_batch) == (b.context_parallel, b.expert_parallel,
                                                                       b.micro_batch)
    assert a.result.plan.to_dict() == b.result.plan.to_dict()
    assert a.value == b.value  # exactly
    assert a.result.status == b.result.status and a.result.bound == b.result.bound
    assert pruned.exact and unpruned.exact
    assert unpruned.cut_solves == 0 and unpruned.pruned == 0
    # every workload: the same answer, or pruned with a proof that it holds nothing better
    assert len(pruned.candidates) == len(unpruned.candidates)
    for p, u in zip(pruned.candidates, unpruned.candidates):
        assert (p.expert_parallel, p.micro_batch) == (u.expert_parallel, u.micro_batch)
        if p.pruned:
            assert p.result.plan is None and p.result.bound >= a.value * (1 - 1e-9)
            assert u.value >= p.result.bound * (1 - 1e-9)  # the proof holds: the unpruned optimum is above it
        else:
            assert p.result.status == u.result.status
            assert p.value == pytest.approx(u.value, rel=1e-9, abs=0.0) or p.value == u.value == math.inf


def test_pruned_uniform_search_returns_the_unpruned_plan() -> None:
    pruned, unpruned = _searches()
    _same_answer(pruned, unpruned)
    assert pruned.cut_solves > 0 and pruned.pruned > 0  # the cutoffs were used and pruned something


def test_pruned_uniform_search_in_the_worst_order_still_returns_the_unpruned_plan(monkeypatch) -> None:
    pruned, unpruned = _searches(monkeypatch, worst_first=True)
    _same_answer(pruned, unpruned)
    # the winner was solved under a cutoff first, then again without it
    assert pruned.resolved >= 1 and pruned.runnable.cutoff is None
    assert pruned.cut_solves == len(pruned.candidates) - 1  # every solve but the first ran under a cutoff


def test_free_search_keeps_its_uniform_searches_unpruned() -> None:
    cfg = config_from_hf(TINY, name="tiny-moe")
    search = search_plans(cfg, hardware("h100"), TrainingSetup(nodes=1, global_batch=32), get_solver("dp"),
                          OPTIONS, micro_batches=(1, 2), prune=True)
    assert all(c.cutoff is None for c in search.candidates if c.uniform)
    assert search.exact and search.runnable is not None and search.free is not None


BOUND_CASES = [("tiny-moe-8", e, b) for e in (1, 2, 4, 8) for b in (1, 4)] + [("megatron-1.7b", 1, b)
                                                                               for b in (1, 2, 4)]


@pytest.mark.parametrize("model, e, b", BOUND_CASES)
def test_uniform_lower_bound_is_at_most_the_solved_optimum(model: str, e: int, b: int) -> None:
    from piper.frontend.workload import build_workload
    from piper.io.workload import load_problem
    from piper.solvers.registry import solve

    if model == "tiny-moe-8":
        cfg, hw, setup = config_from_hf(TINY8, name=model), hardware("h100"), TrainingSetup(nodes=2, global_batch=64,
                                                                                             expert_parallel=e)
    else:
        cfg, hw, setup = preset(model), hardware("a100-80gb"), TrainingSetup(nodes=1, global_batch=64)
    problem = load_problem(build_workload(cfg.with_changes(micro_batch=b), hw, setup), strict=True)
    options = replace(OPTIONS, uniform=True)
    bound = uniform_lower_bound(problem, options)
    assert bound is not None and 0 < bound < math.inf
    res = solve(problem, options, "dp")
    assert res.status.value == "optimal" and res.plan is not None
    assert bound <= res.value * (1 + 1e-12)


def test_plan_json_reports_the_pruning(cli, tmp_path) -> None:
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY8))
    proc = cli("piper", "plan", str(cfg), "--gpu", "h100", "--nodes", "2", "--global-batch", "64",
               "--max-virtual-stages", "4", "--uniform", "--json")
    assert proc.returncode == 0, proc.stderr[-400:]
    out = json.loads(proc.stdout)
    search, cands = out["search"], out["candidates"]
    assert out["exact"] and out["status"] == "optimal"
    # e in 1, 2, 4, 8; b in 1, 2, 4, 8, 16; one recomputation setting: none, selective, full; one
    # workload per degree t in 1, 2, 4, 8 (each priced at its own resync bandwidth)
    assert search["workloads"] == len(cands) == 4 * 5 * 3 * 4
    assert {tuple(c["degrees"]) for c in cands} == {(1,), (2,), (4,), (8,)}
    assert {tuple(c["recompute"]) for c in cands} == {("none",), ("selective",), ("full",)}
    assert search["solves"] == len(cands) + search["resolved_without_cutoff"]
    assert search["pruned_by_bound"] == sum(c["pruned"] for c in cands) > 0
    assert search["cut_solves"] >= search["pruned_by_bound"]
    for c in cands:
        if c["pruned"]:  # no plan, proven no better than the winner
            assert c["value"] is None and c["status"] == "unknown" and c["cutoff"] >= out["batch_time_s"]
