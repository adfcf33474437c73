"""The schedule check (piper/frontend/schedule_check.py): interleaved plans whose unequal chunks the
formulas of docs/problem.md §9.2 misprice are caught, equal ones pass, and ``plan`` falls back to
1F1B with an honest status."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from piper import evaluate, plan_from_dict
from piper.cli.common import run_main
from piper.cli.main import main
from piper.frontend.schedule_check import check_schedule
from tests.render.test_timeline import chain, stage

INTERLEAVED_2 = {"kind": "interleaved", "virtualStages": 2}


def four_chunks() -> object:
    return plan_from_dict({"stages": [stage([i]) for i in range(4)], "schedule": INTERLEAVED_2})


def test_unequal_chunks_take_longer_than_the_formula_by_hand() -> None:
    """L = 2, v = 2, m = 2, chunk times 3, 3, 0.1, 0.1 (forward a third). Formula: 2 x 3.1 + 3.1 / 2
    = 7.75. Played out: the big chunks' backwards wait for the small ones, which wait for the big
    forwards: group 0's last backward (chunk 0, micro-batch 1) runs 7.2-9.2, so 9.2 (19% more)."""
    times = {0: 3.0, 1: 3.0, 2: 0.1, 3: 0.1}
    problem = chain(4, 2, 2, p=lambda i: times[i], memory=1e9)
    plan = four_chunks()
    check = check_schedule(problem, plan, evaluate(problem, plan))
    assert check.formula_batch_time == pytest.approx(7.75)
    assert check.simulated_batch_time == pytest.approx(9.2)
    assert not check.ok and "19% more" in check.reasons[0]


def test_equal_chunks_pass() -> None:
    problem = chain(4, 2, 4, p=lambda i: 1.55, a=lambda i: 1.0, memory=10.0)
    plan = four_chunks()
    check = check_schedule(problem, plan, evaluate(problem, plan))
    assert check.ok and check.simulated_batch_time == pytest.approx(check.formula_batch_time)
    assert check.order_memory_bytes == pytest.approx(check.formula_memory_bytes)


def test_a_pass_order_over_the_memory_limit_fails() -> None:
    """tests/render/test_timeline.py's hand case: the order holds 9, the formula 7.5; limit 8."""
    weights = {0: 2.0, 1: 1.0, 2: 1.0, 3: 1.0}
    problem = chain(4, 2, 4, a=lambda i: weights[i], memory=8.0)
    plan = four_chunks()
    score = evaluate(problem, plan)
    assert not score.oom
    check = check_schedule(problem, plan, score)
    assert check.order_memory_bytes == pytest.approx(9.0) and not check.ok
    assert "over the" in check.reasons[0]


def test_one_f_one_b_plans_are_not_timed() -> None:
    problem = chain(2, 2, 4, p=lambda i: float(i + 1), memory=1e9)
    plan = plan_from_dict({"stages": [stage([0]), stage([1])]})
    check = check_schedule(problem, plan, evaluate(problem, plan))
    assert check.simulated_batch_time is None and check.ok


def test_plan_falls_back_to_1f1b_with_an_honest_status(capsys) -> None:
    """llama3-8b on one H100 node, each layer choosing its recomputation (the DP's per-layer optimum:
    plan's default, one setting for the model, finds interleaved plans that pass): the best
    interleaved plan by the formulas holds 86 GB in its
    pass order (limit 79 GB); plan answers with the best 1F1B plan, status feasible, the rejected
    plan's value as the bound."""
    args = ["plan", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--seq", "4096", "--global-batch", "32",
            "--uniform", "--json", "--recompute-per-layer"]
    assert run_main(main, args) == 0
    m = json.loads(capsys.readouterr().out)
    rejected = m["rejected_interleaved"]
    assert rejected is not None and rejected["schedule"]["kind"] == "interleaved" and not rejected["ok"]
    assert rejected["order_memory_bytes"] > rejected["memory_limit_bytes"]
    assert m["status"] == "feasible" and m["schedule"] == {"kind": "1f1b"}
    assert m["bound"] == pytest.approx(rejected["value"]) and m["bound"] <= m["batch_time_s"]
    assert m["schedule_check"]["ok"]


class _Recorder:
    """A registered solver that records, per call, the moment and the time limit it was given."""

    def __init__(self, info) -> None:
        self.info = info
        self.calls: list[tuple[float, float | None, int]] = []

    def __getattr__(self, name):
        return getattr(self.info, name)

    def __call__(self, problem, options):
        self.calls.append((time.perf_counter(), options.time_limit_s, options.max_virtual_stages))
        return self.info(problem, options)


def test_plan_checks_inside_one_search_within_its_time_limit(capsys, monkeypatch) -> None:
    """The same run as above with --time-limit: the rejected workload is solved again with 1F1B only
    inside the one search, and no solve is given time past the command's limit (before, a second
    search started over with the whole limit)."""
    import piper.solvers.registry as registry

    recorders = []
    real = registry.get_solver

    def recording(name):
        recorders.append(_Recorder(real(name)))
        return recorders[-1]

    monkeypatch.setattr(registry, "get_solver", recording)
    limit = 500.0
    args = ["plan", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--seq", "4096", "--global-batch", "32",
            "--uniform", "--json", "--recompute-per-layer", "--time-limit", str(limit)]
    start = time.perf_counter()
    assert run_main(main, args) == 0
    m = json.loads(capsys.readouterr().out)
    calls = recorders[0].calls
    # the limit counts from the command's start, a moment after ours (argument parsing: well under 0.1 s;
    # the second search of before overshot by the whole first one)
    assert all(at + given <= start + limit + 0.1 for at, given, _ in calls)
    assert any(v == 1 for _, _, v in calls) and calls[0][2] > 1  # a 1F1B re-solve among the solves
    assert m["search"]["rejected_by_schedule_check"] >= 1
    assert m["status"] == "feasible" and m["schedule_check"]["ok"]
    assert m["rejected_interleaved"]["value"] < m["batch_time_s"]


def _plan_with(monkeypatch, capsys, cut, args) -> dict:
    """``plan --json`` with the solver's answers to the solves ``cut(problem, options)`` selects
    replaced by a time-limit cut (status unknown, no plan, nothing proven)."""
    import piper.solvers.registry as registry
    from piper.core.result import Status, make_result

    real = registry.get_solver

    class Cutting(_Recorder):
        def __call__(self, problem, options):
            if cut(problem, options):
                return make_result(problem, self.info.name, Status.UNKNOWN, None, time_s=0.0, bound=0.0,
                                   message="time limit (simulated)", objective_kind=options.objective)
            return self.info(problem, options)

    monkeypatch.setattr(registry, "get_solver", lambda name: Cutting(real(name)))
    assert run_main(main, args) == 0
    return json.loads(capsys.readouterr().out)


PLAN_8B = ["plan", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--seq", "2048", "--global-batch", "64",
           "--max-virtual-stages", "1", "--json"]


def test_a_cut_free_search_leaves_the_runnable_plan_proven(monkeypatch, capsys) -> None:
    """Every free solve cut by the time limit: the runnable plan's own searches were all proven, so
    it stays optimal; only the free side is unproven."""
    m = _plan_with(monkeypatch, capsys, lambda problem, options: not options.uniform, PLAN_8B)
    assert m["status"] == "optimal" and m["exact"] and not m["exact_all"]


def test_a_cut_uniform_search_makes_the_answer_feasible(monkeypatch, capsys) -> None:
    """One uniform workload (micro-batch 8) cut by the time limit: the winner's own solve is optimal,
    but the workload left unsearched might hold a better plan, so the answer is only feasible."""
    m = _plan_with(monkeypatch, capsys, lambda problem, options: options.uniform and problem.microbatches == 8,
                   PLAN_8B + ["--uniform"])
    assert m["micro_batch"] != 8
    assert m["status"] == "feasible" and not m["exact"] and m["bound"] is None


def test_the_text_says_which_solves_are_unproven(monkeypatch, capsys) -> None:
    """The cut uniform workload of the test above, in the text: an 'unproven' line counts the solves
    that ended without a proof and gives their reason."""
    import piper.solvers.registry as registry
    from piper.core.result import Status, make_result

    real = registry.get_solver

    class Cutting(_Recorder):
        def __call__(self, problem, options):
            if options.uniform and problem.microbatches == 8:
                return make_result(problem, self.info.name, Status.UNKNOWN, None, time_s=0.0, bound=0.0,
                                   message="time limit (simulated)", objective_kind=options.objective)
            return self.info(problem, options)

    monkeypatch.setattr(registry, "get_solver", lambda name: Cutting(real(name)))
    assert run_main(main, [a for a in PLAN_8B if a != "--json"] + ["--uniform"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("unproven"))
    assert "unknown" in line and "time limit (simulated)" in line


def _plan_weakened(monkeypatch, capsys, bound_of, args) -> dict:
    """``plan --json`` with every uniform solve of micro-batch 4 (16 micro-batches; the answer has 8)
    answered "feasible": its own plan, with the bound ``bound_of(result)`` in place of the proof."""
    import piper.solvers.registry as registry
    from piper.core.result import Status, make_result

    real = registry.get_solver

    class Weakening(_Recorder):
        def __call__(self, problem, options):
            res = self.info(problem, options)
            if options.uniform and problem.microbatches == 16 and res.plan is not None:
                return make_result(problem, self.info.name, Status.FEASIBLE, res.plan, time_s=0.0, objective=res.value,
                                   bound=bound_of(res), message="best plan (simulated)", objective_kind=options.objective)
            return res

    monkeypatch.setattr(registry, "get_solver", lambda name: Weakening(real(name)))
    assert run_main(main, args) == 0
    return json.loads(capsys.readouterr().out)


def test_a_feasible_solve_bounded_above_the_answer_is_proven(monkeypatch, capsys) -> None:
    """A "feasible" solve whose proven bound is at least the answer's value holds no better plan:
    the answer stays optimal (PlanSearch.proven)."""
    m = _plan_weakened(monkeypatch, capsys, lambda res: res.value, PLAN_8B + ["--uniform"])
    assert m["micro_batch"] == 8 and m["status"] == "optimal" and m["exact"] and m["bound"] is None


def test_an_unproven_answer_reports_its_proven_bound(monkeypatch, capsys) -> None:
    """A "feasible" solve bounded below the answer: the answer is feasible, and its bound is the least
    any solve proved (here the weakened solves' bound, half the least of their values)."""
    bounds = []

    def low(res):
        bounds.append(0.5 * res.value)
        return bounds[-1]

    m = _plan_weakened(monkeypatch, capsys, low, PLAN_8B + ["--uniform"])
    assert m["status"] == "feasible" and not m["exact"]
    assert m["bound"] == pytest.approx(min(bounds), rel=1e-12) and m["bound"] < m["batch_time_s"]


def test_an_even_split_the_descent_skips_answers_instead_of_its_1f1b_plan() -> None:
    """The Megatron-LM README's gpt-314b (3,072 H100, t = 8, b = 1, no recomputation): the DP's v = 6
    optimum has unequal chunks and plays out 7% slower than its formula; the descent to v = 5, ..., 2
    finds only failing plans and ends at 1F1B (10.95 s), while Megatron's own even split at the same
    layout (v = 6, 2 layers per chunk: the published layout) passes the check at 9.72 s. The workload
    now answers with that plan, "feasible" (the rejected plan's bound below it)."""

    from experiments.validate.rows import readme_cases
    from piper.core.options import BATCH_TIME, Options
    from piper.core.result import Status
    from piper.frontend.planner import even_split_alternative, search_plans
    from piper.frontend.score import check_layout, layout_plan
    from piper.solvers.registry import get_solver

    case = next(c for c in readme_cases() if c.name == "gpt-314b")
    setup = replace(case.setup, sequence_parallel=True, overlap_grad_reduce=False, overlap_param_gather=False,
                    optimizer_step=False)
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=8, progress=False)
    (cand,) = search_plans(case.cfg.with_changes(micro_batch=1), case.hw, setup, get_solver("dp"), options,
                           micro_batches=(1,), free=False, degrees=(8,), recomputes=(("none",),),
                           check_schedules=True).candidates
    assert cand.rejected is not None and cand.rejected.plan.schedule.virtual_stages == 6
    plan = cand.result.plan
    assert cand.result.status == Status.FEASIBLE and plan.schedule.virtual_stages == 6 and plan.groups == 8
    assert [sum(1 for v in st.nodes if cand.problem.node_by_id[v].kind == "transformer") for st in plan.stages] == [2] * 48
    # it is the published layout's plan, on this workload
    lay = replace(case.layout, vp=6, recompute="none", sequence_parallel=True)
    cfg = case.cfg.with_changes(micro_batch=1)
    published = layout_plan(cand.problem, check_layout(cfg, case.hw, setup, lay), lay)
    assert plan == published
    assert cand.result.bound <= cand.rejected.value <= cand.value
    # without a cutoff to beat, the function finds the same plan; mixed TMPCs: none
    got = even_split_alternative(cfg, cand.problem, cand.rejected.plan, BATCH_TIME, float("inf"))
    assert got is not None and got[0] == plan and got[1] == pytest.approx(cand.value, rel=1e-12)
    mixed = replace(cand.rejected.plan, stages=tuple(
        replace(st, tmpcs={v: ("none" if i == 3 and cand.problem.node_by_id[v].kind == "transformer" else tid)
                           for v, tid in st.tmpcs.items()}) for i, st in enumerate(cand.rejected.plan.stages)))
    assert even_split_alternative(cfg, cand.problem, mixed, BATCH_TIME, float("inf")) is None


def test_the_even_split_of_another_pipeline_size_replaces_a_rejected_plan() -> None:
    """The Megatron-LM README's gpt-177b (t = 8, b = 2, 2,304 H100) on the search's workload with the
    iteration keys: the DP's best interleaved plan has 4 device groups and fails the schedule check, and
    so do the descent's; 96 layers split evenly over 4 groups only with v in {1, 2, 3, 4, 6, 8, 12, ...},
    but the published layout (p = 6, v = 8) is another pipeline size. The search answers with it (the
    descent ended at 6.38 s; the layout takes 5.19 s), not with the descent's plan."""
    from experiments.validate.rows import readme_cases
    from piper.core.options import BATCH_TIME, Options
    from piper.frontend.planner import search_plans, search_setup
    from piper.frontend.score import check_layout, layout_plan
    from piper.solvers.registry import get_solver

    case = next(c for c in readme_cases() if c.name == "gpt-177b")
    setup = replace(case.setup, sequence_parallel=True)
    cfg = case.cfg.with_changes(micro_batch=2)
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=8, progress=False)
    (cand,) = search_plans(cfg, case.hw, setup, get_solver("dp"), options, micro_batches=(2,), free=False,
                           degrees=(8,), recomputes=(("none",),), check_schedules=True, iteration_keys=True).candidates
    assert cand.rejected is not None and cand.rejected.plan.groups != 6
    lay = replace(case.layout, recompute="none", sequence_parallel=True)
    published = layout_plan(cand.problem, check_layout(cfg, case.hw, search_setup(setup, True), lay), lay)
    assert cand.result.plan == published
    assert cand.value == pytest.approx(evaluate(cand.problem, published).batch_time, rel=1e-12)
    assert "p = 6, v = 8" in cand.result.message


def test_the_even_split_alternative_counts_the_embedding_and_the_loss_as_megatron_core_can() -> None:
    """A 7-layer model splits evenly into no p v >= 4 chunks, but with the embedding and / or the loss
    counted as a layer each (Megatron-Core's --account-for-...-in-pipeline-split; 8 or 9 "layers") it
    does: the alternative to a rejected interleaved plan is such a split (before, there was none)."""
    from piper.core.options import BATCH_TIME
    from piper.frontend.config import TransformerConfig
    from piper.frontend.hardware import Hardware
    from piper.frontend.planner import even_split_alternative
    from piper.frontend.score import Layout, layout_plan
    from piper.frontend.workload import TrainingSetup, build_workload
    from piper.io.workload import load_problem

    cfg = TransformerConfig(name="toy7", layers=7, hidden_size=64, attention_heads=4, kv_heads=4, ffn_hidden_size=256,
                            vocab_size=128, seq_length=256, micro_batch=1)
    hw = Hardware(name="toy", peak_flops=1e12, memory_bytes=1e10, devices_per_node=2, nvlink_bandwidth=1e9,
                  network_bandwidth=1e8, memory_bandwidth=1e11)
    problem = load_problem(build_workload(cfg, hw, TrainingSetup(nodes=2, global_batch=8), degrees=(1,),
                                          recompute=("none",)), strict=True)
    rejected = layout_plan(problem, [3, 1, 2, 1], Layout(tp=1, pp=2, dp=2, recompute="none", vp=2))
    got = even_split_alternative(cfg, problem, rejected, BATCH_TIME, float("inf"), max_virtual_stages=4)
    assert got is not None
    plan, value = got
    sizes = [sum(1 for v in st.nodes if problem.node_by_id[v].kind == "transformer") for st in plan.stages]
    assert sum(sizes) == 7 and len(sizes) >= 4 and plan.schedule.virtual_stages >= 2
    # Megatron-Core's split with one or both flags: equal chunks, the first and / or the last one fewer
    assert len(set(sizes[1:-1])) == 1 and (sizes[0] < sizes[1] or sizes[-1] < sizes[-2])
    assert value == pytest.approx(evaluate(problem, plan).batch_time, rel=1e-12)
    assert check_schedule(problem, plan, evaluate(problem, plan)).ok
