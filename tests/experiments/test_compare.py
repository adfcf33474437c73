"""experiments.compare and experiments.lib.suites, with fake solvers (tests/compare_fakes.py,
registered by the ``fake_solvers`` fixture) so that these tests depend on no other solver module."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.compare.cross_checks import InstanceReport, check_instance
from experiments.compare.runner import run_compare
from experiments.compare.solve import SolverRun, run_from_result
from experiments.lib.suites import Instance, build_suite, slice_problem, suite_names
from piper.core.options import Options
from piper.core.result import Status, make_result
from piper.io.workload import dump_problem, load_problem
from piper.solvers.registry import get_solver
from tests.commands import RunCompare, RunFakes
from tests.compare_fakes import fake_result, one_stage, read_report, report_row, two_layer_problem

# ---------------------------------------------------------------------------------
# end to end through the command line
# ---------------------------------------------------------------------------------


def test_agreeing_solvers_exit_0_and_reports_have_one_row_per_instance_and_solver(
    fake_solvers: None, two_layer_file: Path, tmp_path: Path, compare_cli: RunCompare
) -> None:
    out = tmp_path / "out"
    solvers = "fake-good,fake-heuristic,fake-too-large,fake-missing,fake-tiny-only"
    code, stdout, _ = compare_cli([str(two_layer_file), str(two_layer_file), "--solvers", solvers, "--out", str(out)])
    assert code == 0, stdout
    doc, rows = read_report(out)
    pairs = [(r["instance"], r["solver"]) for r in rows]
    assert len(pairs) == len(set(pairs)) == 2 * 5
    assert [(r["instance"], r["solver"]) for r in doc["rows"]] == pairs
    by_solver = {r["solver"]: r for r in rows if r["instance"] == "two"}
    assert by_solver["fake-good"]["status"] == "optimal"
    assert float(by_solver["fake-good"]["tps"]) == pytest.approx(4.0)
    assert by_solver["fake-heuristic"]["status"] == "feasible"
    assert float(by_solver["fake-heuristic"]["gap"]) == pytest.approx(0.5)
    assert by_solver["fake-too-large"]["status"] == "skipped"
    assert "refuses" in by_solver["fake-too-large"]["message"]
    assert by_solver["fake-missing"]["status"] == "unavailable"
    assert by_solver["fake-tiny-only"]["status"] == "skipped"
    assert all(r["check"] == "ok" for r in rows)
    assert doc["meta"]["complete"] is True
    assert [i["verdict"] for i in doc["instances"]] == ["single", "single"]
    assert "fake-heuristic" in stdout and "+50.00%" in stdout


def test_suboptimal_plan_claimed_optimal_exits_1_names_the_solver_and_dumps_the_instance(
    compare_two: RunFakes, tmp_path: Path, compare_cli: RunCompare
) -> None:
    code, stdout, err, out = compare_two("fake-good,fake-suboptimal")
    assert code == 1
    assert "FAIL fake-suboptimal: optimality" in stdout
    _, rows = read_report(out)
    checks = {r["solver"]: r["check"] for r in rows}
    assert checks == {"fake-good": "ok", "fake-suboptimal": "FAIL"}
    dumped = out / "failed" / "two.json"
    assert dumped.exists() and str(dumped) in err
    assert load_problem(dumped) == two_layer_problem()
    # the dumped instance re-runs alone and fails the same way
    code2, stdout2, _ = compare_cli([str(dumped), "--solvers", "fake-suboptimal,fake-good", "--out", str(tmp_path / "o2")])
    assert code2 == 1 and "FAIL fake-suboptimal: optimality" in stdout2


def test_wrong_claimed_objective_exits_1(compare_two: RunFakes) -> None:
    code, stdout, _, _ = compare_two("fake-liar")
    assert code == 1
    assert "FAIL fake-liar: objective" in stdout


def test_plans_are_rescored_by_the_evaluator(compare_two: RunFakes) -> None:
    code, stdout, _, out = compare_two("fake-good,fake-bypass,fake-invalid")
    assert code == 1
    assert "FAIL fake-bypass: tps: Result.tps 4.0 is not the evaluator's 6.0" in stdout
    assert "FAIL fake-bypass: optimality" in stdout  # its plan (6) is worse than fake-good's (4)
    assert "FAIL fake-invalid: exception: invalid plan: PlanError: rule 1" in stdout
    bypass = report_row(out, "fake-bypass")
    assert (float(bypass["tps"]), float(bypass["reported_tps"])) == (6.0, 4.0)


def test_time_limited_solver_is_reported_with_its_bound_not_as_disagreeing(compare_two: RunFakes) -> None:
    code, stdout, _, out = compare_two("fake-good,fake-slow", "--time-limit", "1")
    assert code == 0, stdout
    slow = report_row(out, "fake-slow")
    assert slow["status"] == "feasible" and slow["limit"] == "True" and slow["check"] == "ok"
    assert float(slow["bound"]) == 1.0 and float(slow["gap"]) == pytest.approx(0.5)
    assert "feasible (limit)" in stdout and "bound 1" in stdout
    assert "hit the time limit 1x" in stdout


def test_an_exact_solver_stopping_early_without_proof_is_flagged_not_failed(compare_two: RunFakes) -> None:
    code, stdout, _, out = compare_two("fake-good,fake-give-up")
    assert code == 0, stdout
    row = report_row(out, "fake-give-up")
    assert (row["status"], row["limit"], row["early"], row["check"]) == ("unknown", "False", "True", "ok")
    assert "unknown (early)" in stdout and "gave up" in stdout and "stopped early without a proof 1x" in stdout


def test_bound_above_the_best_plan_and_exceptions_fail_without_crashing(compare_two: RunFakes) -> None:
    code, stdout, _, _ = compare_two("fake-good,fake-bad-bound,fake-crash")
    assert code == 1
    assert "FAIL fake-bad-bound: bound" in stdout
    assert "FAIL fake-crash: exception: ZeroDivisionError: boom" in stdout


def test_a_solve_that_ignores_its_time_limit_is_killed_and_a_dying_one_fails(
    fake_solvers: None, two_layer_file: Path, tmp_path: Path, compare_cli: RunCompare
) -> None:
    out = tmp_path / "out"
    args = [str(two_layer_file), "--time-limit", "0.1", "--hard-timeout", "1", "--out", str(out)]
    code, stdout, _ = compare_cli([*args, "--solvers", "fake-good,fake-hang"])
    assert code == 0, stdout
    hang = report_row(out, "fake-hang")
    assert hang["status"] == "killed" and hang["limit"] == "True" and hang["check"] == "ok"
    assert "not honoured" in hang["message"]
    code, stdout, _ = compare_cli([*args, "--solvers", "fake-good,fake-die"])
    assert code == 1 and "FAIL fake-die: exception: the solver process died" in stdout and "exit code 3" in stdout


def test_one_time_costs_stay_out_of_the_measured_times(
    fake_solvers: None, two_layer_file: Path, tmp_path: Path, compare_cli: RunCompare
) -> None:
    out = tmp_path / "out"
    code, _, _ = compare_cli([str(two_layer_file), str(two_layer_file), "--solvers", "fake-jit", "--out", str(out)])
    assert code == 0
    _, rows = read_report(out)
    assert [float(r["solver_time_s"]) for r in rows] == [0.0, 0.0]  # the warm-up took the slow first call


def test_execution_backends_give_the_same_rows(
    fake_solvers: None, two_layer_file: Path, tmp_path: Path, compare_cli: RunCompare
) -> None:
    """Serial, threads driving 2 solver processes, and a process pool of in-process solves."""
    args = [str(two_layer_file)] * 3 + ["--solvers", "fake-good,fake-heuristic,fake-liar"]
    code1, _, _ = compare_cli([*args, "--out", str(tmp_path / "a")])
    code2, _, _ = compare_cli([*args, "--out", str(tmp_path / "b"), "--jobs", "2"])
    code3, _, _ = compare_cli([*args, "--out", str(tmp_path / "c"), "--jobs", "2", "--hard-timeout", "0"])
    assert code1 == code2 == code3 == 1
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]
    serial = strip(read_report(tmp_path / "a")[1])
    assert len(serial) == 9
    assert serial == strip(read_report(tmp_path / "b")[1]) == strip(read_report(tmp_path / "c")[1])


@pytest.mark.parametrize(
    "args, words",
    [
        (["--solvers", "nope"], "unknown solver 'nope'"),
        (["--suite", "nope"], "unknown suite 'nope'"),
        (["--suite", "random:0"], "unknown suite 'random:0'"),
        (["--devices", "4"], "apply to FILE arguments"),
        (["no/such/file.json"], "cannot read workload file"),
        (["--jobs", "0"], "--jobs"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], words: str, tmp_path: Path, compare_cli: RunCompare) -> None:
    code, stdout, err = compare_cli([*args, "--out", str(tmp_path / "o")])
    assert code == 2
    assert stdout == ""
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_cluster_overrides_and_slice_apply_to_files(
    fake_solvers: None, tmp_path: Path, compare_cli: RunCompare
) -> None:
    path = tmp_path / "two.json"
    dump_problem(two_layer_problem(), path)
    out = tmp_path / "o"
    code, _, _ = compare_cli([str(path), "--slice", "1", "-k", "3", "-M", "1KiB", "--solvers", "fake-good", "--out", str(out)])
    assert code == 0
    doc, _ = read_report(out)
    inst = doc["instances"][0]
    assert (inst["name"], inst["layers"], inst["k"], inst["memory"]) == ("two[:1]", 1, 3, 1024.0)


def test_list(compare_cli: RunCompare) -> None:
    code, stdout, _ = compare_cli(["--list"])
    assert code == 0
    assert "paper-slices" in stdout and "dp-greedy" in stdout


# ---------------------------------------------------------------------------------
# the checks on synthetic runs
# ---------------------------------------------------------------------------------


def _report(*runs: SolverRun) -> InstanceReport:
    return InstanceReport("x", "t", "", 2, 1, 1, 1, 1.0, list(runs))


def _run(solver: str, status: str, tps: float = math.inf, exact: bool = True, **kw: object) -> SolverRun:
    plan = {"stages": []} if math.isfinite(tps) else None
    return SolverRun(solver, exact, status, tps=tps, value=tps, objective=kw.pop("objective", tps if plan else None), plan=plan, **kw)  # type: ignore[arg-type]


def _from_result(solver: str, status: Status, tmpc: str | None, **kw: object) -> SolverRun:
    """The row compare makes of a Result (scored and checked by piper.check_result)."""
    problem = two_layer_problem()
    return run_from_result(problem, solver, True, fake_result(problem, solver, status, tmpc, **kw))


def test_checks_agreement_within_tolerance() -> None:
    """Each claim is held to its solver's stated tolerance (Result.tolerance), plus 1e-9
    relative of floating-point noise."""
    rep = check_instance(_report(_run("a", "optimal", 1.0), _run("b", "optimal", 1.0 + 5e-7, tolerance=1e-6),
                                 _run("h", "feasible", 1.1, exact=False)))
    assert rep.ok and rep.verdict == "agree" and rep.optimum == 1.0
    assert rep.runs[2].gap == pytest.approx(0.1) and rep.runs[2].gap_vs_proof
    # the same gap with a stated tolerance 10x smaller is a failed optimality check
    rep = check_instance(_report(_run("a", "optimal", 1.0), _run("b", "optimal", 1.0 + 5e-7, tolerance=5e-8)))
    assert [(f.solver, f.check) for f in rep.failures] == [("b", "optimality")]
    # floating-point noise alone is tolerated
    rep = check_instance(_report(_run("a", "optimal", 1.0), _run("b", "optimal", 1.0 + 1e-12)))
    assert rep.ok
    # a claimed objective within the tolerance of the evaluated TPS passes, beyond it fails
    # (piper.check_result, run on the Result; the optimum of two_layer_problem is 4)
    ok = check_instance(_report(_from_result("a", Status.OPTIMAL, "vanilla", objective=4.0 - 16e-7, tolerance=4e-6)))
    bad = check_instance(_report(_from_result("a", Status.OPTIMAL, "vanilla", objective=4.0 - 16e-7, tolerance=4e-7)))
    assert ok.ok and [(f.solver, f.check) for f in bad.failures] == [("a", "objective")]


def test_checks_disagreeing_exact_solvers_blame_the_worse_one() -> None:
    rep = check_instance(_report(_run("a", "optimal", 1.0), _run("b", "optimal", 1.01)))
    assert [(f.solver, f.check) for f in rep.failures] == [("b", "optimality")]
    assert rep.verdict == "FAIL"


def test_checks_infeasible_claim_refuted_by_a_heuristic_plan() -> None:
    rep = check_instance(_report(_run("a", "infeasible", bound=math.inf), _run("h", "feasible", 2.0, exact=False)))
    assert {(f.solver, f.check) for f in rep.failures} == {("a", "optimality"), ("a", "bound")}


def test_checks_all_infeasible_and_unproven() -> None:
    rep = check_instance(_report(_run("a", "infeasible", bound=math.inf), _run("b", "infeasible"), _run("h", "unknown", exact=False)))
    assert rep.ok and rep.verdict == "agree" and rep.optimum == math.inf
    rep = check_instance(_report(_run("a", "feasible", 3.0, bound=2.0), _run("b", "unknown", bound=0.0)))
    assert rep.ok and rep.verdict == "unproven" and rep.optimum is None and rep.runs[0].gap == 0.0
    assert rep.runs[0].limit and rep.runs[1].limit and not rep.runs[0].gap_vs_proof


def test_checks_oom_plan_and_missing_plan() -> None:
    tight = two_layer_problem().with_cluster(memory=1.0)  # each layer's 1.0 of weights plus activations: OOM
    # make_result refuses an optimal claim on an OOM plan (SolverError); compare must catch one built otherwise
    claimed = replace(make_result(tight, "a", Status.FEASIBLE, one_stage(tight, "vanilla"), time_s=0.0, bound=1.0),
                      status=Status.OPTIMAL)
    oom = run_from_result(tight, "a", True, claimed)
    missing = _from_result("b", Status.FEASIBLE, None)
    assert oom.has_plan and math.isinf(oom.tps)
    rep = check_instance(_report(oom, missing))
    assert {(f.solver, f.check) for f in rep.failures} == {("a", "plan"), ("b", "plan")}


def test_run_compare_reports_after_every_instance(fake_solvers: None) -> None:
    seen: list[int] = []
    inst = Instance("two", two_layer_problem(), "t")
    reports = run_compare(
        [inst, inst], [get_solver("fake-good")], Options(), on_report=lambda r, done: seen.append(len(done))
    )
    assert seen == [1, 2] and all(r.ok for r in reports)


# ---------------------------------------------------------------------------------
# suites and slices
# ---------------------------------------------------------------------------------


def test_slice_is_a_valid_induced_prefix() -> None:
    from experiments.lib.suites import paper_workload

    bert = paper_workload("bert")
    sl = slice_problem(bert, 6, name="b6")
    keep = set(bert.topological_order[:6])
    assert {nd.id for nd in sl.nodes} == keep and sl.extra["name"] == "b6"
    assert all(e.u in keep and e.v in keep for e in sl.edges)
    assert len(sl.edges) == sum(1 for e in bert.edges if e.u in keep and e.v in keep)
    for nd in sl.nodes:
        for lst in nd.tmpcs.values():
            for c in lst:
                assert set(c.sync_fw) == {e.u for e in sl.in_edges[nd.id]}
                assert set(c.sync_bw) == {e.v for e in sl.out_edges[nd.id]}
    assert slice_problem(bert, 1000) == bert


def test_suites_are_deterministic_and_named_uniquely() -> None:
    for name in suite_names():
        a, b = build_suite(name), build_suite(name)
        assert [i.name for i in a] == [i.name for i in b]
        assert [i.problem for i in a] == [i.problem for i in b]
        assert len({i.name for i in a}) == len(a) > 0
    rnd = build_suite("random:3:10")
    assert [i.name for i in rnd] == ["random-chain-n3-seed10", "random-chain-n4-seed11", "random-chain-n5-seed12"]
    for bad in ("random:0", "random:x", "random:1:2:3", "nope"):
        with pytest.raises(KeyError):
            build_suite(bad)
    default = build_suite("default")
    assert {i.suite for i in default} >= {"tiny", "small", "paper-slices", "infeasible"}


def test_python_m_experiments_dispatches_to_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.__main__ import commands, main

    assert "compare" in commands() and "suites" not in commands() and "lib" not in commands()
    assert main([]) == 2 and "compare" in capsys.readouterr().out
    assert main(["nope"]) == 2 and "unknown command 'nope'" in capsys.readouterr().err


def test_time_limit_and_ablations_reach_the_solvers_and_the_rerun_hint(
    fake_solvers: None, two_layer_file: Path, tmp_path: Path, compare_cli: RunCompare
) -> None:
    out = tmp_path / "out"
    args = [str(two_layer_file), "--solvers", "fake-echo,fake-liar", "--time-limit", "3", "--no-ar", "--no-dp", "--out", str(out)]
    code, _, err = compare_cli(args)
    assert code == 1
    echo = report_row(out, "fake-echo")
    assert echo["message"] == "time_limit_s=3.0 exclude=['activation recomp'] dp=False"
    assert "--solvers fake-echo,fake-liar --time-limit 3 --no-dp --no-ar" in err


def test_suite_claims_hold_by_brute_force() -> None:
    """Paper slices: memory binds (the optimum is worse than with unlimited memory);
    the infeasible suite is infeasible. Checked with the brute force where it applies."""
    from baselines import brute
    for inst in build_suite("paper-slices"):
        p = inst.problem
        if p.n > brute.MAX_NODES:
            continue
        tight = brute.solve_brute(p, Options())
        loose = brute.solve_brute(p.with_cluster(memory=1e30), Options())
        assert tight.status == Status.OPTIMAL and tight.tps > loose.tps * (1 + 1e-9), inst.name
    for inst in build_suite("infeasible"):
        assert brute.solve_brute(inst.problem, Options()).status == Status.INFEASIBLE, inst.name


def test_window_suite_is_what_it_says() -> None:
    """Every chain of the window suite has its optimum decided by resyncOverlapWindow (brute force with
    "microbatch" instead is slower), and Piper's DP proves brute force's optimum."""
    from baselines import brute
    from piper import problem_from_dict, problem_to_dict, solve

    for inst in build_suite("window"):
        options = Options(objective=inst.objective, uniform=inst.uniform, max_virtual_stages=inst.max_virtual_stages)
        plain = problem_from_dict({**problem_to_dict(inst.problem), "resyncOverlapWindow": "microbatch"})
        a, b = brute.solve_brute(inst.problem, options), brute.solve_brute(plain, options)
        assert a.status == Status.OPTIMAL and a.value < b.value * (1 - 1e-9), inst.name
        dp = solve(inst.problem, options, solver="dp")
        assert dp.status == Status.OPTIMAL and abs(dp.value - a.value) <= 1e-9 * a.value, inst.name


def test_identical_chains_suite_is_what_it_says() -> None:
    """Each chain's inner layers are found identical by the aggregated model's detection (3-5 of
    them, 1 head and 2 tail layers), brute force can solve it, and memory binds."""
    from baselines import brute
    from baselines.aggregate.chain import detect_chain
    instances = build_suite("identical-chains")
    assert {i.objective for i in instances} == {"tps", "batch-time"} and any(i.uniform for i in instances)
    for inst in instances[::3]:
        p = inst.problem
        chain = detect_chain(p)
        assert (chain.head, chain.tail) == (1, 2) and 3 <= chain.n_inner <= 5 and p.n <= brute.MAX_NODES
        tight = brute.solve_brute(p, Options())
        loose = brute.solve_brute(p.with_cluster(memory=1e30), Options())
        assert tight.status == Status.OPTIMAL and tight.tps > loose.tps * (1 + 1e-9), inst.name


def test_an_interrupted_run_keeps_the_finished_instances(
    fake_solvers: None, tmp_path: Path, compare_cli: RunCompare
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    dump_problem(two_layer_problem("first"), first)
    dump_problem(two_layer_problem("second"), second)
    out = tmp_path / "out"
    args = [str(first), str(second), "--solvers", "fake-ctrl-c", "--hard-timeout", "0", "--out", str(out)]
    code, _, err = compare_cli(args)
    assert code == 130 and "interrupted: 1/2 instances kept" in err
    doc, rows = read_report(out)
    assert doc["meta"]["interrupted"] is True and doc["meta"]["complete"] is False
    assert [(r["instance"], r["status"]) for r in rows] == [("first", "optimal")]


def test_nothing_proven_is_exit_1_with_one_line(tmp_path: Path, compare_cli: RunCompare) -> None:
    """Heuristics alone check nothing: compare must not report success (issue 19)."""
    code, _, err = compare_cli(["--suite", "tiny", "--solvers", "dp-greedy,equi", "--no-plots", "--quiet",
                        "--out", str(tmp_path / "o")])
    assert code == 1
    assert "no instance was proven by an exact solver" in err



def test_compare_runs_the_one_result_check() -> None:
    """A solver that breaks an invariant only piper.check_result knows (here: d > 1 under
    --no-dp) fails its 'options' check in compare."""
    from experiments.compare.solve import solve_in_process
    from experiments.lib.instances import random_problem
    from piper import Options as _Options
    from piper.solvers.registry import SolverInfo, register, unregister

    info = register(SolverInfo("ignores-no-dp", "tests.compare_fakes:ignores_no_dp", True, "test double"))
    try:
        for seed in range(60):
            problem = random_problem(seed, n=4, degrees=(1,))
            run = solve_in_process(problem, info, _Options(data_parallel=False))
            if run.plan and any(s["dataParallelDegree"] > 1 for s in run.plan["stages"]):
                break
        else:  # pragma: no cover
            raise AssertionError("no instance whose optimum uses d > 1")
        rep = check_instance(_report(run))
        assert ("ignores-no-dp", "options") in {(f.solver, f.check) for f in rep.failures}
        assert any("without data parallelism" in f.message for f in rep.failures)
    finally:
        unregister("ignores-no-dp")


def test_moe_suite_uses_the_expert_keys_and_its_first_four_are_in_the_default(tmp_path: Path,
                                                                             compare_cli: RunCompare) -> None:
    """The moe suite (docs/problem.md §11): every instance is an MoE workload, four of them are in
    the default suite, and on the first two compare's cross-check passes with the DP, CP-SAT and
    brute force (each proves its optimum; they agree)."""
    moe = build_suite("moe")
    assert all("expertParallel" in inst.problem.active_features() for inst in moe)
    assert [i.name for i in build_suite("default") if i.suite == "moe"] == [i.name for i in moe[:4]]
    out = tmp_path / "out"
    files = []
    for inst in moe[:2]:
        path = tmp_path / f"{inst.name}.json"
        dump_problem(inst.problem, path)
        files.append(str(path))
    code, _, err = compare_cli([*files, "--solvers", "dp,cpsat,brute", "--objective", "batch-time", "--out", str(out)])
    assert code == 0, err
    _, rows = read_report(out)
    assert len(rows) == 6 and all(r["status"] == "optimal" for r in rows)
