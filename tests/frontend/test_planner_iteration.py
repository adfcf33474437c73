"""The planner's search with the iteration keys (docs/problem.md §10; piper/frontend/planner.py):
the workloads carry the optimizer step and the resync's overlap, Piper's DP prices them exactly
(against brute force and the exact models on a small front-end workload with real magnitudes), and the search minimizes
the iteration ``score`` prices, which a search without the keys does not."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from baselines.brute import solve_brute
from piper import Options, evaluate, solve
from piper.core.errors import SolverError
from piper.core.options import BATCH_TIME
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware, hardware
from piper.frontend.planner import search_plans, takes_iteration_keys, with_optimizer_step_s
from piper.frontend.presets import preset
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from piper.solvers.registry import SolverInfo, get_solver

TOY = TransformerConfig(name="toy", layers=3, hidden_size=64, attention_heads=4, kv_heads=4, ffn_hidden_size=256,
                        vocab_size=128, seq_length=256, micro_batch=1)
#: a solver that does not honour the keys (every shipped one does); never registered
NO_KEYS = SolverInfo("no-iteration-keys", "piper.dp:solve_dp", True, "the DP without the iteration keys",
                     {"knapsack": "exact"})
#: a slow network, so that the resync matters and its overlap decides
TOY_HW = Hardware(name="toy", peak_flops=1e12, memory_bytes=1e9, devices_per_node=2, nvlink_bandwidth=1e9,
                  network_bandwidth=1e7, memory_bandwidth=1e11)


def test_a_layers_tmpcs_at_a_degree_share_the_least_overlap():
    setup = TrainingSetup(nodes=2, global_batch=8, overlap_grad_reduce=True, optimizer_step=True)
    w = build_workload(TOY, TOY_HW, setup)
    layer = w["nodes"][1]["TMPCs"]
    for entries in layer.values():
        hs = {e["resyncOverlapTime"] for e in entries}
        assert len(hs) == 1 and next(iter(hs)) > 0
    # one recomputation kind: each TMPC keeps its own backward pass; the least is that of no recomputation
    for t, entries in layer.items():
        own = build_workload(TOY, TOY_HW, setup, recompute=("none",))["nodes"][1]["TMPCs"][t]
        assert {e["resyncOverlapTime"] for e in entries} == {e["resyncOverlapTime"] for e in own if "none" in e["id"]}
        full = build_workload(TOY, TOY_HW, setup, recompute=("full",))["nodes"][1]["TMPCs"][t]
        assert min(e["resyncOverlapTime"] for e in full) > min(e["resyncOverlapTime"] for e in entries)


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("overlap", [(False, False), (True, False), (True, True)])
def test_dp_prices_a_front_end_workload_with_the_keys_as_brute_force(uniform, overlap):
    setup = TrainingSetup(nodes=2, global_batch=8, overlap_grad_reduce=overlap[0], overlap_param_gather=overlap[1],
                          optimizer_step=True)
    problem = load_problem(build_workload(TOY, TOY_HW, setup, degrees=(1, 2), recompute=("none", "full")), strict=True)
    assert problem.has_iteration_keys
    for objective in ("tps", BATCH_TIME):
        options = Options(objective=objective, uniform=uniform)
        dp = solve(problem, options, "dp")
        brute = solve_brute(problem, options)
        assert dp.status.value == brute.status.value == "optimal"
        assert dp.value == pytest.approx(brute.value, rel=1e-9)
        assert evaluate(problem, dp.plan).batch_time == pytest.approx(dp.score.batch_time, rel=1e-12)


@pytest.mark.parametrize("solver", ["cpsat", "milp-highs"])
def test_the_exact_models_prove_the_dps_plan_on_the_keyed_front_end_workload(solver):
    """The planner's workloads with the keys (one h per layer and degree, the step) are proven by the
    exact models too (docs/formulations.md §12): the same optimum as the DP and brute force."""
    setup = TrainingSetup(nodes=2, global_batch=8, overlap_grad_reduce=True, overlap_param_gather=True,
                          optimizer_step=True)
    problem = load_problem(build_workload(TOY, TOY_HW, setup, degrees=(1, 2), recompute=("none", "full")), strict=True)
    for objective in ("tps", BATCH_TIME):
        options = Options(objective=objective)
        exact, brute = solve(problem, options, solver), solve_brute(problem, options)
        assert exact.status.value == "optimal", exact.message
        assert abs(exact.value - brute.value) <= exact.tolerance + 1e-12 * brute.value
        assert solve(problem, options, "dp").value == pytest.approx(exact.value, rel=1e-9)


def test_the_overlap_changes_the_toy_optimum():
    """The keys matter on this instance: with the overlap the best plan differs in value from the
    best plan without it (else the test above would not tell a dropped overlap apart)."""
    base = TrainingSetup(nodes=2, global_batch=8, optimizer_step=True)
    values = []
    for grad in (False, True):
        setup = TrainingSetup(**{**base.__dict__, "overlap_grad_reduce": grad})
        problem = load_problem(build_workload(TOY, TOY_HW, setup, degrees=(1, 2), recompute=("none",)), strict=True)
        values.append(solve_brute(problem, Options(objective=BATCH_TIME)).value)
    assert values[1] < values[0] * (1 - 1e-3)


def test_the_keyed_search_minimizes_the_iteration_score_prices():
    """megatron-1.7b on 4 DGX A100 nodes with --overlap-grad-reduce, 1F1B: the search with the keys
    answers a plan whose value is its iteration as ``score`` prices it (with_optimizer_step_s), and no
    plan of the search without them is faster once priced that way."""
    cfg, hw = preset("megatron-1.7b"), hardware("a100-80gb")
    setup = TrainingSetup(nodes=4, global_batch=256, overlap_grad_reduce=True, overlap_param_gather=True,
                          sequence_parallel=True)
    dp = get_solver("dp")
    assert takes_iteration_keys(dp, setup) and not takes_iteration_keys(NO_KEYS, setup)
    options = Options(objective=BATCH_TIME, max_virtual_stages=1)
    kw = {"micro_batches": (1, 2, 4), "free": False, "recomputes": (("none",), ("selective",)), "per_degree": True}
    keyed = search_plans(cfg, hw, setup, dp, options, iteration_keys=True, **kw)
    plain = search_plans(cfg, hw, setup, dp, options, iteration_keys=False, **kw)
    assert keyed.iteration_keys and not plain.iteration_keys and keyed.exact and plain.exact
    best = keyed.runnable
    assert with_optimizer_step_s(cfg, hw, setup, best) == pytest.approx(best.value, rel=1e-12)
    priced = [with_optimizer_step_s(cfg, hw, setup, c) for c in plain.candidates if c.result.plan is not None]
    assert min(priced) >= best.value * (1 - 1e-12)
    # the keys change the numbers: the answer without them runs in another time than its value says
    assert with_optimizer_step_s(cfg, hw, setup, plain.runnable) != pytest.approx(plain.runnable.value, rel=1e-3)


def test_search_refuses_keys_for_a_solver_without_them():
    setup = TrainingSetup(nodes=1, global_batch=8)
    with pytest.raises(ValueError, match="iteration keys"):
        search_plans(TOY, TOY_HW, setup, NO_KEYS, Options(), micro_batches=(1,), iteration_keys=True)


def test_plan_command_prices_the_iteration(cli):
    code, out, err = cli("piper", "plan", "megatron-1.7b", "--gpu", "a100-80gb", "--nodes", "2", "--global-batch", "64",
                         "--uniform", "--max-virtual-stages", "1", "--overlap-grad-reduce", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["iteration_keys_in_search"] is True
    assert math.isclose(res["batch_time_with_optimizer_step_s"], res["batch_time_s"], rel_tol=1e-9)


def test_the_exact_models_take_the_keys_with_expert_tensor_parallelism():
    """With ``expert_tensor_parallel`` a MoE layer's TMPCs at a degree differ in their expert keys: the
    DP would refuse the iteration keys there, the exact models do not, so only the DP's search goes
    without them; a CP-SAT search with them answers brute force's optimum of each workload it solved."""
    from piper.frontend.moe import MoEConfig

    cfg = TransformerConfig(name="toy-moe", layers=2, hidden_size=64, attention_heads=4, kv_heads=4,
                            ffn_hidden_size=128, vocab_size=128, seq_length=64, micro_batch=1, linear_bias=False,
                            moe=MoEConfig(experts=4, top_k=2, expert_ffn_hidden_size=64))
    hw = replace(TOY_HW, memory_bytes=1e10, devices_per_node=4)  # at t = 2: e = 2 with e_t = 1 or 2 (no biases)
    setup = TrainingSetup(nodes=1, global_batch=4, overlap_grad_reduce=True, expert_tensor_parallel=True,
                          expert_parallel=2)
    cpsat = get_solver("cpsat")
    assert takes_iteration_keys(cpsat, setup) and not takes_iteration_keys(get_solver("dp"), setup)
    assert takes_iteration_keys(get_solver("dp"), replace(setup, expert_tensor_parallel=False))
    search = search_plans(cfg, hw, setup, cpsat, Options(objective=BATCH_TIME), micro_batches=(1,), free=False,
                          recomputes=(("none",),), iteration_keys=True)
    assert search.iteration_keys and search.runnable is not None
    refused = 0
    for c in search.candidates:
        assert c.problem.has_iteration_keys
        with pytest.raises(SolverError, match="share"):
            solve(c.problem, Options(objective=BATCH_TIME, uniform=True), "dp")
        refused += 1
        brute = solve_brute(c.problem, Options(objective=BATCH_TIME, uniform=True))
        assert c.result.status.value == brute.status.value == "optimal"
        assert abs(c.value - brute.value) <= c.result.tolerance + 1e-9 * brute.value
    assert refused >= 1
