"""The checks of ``experiments.compare`` across solvers, on the rows of one instance.

The per-run invariants (a plan's TPS is the evaluator's, a claim within its tolerance of
its plan, a plan when the status says so, the options honoured, ...) are
:func:`piper.check_result`'s, run where the Result was made (:func:`.solve.run_from_result`)
and reported under its check names (``piper.core.checks.CHECKS``); here: ``exception`` (a
solver raised), and the checks that need every solver's answer: ``optimality`` (no plan
beats a proven optimum; an exact "infeasible" only if nobody found a plan) and ``bound``
(no lower bound above the best evaluated plan: piper's ``bound`` check against every
solver's plan). Two numbers a, b
agree when |a - b| <= max(rtol * max(|a|, |b|), atol), atol being the solver's own
certificate tolerance (``Result.tolerance``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from experiments.compare.solve import ERROR, NOT_RUN, RTOL, SolverRun
from piper.core.result import Status

__all__ = ["close", "exceeds", "Failure", "InstanceReport", "check_instance"]


def close(a: float, b: float, rtol: float, atol: float = 0.0) -> bool:
    """a and b agree within ``rtol`` relative or ``atol`` absolute (a certificate's own
    tolerance, ``Result.tolerance``); infinities agree only with themselves."""
    if a == b:
        return True
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(rtol * max(abs(a), abs(b)), atol)


def exceeds(value: float, ref: float, rtol: float, atol: float = 0.0) -> bool:
    """value > ref beyond the tolerance."""
    return value > ref and not close(value, ref, rtol, atol)


@dataclass
class Failure:
    solver: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.solver}: {self.check}: {self.message}"


@dataclass
class InstanceReport:
    name: str
    suite: str
    note: str
    layers: int
    edges: int
    devices: int
    microbatches: int
    memory: float
    runs: list[SolverRun]
    #: proven optimum (inf = proven infeasible; None = nothing proven)
    optimum: float | None = None
    #: the best evaluated plan's value under the instance's objective (its TPS or its batch
    #: time; inf = no plan) and who found it
    best: float = math.inf
    best_by: str = ""
    #: "agree" (>= 2 exact proofs, all agree), "single" (one proof), "unproven", "FAIL"
    verdict: str = "unproven"
    failures: list[Failure] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def _check_run(run: SolverRun) -> list[Failure]:
    """The per-run invariants: a solver that raised, and what piper.check_result found
    (under its check names: ``tps``, ``objective``, ``plan``, ``status``, ...) where the run
    was solved."""
    out = []
    if run.status == ERROR:
        out.append(Failure(run.solver, "exception", run.message))
    out += [Failure(run.solver, check, message) for check, message in run.result_issues]
    return out


def _check_proofs(runs: Sequence[SolverRun], best: float, best_by: str, rtol: float) -> list[Failure]:
    out = []
    for run in runs:
        if not run.exact:
            continue
        if run.status == Status.OPTIMAL.value and run.has_plan and exceeds(run.value, best, rtol, run.tolerance):
            out.append(Failure(run.solver, "optimality", f"claims optimal {run.value:.9g} (tolerance {run.tolerance:.3g}) "
                                                         f"but {best_by} found {best:.9g}"))
        if run.status == Status.INFEASIBLE.value and math.isfinite(best):
            what = "TPS" if run.objective_kind == "tps" else run.objective_kind
            out.append(Failure(run.solver, "optimality", f"claims infeasible but {best_by} found a plan with {what} {best:.9g}"))
        if run.bound is not None and math.isfinite(best) and exceeds(run.bound, best, rtol):
            out.append(Failure(run.solver, "bound", f"lower bound {run.bound:.9g} exceeds the plan of {best_by} ({best:.9g})"))
    return out


def _fill_gaps(runs: Sequence[SolverRun], ref: float, proven: bool) -> None:
    for run in runs:
        if run.status in NOT_RUN or not math.isfinite(ref):
            continue
        run.gap_vs_proof = proven
        if not math.isfinite(run.value):
            run.gap = math.inf
        elif ref > 0:
            run.gap = run.value / ref - 1.0
        else:
            run.gap = 0.0 if run.value == 0 else math.inf


def check_instance(report: InstanceReport, rtol: float = RTOL) -> InstanceReport:
    """Run every check on ``report.runs``; fill optimum, best, verdict, gaps, failures."""
    runs = report.runs
    failures: list[Failure] = []
    for run in runs:
        failures += _check_run(run)
    plans = [r for r in runs if r.has_plan and math.isfinite(r.value)]
    if plans:
        top = min(plans, key=lambda r: r.value)
        report.best, report.best_by = top.value, top.solver
    failures += _check_proofs(runs, report.best, report.best_by, rtol)
    proofs = [r for r in runs if r.proof]
    if proofs:
        values = [r.value if r.status == Status.OPTIMAL.value else math.inf for r in proofs]
        report.optimum = min(min(values), report.best)
    _fill_gaps(runs, report.optimum if report.optimum is not None else report.best, report.optimum is not None)
    for f in failures:
        runs_by_name = [r for r in runs if r.solver == f.solver]
        for r in runs_by_name:
            r.failures.append(f"{f.check}: {f.message}")
    report.failures = failures
    if failures:
        report.verdict = "FAIL"
    else:
        report.verdict = {0: "unproven", 1: "single"}.get(len(proofs), "agree")
    return report
