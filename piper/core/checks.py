"""The one check of a :class:`~piper.core.result.Result`: what every solver's answer must satisfy,
independently of the solver that made it (used by the conformance tests, the exact-model
tests and ``experiments.compare``).

:func:`check_result` returns the broken invariants, each named by its check, so that a
failure names the solver, the check and what was wrong:

* ``status``: the status is a :class:`Status`; "optimal" comes only from exact solvers, with a
  finite tolerance >= 0 (:func:`~piper.core.result.make_result` refuses an optimal result
  without a plan of finite value and downgrades one with a void tolerance; this catches
  results built otherwise; an out-of-memory plan is reported under ``plan``)
  (a heuristic's "infeasible" is allowed when it is a proof, e.g. a layer that fits
  nowhere, or the DP's exact memory test with the greedy knapsack; it is checked against
  the optimum below and, in ``experiments.compare``, against every other solver's plan);
* ``plan``: a plan exactly when the status says so (optimal / feasible have one,
  infeasible / unknown have none, and then TPS is +inf); the plan is structurally valid
  (docs/problem.md rules 1-4) and fits in memory;
* ``tps``: ``Result.tps`` is the evaluator's score of the plan (and ``Result.batch_time`` its
  batch time, when that is the objective);
* ``options``: the plan honours the options (no d > 1 without data parallelism, no t > 1
  without tensor parallelism, no excluded TMPC, one (d, t) when uniform, a schedule and a
  number of virtual stages the options allow) and the result measures the objective asked
  for (``Result.objective_kind`` is ``Options.objective``);
* ``objective``: the solver's own number is never below the TPS by more than its stated
  tolerance, and for an "optimal" result within the tolerance of it (a search stopped early
  may hold an incumbent whose objective variable T is above its stages' times: an honest,
  loose number, not a claim that the plan is better than it is);
* ``bound``: the bound is at most the plan's TPS (plus the tolerance), +inf exactly for
  "infeasible"; an "optimal" plan is within the tolerance of its bound;
* ``optimum`` (only with a known ``optimum``, e.g. from brute force): no plan beats it, an
  optimal claim is within the tolerance of it, a bound never exceeds it, and "infeasible"
  only when it is +inf.

The objective, the bound and the optimum are in the units of ``Options.objective``: the plan's
TPS, or its batch time (docs/problem.md §9); "the plan's value" below is that number.
Numbers are compared with the result's own ``tolerance`` plus ``rtol`` (default 1e-9)
relative for floating-point noise. ``only="bound"`` (a name of :data:`CHECKS`) reports one
check's issues alone (the conformance suite runs each check as its own test); the checks
after ``plan`` need a structurally valid plan and are skipped without one (that is reported
under ``plan``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from piper.core.errors import PlanError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status

__all__ = ["CHECKS", "ResultIssue", "check_result"]

#: the names of the checks, in the order they run (see the module docstring)
CHECKS = ("status", "plan", "tps", "options", "objective", "bound", "optimum")


@dataclass(frozen=True)
class ResultIssue:
    #: the invariant that broke (see the module docstring)
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


def check_result(problem: Problem, options: Options | None, result: Result, *, exact: bool | None = None,
                 optimum: float | None = None, rtol: float = 1e-9, only: str | None = None) -> list[ResultIssue]:
    """The invariants ``result`` breaks (empty when it is sound). ``exact``: whether the
    solver may claim proofs (default: the registry's word for ``result.solver``); ``only``:
    the issues of that one check (a name in :data:`CHECKS`)."""
    if only is not None and only not in CHECKS:
        raise ValueError(f"unknown check {only!r}; known: {', '.join(CHECKS)}")
    issues = _issues(problem, options, result, exact, optimum, rtol)
    return issues if only is None else [i for i in issues if i.check == only]


def _issues(problem: Problem, options: Options | None, result: Result, exact: bool | None,
            optimum: float | None, rtol: float) -> list[ResultIssue]:
    options = options or Options()
    if exact is None:
        from piper.solvers.registry import get_solver

        try:
            exact = get_solver(result.solver).exact
        except KeyError:
            exact = True
    out: list[ResultIssue] = []

    def issue(check: str, message: str) -> None:
        out.append(ResultIssue(check, message))

    def slack(value: float) -> float:
        return result.tolerance + rtol * abs(value)

    if not isinstance(result.status, Status):
        issue("status", f"status {result.status!r} is not a Status")
        return out
    if result.status == Status.OPTIMAL and not exact:
        issue("status", f"heuristic {result.solver} claims a proven optimum")
    if result.status == Status.OPTIMAL and not (math.isfinite(result.tolerance) and result.tolerance >= 0):
        issue("status", f"optimal with tolerance {result.tolerance!r}: a certificate needs a finite tolerance >= 0")
    # options objects of older versions (no version-3 fields) mean TPS and 1F1B
    objective = getattr(options, "objective", "tps")
    allowed_v = options.virtual_stage_choices() if hasattr(options, "virtual_stage_choices") else (1,)
    value = math.inf  # the plan's value under the objective
    what = "TPS" if objective == "tps" else "batch time"
    if result.plan is None:
        if result.status in (Status.OPTIMAL, Status.FEASIBLE):
            issue("plan", f"status {result.status.value} but no plan")
        if not math.isinf(result.tps):
            issue("tps", f"no plan but TPS {result.tps!r}")
    else:
        if result.status in (Status.INFEASIBLE, Status.UNKNOWN):
            issue("plan", f"status {result.status.value} with a plan")
        try:
            score = evaluate(problem, result.plan)
        except PlanError as exc:
            issue("plan", f"structurally invalid: {exc}")
            return out
        value = score.value(objective)
        if score.oom:
            issue("plan", "the plan is out of memory")
        if result.tps != score.tps:
            issue("tps", f"Result.tps {result.tps!r} is not the evaluator's {score.tps!r}")
        if objective != "tps" and result.batch_time != score.batch_time:
            issue("tps", f"Result.batch_time {result.batch_time!r} is not the evaluator's {score.batch_time!r}")
        schedule = result.plan.schedule
        if schedule.virtual_stages not in allowed_v:
            issue("options", f"the plan's schedule {schedule.label()} is not allowed (virtual stages {list(allowed_v)})")
        pairs = {(s.d, s.t) for s in result.plan.stages}
        for i, stage in enumerate(result.plan.stages, 1):
            if not options.data_parallel and stage.d != 1:
                issue("options", f"stage {i} has d={stage.d} without data parallelism")
            if not options.tensor_parallel and stage.t != 1:
                issue("options", f"stage {i} has t={stage.t} without tensor parallelism")
            used = set(stage.tmpcs.values()) & set(options.exclude_tmpcs)
            if used:
                issue("options", f"stage {i} uses excluded TMPC(s) {sorted(used)}")
        if getattr(options, "uniform", False) and len(pairs) > 1:
            issue("options", f"uniform plans asked for, the plan has (d, t) pairs {sorted(pairs)}")
        if result.objective is not None and math.isfinite(value):
            if result.objective < value - slack(value):
                issue("objective", f"claims {result.objective!r}, the plan scores {value!r} (tolerance {result.tolerance:g})")
            elif result.status == Status.OPTIMAL and result.objective > value + slack(value):
                issue("objective", f"optimal, but claims {result.objective!r} where the plan scores {value!r} "
                                   f"(tolerance {result.tolerance:g})")
    if result.objective_kind != objective:
        issue("options", f"objective {objective!r} asked for, the result measures {result.objective_kind!r}")
    bound = result.bound
    if result.status == Status.INFEASIBLE:
        if not math.isinf(bound):
            issue("bound", f"infeasible with a finite bound {bound!r}")
    else:
        if math.isinf(bound) or math.isnan(bound):
            issue("bound", f"bound {bound!r} without an infeasibility proof")
        elif math.isfinite(value) and bound > value + slack(value):
            issue("bound", f"bound {bound!r} above the plan's {what} {value!r}")
        if result.status == Status.OPTIMAL and math.isfinite(value) and value > bound + slack(value):
            issue("bound", f"optimal {value!r} is more than the tolerance {result.tolerance:g} above its bound {bound!r}")
    if optimum is not None:
        if math.isinf(optimum):
            if result.plan is not None and math.isfinite(value):
                issue("optimum", f"a plan of {what} {value!r} on an instance with no plan: oracle bug")
        else:
            if result.status == Status.INFEASIBLE:
                issue("optimum", f"claims infeasible, a plan of {what} {optimum!r} exists")
            if math.isfinite(value) and value < optimum - rtol * optimum:
                issue("optimum", f"plan {value!r} below the optimum {optimum!r}: oracle or evaluator bug")
            if result.status == Status.OPTIMAL and value > optimum + slack(optimum):
                issue("optimum", f"certifies {value!r} optimal, the optimum is {optimum!r} (tolerance {result.tolerance:g})")
            if math.isfinite(bound) and bound > optimum + rtol * optimum:
                issue("optimum", f"bound {bound!r} above the optimum {optimum!r}")
    return out
