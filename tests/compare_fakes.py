"""Test doubles for experiments.compare: a two-layer instance with a known optimum, fake
solvers (registered by the ``fake_solvers`` fixture of tests/conftest.py, each by its import
path ``tests.compare_fakes:FUNCTION`` so that solver processes find it too) and a reader of
compare's report files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.plan import Plan, Stage
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result
from piper.io.workload import problem_from_dict

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


def fake_result(problem: Problem, name: str, status: Status, tmpc: str | None, **kw: object) -> Result:
    """A Result of solver ``name`` for the one-stage plan with TMPC ``tmpc`` (None: no plan),
    claiming the evaluator's TPS as its objective unless ``objective`` is given."""
    plan = None if tmpc is None else one_stage(problem, tmpc)
    time_s = float(kw.pop("time_s", 0.0))  # type: ignore[arg-type]
    res = make_result(problem, name, status, plan, time_s=time_s, **kw)  # type: ignore[arg-type]
    if plan is not None and "objective" not in kw:
        res = make_result(problem, name, status, plan, time_s=time_s, objective=res.tps, **kw)  # type: ignore[arg-type]
    return res


def solve_good(problem: Problem, options: Options) -> Result:
    return fake_result(problem, "fake-good", Status.OPTIMAL, "vanilla")


def solve_suboptimal(problem: Problem, options: Options) -> Result:
    """Wrong: a worse plan, claimed optimal."""
    return fake_result(problem, "fake-suboptimal", Status.OPTIMAL, "activation recomp")


def solve_liar(problem: Problem, options: Options) -> Result:
    """Wrong: the optimal plan, but a claimed objective 1% off."""
    good = solve_good(problem, options)
    return fake_result(problem, "fake-liar", Status.OPTIMAL, "vanilla", objective=good.tps * 1.01)


def solve_slow(problem: Problem, options: Options) -> Result:
    """Stops at its time limit with an incumbent and a weak bound (legitimately)."""
    spent = options.time_limit_s or 0.0
    return fake_result(problem, "fake-slow", Status.FEASIBLE, "activation recomp", bound=1.0, time_s=spent,
                   message="time limit reached")  # fmt: skip


def solve_give_up(problem: Problem, options: Options) -> Result:
    """An exact solver that returns no proof long before its limit."""
    return fake_result(problem, "fake-give-up", Status.UNKNOWN, None, message="gave up")


def solve_bad_bound(problem: Problem, options: Options) -> Result:
    """Wrong: a lower bound above the optimum."""
    return fake_result(problem, "fake-bad-bound", Status.FEASIBLE, "activation recomp", bound=5.0)


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
    return fake_result(problem, "fake-jit", Status.OPTIMAL, "vanilla", time_s=5.0 if first else 0.0)


def solve_echo(problem: Problem, options: Options) -> Result:
    """Says which options it got."""
    msg = f"time_limit_s={options.time_limit_s} exclude={sorted(options.exclude_tmpcs)} dp={options.data_parallel}"
    return fake_result(problem, "fake-echo", Status.OPTIMAL, "vanilla", message=msg)


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
    return fake_result(problem, "fake-heuristic", Status.FEASIBLE, "activation recomp")


#: solver name -> (function of this module, exact)
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


def ignores_no_dp(problem: Problem, options: Options) -> Result:
    """A solver that ignores the 'no data parallelism' ablation."""
    from dataclasses import replace

    from piper import solve

    return solve(problem, replace(options, data_parallel=True), solver="brute")


def read_report(out: Path) -> tuple[dict, list[dict]]:
    """compare's report.json document and report.csv rows in the folder ``out``."""
    doc = json.loads((out / "report.json").read_text())
    with (out / "report.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return doc, rows


def report_row(out: Path, solver: str) -> dict:
    """The report.csv row of ``solver`` in the folder ``out`` (a one-instance run)."""
    _, rows = read_report(out)
    return next(r for r in rows if r["solver"] == solver)
