"""experiments.compare and experiments.lib.suites, with fake solvers registered here only
(so these tests depend on no other solver module)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.compare.cli import cli
from experiments.compare.cross_checks import InstanceReport, check_instance
from experiments.compare.runner import run_compare
from experiments.compare.solve import SolverRun, run_from_result
from experiments.lib.suites import Instance, build_suite, slice_problem, suite_names
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.plan import Plan, Stage
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result
from piper.io.workload import dump_problem, load_problem, problem_from_dict
from piper.solvers.registry import SolverInfo, get_solver, register, unregister

# ---------------------------------------------------------------------------------
# a hand-made instance: k = 1, so the only plans are one stage with d = t = 1;
# vanilla (p = 2 per layer) is optimal (TPS 4), activation recomp (p = 3) is not (TPS 6)
# ---------------------------------------------------------------------------------


def two_layer_problem(name: str = "two-layers") -> Problem:
    def tmpcs(v: int) -> list[dict]:
        fw = {"0": 0.0} if v == 1 else {}
        bw = {"1": 0.0} if v == 0 else {}
        return [
            {"id": "vanilla", "timePerSample": 2.0, "parameterSize": 1.0, "memoryUsageA": 1.0, "memoryUsageB": 0.0,
             "syncTimeFw": fw, "syncTimeBw": bw},
            {"id": "activation recomp", "timePerSample": 3.0, "parameterSize": 1.0, "memoryUsageA": 0.0,
             "memoryUsageB": 0.5, "syncTimeFw": fw, "syncTimeBw": bw},
        ]  # fmt: skip

    return problem_from_dict(
        {
            "name": name,
            "maxDevices": 1,
            "maxMemoryPerDevice": 100.0,
            "mbsInBatch": 1,
            "bandwidth": 1.0,
            "nodes": [{"id": v, "TMPCs": {"1": tmpcs(v)}} for v in (0, 1)],
            "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 5.0}],
        }
    )


def one_stage(problem: Problem, tmpc: str) -> Plan:
    ids = tuple(nd.id for nd in problem.nodes)
    return Plan((Stage(ids, 1, 1, {v: tmpc for v in ids}),))


def _result(problem: Problem, name: str, status: Status, tmpc: str | None, **kw: object) -> Result:
    plan = None if tmpc is None else one_stage(problem, tmpc)
    time_s = float(kw.pop("time_s", 0.0))  # type: ignore[arg-type]
    res = make_result(problem, name, status, plan, time_s=time_s, **kw)  # type: ignore[arg-type]
    if plan is not None and "objective" not in kw:
        res = make_result(problem, name, status, plan, time_s=time_s, objective=res.tps, **kw)  # type: ignore[arg-type]
    return res


def solve_good(problem: Problem, options: Options) -> Result:
    return _result(problem, "fake-good", Status.OPTIMAL, "vanilla")


def solve_suboptimal(problem: Problem, options: Options) -> Result:
    """Wrong: a worse plan, claimed optimal."""
    return _result(problem, "fake-suboptimal", Status.OPTIMAL, "activation recomp")


def solve_liar(problem: Problem, options: Options) -> Result:
    """Wrong: the optimal plan, but a claimed objective 1% off."""
    good = solve_good(problem, options)
    return _result(problem, "fake-liar", Status.OPTIMAL, "vanilla", objective=good.tps * 1.01)


def solve_slow(problem: Problem, options: Options) -> Result:
    """Stops at its time limit with an incumbent and a weak bound (legitimately)."""
    spent = options.time_limit_s or 0.0
    return _result(problem, "fake-slow", Status.FEASIBLE, "activation recomp", bound=1.0, time_s=spent,
                   message="time limit reached")  # fmt: skip


def solve_give_up(problem: Problem, options: Options) -> Result:
    """An exact solver that returns no proof long before its limit."""
    return _result(problem, "fake-give-up", Status.UNKNOWN, None, message="gave up")


def solve_bad_bound(problem: Problem, options: Options) -> Result:
    """Wrong: a lower bound above the optimum."""
    return _result(problem, "fake-bad-bound", Status.FEASIBLE, "activation recomp", bound=5.0)


def solve_crash(problem: Problem, options: Options) -> Result:
    raise ZeroDivisionError("boom")


def solve_too_large(problem: Problem, options: Options) -> Result:
    raise SolverError("this fake refuses every graph")


def solve_hang(problem: Problem, options: Options) -> Result:
    """Ignores its time limit."""
    import time

    time.sleep(120)
    raise AssertionError("not reached: the watchdog kills this solve")


def solve_die(problem: Problem, options: Options) -> Result:
    """Native code crashing: the process vanishes."""
    import os

    os._exit(3)


_CALLS_IN_THIS_PROCESS: list[int] = []


def solve_jit(problem: Problem, options: Options) -> Result:
    """Like a numba solver: its first call in a process is slow (reports time 5)."""
    first = not _CALLS_IN_THIS_PROCESS
    _CALLS_IN_THIS_PROCESS.append(1)
    return _result(problem, "fake-jit", Status.OPTIMAL, "vanilla", time_s=5.0 if first else 0.0)


def solve_echo(problem: Problem, options: Options) -> Result:
    """Says which options it got."""
    msg = f"time_limit_s={options.time_limit_s} exclude={sorted(options.exclude_tmpcs)} dp={options.data_parallel}"
    return _result(problem, "fake-echo", Status.OPTIMAL, "vanilla", message=msg)


def solve_bypass(problem: Problem, options: Options) -> Result:
    """Wrong: builds its Result by hand with a TPS that is not its plan's."""
    plan = one_stage(problem, "activation recomp")
    return Result("fake-bypass", Status.OPTIMAL, plan, tps=4.0, objective=4.0, bound=4.0, time_s=0.0)


def solve_invalid(problem: Problem, options: Options) -> Result:
    """Wrong: a plan that leaves out a layer (rule 1)."""
    plan = Plan((Stage((problem.nodes[0].id,), 1, 1, {problem.nodes[0].id: "vanilla"}),))
    return Result("fake-invalid", Status.OPTIMAL, plan, tps=4.0, objective=4.0, bound=4.0, time_s=0.0)


def solve_ctrl_c(problem: Problem, options: Options) -> Result:
    """Solves the first instance; Ctrl-C arrives during the second."""
    if problem.extra.get("name") == "second":
        raise KeyboardInterrupt
    return solve_good(problem, options)


def solve_heuristic(problem: Problem, options: Options) -> Result:
    return _result(problem, "fake-heuristic", Status.FEASIBLE, "activation recomp")


FAKES = {
    "fake-good": ("solve_good", True),
    "fake-suboptimal": ("solve_suboptimal", True),
    "fake-liar": ("solve_liar", True),
    "fake-slow": ("solve_slow", True),
    "fake-give-up": ("solve_give_up", True),
    "fake-bad-bound": ("solve_bad_bound", True),
    "fake-crash": ("solve_crash", True),
    "fake-too-large": ("solve_too_large", True),
    "fake-heuristic": ("solve_heuristic", False),
    "fake-hang": ("solve_hang", True),
    "fake-die": ("solve_die", True),
    "fake-jit": ("solve_jit", True),
    "fake-echo": ("solve_echo", True),
    "fake-bypass": ("solve_bypass", True),
    "fake-invalid": ("solve_invalid", True),
    "fake-ctrl-c": ("solve_ctrl_c", True),
}


@pytest.fixture()
def fakes() -> Iterator[None]:
    for name, (func, exact) in FAKES.items():
        register(SolverInfo(name, f"tests.experiments.test_compare:{func}", exact, f"test fake {func}"))
    register(SolverInfo("fake-missing", "tests.no_such_module:solve", True, "module does not import"))
    register(SolverInfo("fake-tiny-only", "tests.experiments.test_compare:solve_good", True, "max 1 layer", max_nodes=1))
    try:
        yield
    finally:
        for name in [*FAKES, "fake-missing", "fake-tiny-only"]:
            unregister(name)


@pytest.fixture()
def workload(tmp_path: Path) -> Path:
    path = tmp_path / "two.json"
    dump_problem(two_layer_problem(), path)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli([*args, "--no-plots"])
    out, err = capsys.readouterr()
    return code, out, err


def read_report(out: Path) -> tuple[dict, list[dict]]:
    doc = json.loads((out / "report.json").read_text())
    with (out / "report.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return doc, rows


# ---------------------------------------------------------------------------------
# end to end through the command line
# ---------------------------------------------------------------------------------


def test_agreeing_solvers_exit_0_and_reports_have_one_row_per_instance_and_solver(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    solvers = "fake-good,fake-heuristic,fake-too-large,fake-missing,fake-tiny-only"
    code, stdout, _ = run([str(workload), str(workload), "--solvers", solvers, "--out", str(out)], capsys)
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
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, stdout, err = run([str(workload), "--solvers", "fake-good,fake-suboptimal", "--out", str(out)], capsys)
    assert code == 1
    assert "FAIL fake-suboptimal: optimality" in stdout
    _, rows = read_report(out)
    checks = {r["solver"]: r["check"] for r in rows}
    assert checks == {"fake-good": "ok", "fake-suboptimal": "FAIL"}
    dumped = out / "failed" / "two.json"
    assert dumped.exists() and str(dumped) in err
    assert load_problem(dumped) == two_layer_problem()
    # the dumped instance re-runs alone and fails the same way
    code2, stdout2, _ = run([str(dumped), "--solvers", "fake-suboptimal,fake-good", "--out", str(tmp_path / "o2")], capsys)
    assert code2 == 1 and "FAIL fake-suboptimal: optimality" in stdout2


def test_wrong_claimed_objective_exits_1(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, _ = run([str(workload), "--solvers", "fake-liar", "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert "FAIL fake-liar: objective" in stdout


def test_plans_are_rescored_by_the_evaluator(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run([str(workload), "--solvers", "fake-good,fake-bypass,fake-invalid", "--out", str(out)], capsys)
    assert code == 1
    assert "FAIL fake-bypass: tps: Result.tps 4.0 is not the evaluator's 6.0" in stdout
    assert "FAIL fake-bypass: optimality" in stdout  # its plan (6) is worse than fake-good's (4)
    assert "FAIL fake-invalid: exception: invalid plan: PlanError: rule 1" in stdout
    _, rows = read_report(out)
    bypass = next(r for r in rows if r["solver"] == "fake-bypass")
    assert (float(bypass["tps"]), float(bypass["reported_tps"])) == (6.0, 4.0)


def test_time_limited_solver_is_reported_with_its_bound_not_as_disagreeing(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run([str(workload), "--solvers", "fake-good,fake-slow", "--out", str(out), "--time-limit", "1"], capsys)
    assert code == 0, stdout
    _, rows = read_report(out)
    slow = next(r for r in rows if r["solver"] == "fake-slow")
    assert slow["status"] == "feasible" and slow["limit"] == "True" and slow["check"] == "ok"
    assert float(slow["bound"]) == 1.0 and float(slow["gap"]) == pytest.approx(0.5)
    assert "feasible (limit)" in stdout and "bound 1" in stdout
    assert "hit the time limit 1x" in stdout


def test_an_exact_solver_stopping_early_without_proof_is_flagged_not_failed(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run([str(workload), "--solvers", "fake-good,fake-give-up", "--out", str(out)], capsys)
    assert code == 0, stdout
    _, rows = read_report(out)
    row = next(r for r in rows if r["solver"] == "fake-give-up")
    assert (row["status"], row["limit"], row["early"], row["check"]) == ("unknown", "False", "True", "ok")
    assert "unknown (early)" in stdout and "gave up" in stdout and "stopped early without a proof 1x" in stdout


def test_bound_above_the_best_plan_and_exceptions_fail_without_crashing(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    solvers = "fake-good,fake-bad-bound,fake-crash"
    code, stdout, _ = run([str(workload), "--solvers", solvers, "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert "FAIL fake-bad-bound: bound" in stdout
    assert "FAIL fake-crash: exception: ZeroDivisionError: boom" in stdout


def test_a_solve_that_ignores_its_time_limit_is_killed_and_a_dying_one_fails(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = [str(workload), "--time-limit", "0.1", "--hard-timeout", "1", "--out", str(out)]
    code, stdout, _ = run([*args, "--solvers", "fake-good,fake-hang"], capsys)
    assert code == 0, stdout
    _, rows = read_report(out)
    hang = next(r for r in rows if r["solver"] == "fake-hang")
    assert hang["status"] == "killed" and hang["limit"] == "True" and hang["check"] == "ok"
    assert "not honoured" in hang["message"]
    code, stdout, _ = run([*args, "--solvers", "fake-good,fake-die"], capsys)
    assert code == 1 and "FAIL fake-die: exception: the solver process died" in stdout and "exit code 3" in stdout


def test_one_time_costs_stay_out_of_the_measured_times(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, _, _ = run([str(workload), str(workload), "--solvers", "fake-jit", "--out", str(out)], capsys)
    assert code == 0
    _, rows = read_report(out)
    assert [float(r["solver_time_s"]) for r in rows] == [0.0, 0.0]  # the warm-up took the slow first call


def test_execution_backends_give_the_same_rows(
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Serial, threads driving 2 solver processes, and a process pool of in-process solves."""
    args = [str(workload)] * 3 + ["--solvers", "fake-good,fake-heuristic,fake-liar"]
    code1, _, _ = run([*args, "--out", str(tmp_path / "a")], capsys)
    code2, _, _ = run([*args, "--out", str(tmp_path / "b"), "--jobs", "2"], capsys)
    code3, _, _ = run([*args, "--out", str(tmp_path / "c"), "--jobs", "2", "--hard-timeout", "0"], capsys)
    assert code1 == code2 == code3 == 1
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]  # noqa: E731
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
def test_usage_errors_exit_2_with_one_line(args: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err = run([*args, "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert stdout == ""
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_cluster_overrides_and_slice_apply_to_files(
    fakes: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two.json"
    dump_problem(two_layer_problem(), path)
    out = tmp_path / "o"
    code, _, _ = run([str(path), "--slice", "1", "-k", "3", "-M", "1KiB", "--solvers", "fake-good", "--out", str(out)], capsys)
    assert code == 0
    doc, _ = read_report(out)
    inst = doc["instances"][0]
    assert (inst["name"], inst["layers"], inst["k"], inst["memory"]) == ("two[:1]", 1, 3, 1024.0)


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["--list"], capsys)
    assert code == 0
    assert "paper-slices" in stdout and "dp-greedy" in stdout


# ---------------------------------------------------------------------------------
# the checks on synthetic runs
# ---------------------------------------------------------------------------------


def _report(*runs: SolverRun) -> InstanceReport:
    return InstanceReport("x", "t", "", 2, 1, 1, 1, 1.0, list(runs))


def _run(solver: str, status: str, tps: float = math.inf, exact: bool = True, **kw: object) -> SolverRun:
    plan = {"stages": []} if math.isfinite(tps) else None
    return SolverRun(solver, exact, status, tps=tps, objective=kw.pop("objective", tps if plan else None), plan=plan, **kw)  # type: ignore[arg-type]


def _from_result(solver: str, status: Status, tmpc: str | None, **kw: object) -> SolverRun:
    """The row compare makes of a Result (scored and checked by piper.check_result)."""
    problem = two_layer_problem()
    return run_from_result(problem, solver, True, _result(problem, solver, status, tmpc, **kw))


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


def test_run_compare_reports_after_every_instance(fakes: None) -> None:
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
    fakes: None, workload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = [str(workload), "--solvers", "fake-echo,fake-liar", "--time-limit", "3", "--no-ar", "--no-dp", "--out", str(out)]
    code, _, err = run(args, capsys)
    assert code == 1
    _, rows = read_report(out)
    echo = next(r for r in rows if r["solver"] == "fake-echo")
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


def test_an_interrupted_run_keeps_the_finished_instances(
    fakes: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    dump_problem(two_layer_problem("first"), first)
    dump_problem(two_layer_problem("second"), second)
    out = tmp_path / "out"
    args = [str(first), str(second), "--solvers", "fake-ctrl-c", "--hard-timeout", "0", "--out", str(out)]
    code, _, err = run(args, capsys)
    assert code == 130 and "interrupted: 1/2 instances kept" in err
    doc, rows = read_report(out)
    assert doc["meta"]["interrupted"] is True and doc["meta"]["complete"] is False
    assert [(r["instance"], r["status"]) for r in rows] == [("first", "optimal")]


def test_nothing_proven_is_exit_1_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Heuristics alone check nothing: compare must not report success (issue 19)."""
    code, _, err = run(["--suite", "tiny", "--solvers", "dp-greedy,equi", "--no-plots", "--quiet",
                        "--out", str(tmp_path / "o")], capsys)
    assert code == 1
    assert "no instance was proven by an exact solver" in err


def ignores_no_dp(problem, options):
    """A solver that ignores the 'no data parallelism' ablation (for the test below)."""
    from dataclasses import replace as _replace

    from piper import solve as _solve

    return _solve(problem, _replace(options, data_parallel=True), solver="brute")


def test_compare_runs_the_one_result_check() -> None:
    """A solver that breaks an invariant only piper.check_result knows (here: d > 1 under
    --no-dp) fails its 'options' check in compare."""
    from experiments.compare.solve import solve_in_process
    from experiments.lib.instances import random_problem
    from piper import Options as _Options
    from piper.solvers.registry import SolverInfo, register, unregister

    info = register(SolverInfo("ignores-no-dp", "tests.experiments.test_compare:ignores_no_dp", True, "test double"))
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
