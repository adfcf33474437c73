"""The common result every solver returns, built through :func:`make_result` so
that the reported TPS is always the evaluator's score of the returned plan."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from piper.core.errors import SolverError
from piper.core.evaluate import Score, evaluate
from piper.core.json_values import jsonable
from piper.core.plan import Plan
from piper.core.problem import Problem

__all__ = ["Status", "Result", "SolverError", "make_result"]


class Status(str, Enum):
    #: the plan is proven optimal (for heuristics: never used)
    OPTIMAL = "optimal"
    #: a plan, not proven optimal (time limit hit, or a heuristic)
    FEASIBLE = "feasible"
    #: proven: no plan fits in memory / on the devices
    INFEASIBLE = "infeasible"
    #: stopped (time limit) with neither a plan nor a proof
    UNKNOWN = "unknown"

    def __str__(self) -> str:  # so f-strings print "optimal"
        return self.value


@dataclass(frozen=True)
class Result:
    solver: str
    status: Status
    #: the returned plan (None when infeasible / unknown)
    plan: Plan | None
    #: the evaluator's TPS of ``plan`` (+inf without a plan or when OOM)
    tps: float
    #: the solver's own claim of the objective (may differ from the evaluator's :attr:`value`
    #: by rounding; a large difference is a bug that ``experiments.compare`` reports)
    objective: float | None
    #: best proven lower bound on the optimal objective (inf = proven infeasible, 0 = nothing proven)
    bound: float
    #: wall-clock seconds spent in the solver
    time_s: float
    #: the evaluator's full breakdown of ``plan``
    score: Score | None = None
    #: solver-specific statistics (model size, ideals, curve, ...)
    stats: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    #: the certificate's tolerance, in the workload's time units: an "optimal" result's
    #: ``tps`` is at most ``bound + tolerance``, and ``objective`` (the solver's own number)
    #: is within it of ``tps``. 0 for solvers that compute exactly (the DP, brute force);
    #: for the MILP and CP-SAT it follows from their tolerances and scaling
    #: (docs/formulations.md §7).
    tolerance: float = 0.0
    #: what ``objective``, ``bound`` and ``tolerance`` measure (``Options.objective``): "tps" or
    #: "batch-time" (docs/problem.md §9)
    objective_kind: str = "tps"
    #: the evaluator's batch time of ``plan`` (+inf without a plan or when OOM)
    batch_time: float = math.inf

    @property
    def value(self) -> float:
        """The evaluator's score of the plan under :attr:`objective_kind`: :attr:`tps` or
        :attr:`batch_time` (+inf without a plan)."""
        return self.tps if self.objective_kind == "tps" else self.batch_time

    @property
    def devices_used(self) -> int | None:
        return None if self.plan is None else self.plan.devices_used

    def to_dict(self) -> dict[str, Any]:
        """The one JSON form of a result (``solve --json``, compare's report, benchmarks).

        Encoding: every number that is +infinity is written as ``null`` (JSON has no
        infinity): ``tps`` and ``batch_time`` are null without a plan or for an OOM plan,
        ``objective``, ``bound`` and ``tolerance`` are in the units of ``objective_kind``
        ("tps" or "batch-time"), ``bound`` is null
        when infeasibility is proven; ``objective`` is null when the solver claims none.
        Statistics keep only JSON values (numbers, strings, booleans, lists, dicts, null);
        others are written with ``str``. :meth:`from_dict` reads it back.
        """
        return {
            "solver": self.solver,
            "status": self.status.value,
            "tps": _finite(self.tps),
            "batch_time": _finite(self.batch_time),
            "objective_kind": self.objective_kind,
            "objective": _finite(self.objective),
            "bound": _finite(self.bound),
            "tolerance": self.tolerance,
            "time_s": self.time_s,
            "devices_used": self.devices_used,
            "plan": None if self.plan is None else self.plan.to_dict(),
            "message": self.message,
            "stats": jsonable(dict(self.stats)),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], problem: Problem | None = None) -> "Result":
        """A Result from :meth:`to_dict`'s form (null numbers read as +infinity; a null
        ``objective`` as None). With ``problem`` the plan is re-scored by the evaluator
        (``score``, and ``tps`` from it); without, ``tps`` is taken as written."""
        from piper.core.plan import plan_from_dict

        def num(key: str) -> float:
            value = raw.get(key)
            return math.inf if value is None else float(value)

        plan = None if raw.get("plan") is None else plan_from_dict(raw["plan"])
        score = evaluate(problem, plan) if (problem is not None and plan is not None) else None
        return cls(
            solver=str(raw["solver"]),
            status=Status(raw["status"]),
            plan=plan,
            tps=score.tps if score is not None else num("tps"),
            batch_time=score.batch_time if score is not None else num("batch_time"),
            objective_kind=str(raw.get("objective_kind", "tps")),
            objective=None if raw.get("objective") is None else float(raw["objective"]),
            bound=num("bound"),
            time_s=float(raw.get("time_s", 0.0)),
            score=score,
            stats=dict(raw.get("stats") or {}),
            message=str(raw.get("message", "")),
            tolerance=float(raw.get("tolerance", 0.0) or 0.0),
        )


def _finite(x: float | None) -> float | None:
    """None for None and for a non-finite number (the JSON encoding of +infinity)."""
    return None if x is None or not math.isfinite(x) else float(x)


def make_result(
    problem: Problem,
    solver: str,
    status: Status,
    plan: Plan | None,
    *,
    time_s: float,
    objective: float | None = None,
    bound: float | None = None,
    stats: Mapping[str, Any] | None = None,
    message: str = "",
    tolerance: float = 0.0,
    objective_kind: str = "tps",
) -> Result:
    """Score ``plan`` with the evaluator and package a :class:`Result`.

    ``objective_kind`` ("tps" or "batch-time") says what ``objective``, ``bound`` and
    ``tolerance`` measure. ``bound`` defaults to the plan's value under it when ``status`` is
    optimal, +inf when infeasible, and 0 otherwise.

    No "optimal" stands without a certificate: an optimal status with no plan or a plan of
    infinite value is a :class:`SolverError` (the solver broke down: nothing can be reported
    as proven), and one with a non-finite or negative tolerance or a NaN bound is reported as
    "feasible" (the plan is real, the proof is void), with the reason in ``message``.
    """
    score = evaluate(problem, plan) if plan is not None else None
    tps = score.tps if score is not None else math.inf
    batch_time = score.batch_time if score is not None else math.inf
    value = score.value(objective_kind) if score is not None else math.inf
    if status == Status.OPTIMAL:
        # a certificate needs a plan of finite value and a finite tolerance (docs/checks.md)
        if not math.isfinite(value):
            what = "no plan" if plan is None else f"a plan whose {objective_kind} is {value!r}"
            raise SolverError(f"solver {solver} claims an optimum with {what}: no certificate can stand on that "
                              "(a numerical breakdown of the solver; report it with the workload)")
        if not (math.isfinite(tolerance) and tolerance >= 0) or (bound is not None and math.isnan(bound)):
            status = Status.FEASIBLE
            note = (f"not certified optimal: the solver's tolerance {tolerance!r} and bound {bound!r} prove "
                    "nothing, so the plan is reported as feasible")
            message = f"{message}; {note}" if message else note
            bound = 0.0 if bound is None or not math.isfinite(bound) else bound
            tolerance = 0.0 if not (math.isfinite(tolerance) and tolerance >= 0) else tolerance
    if bound is None:
        bound = {Status.OPTIMAL: value, Status.INFEASIBLE: math.inf}.get(status, 0.0)
    return Result(
        solver=solver,
        status=status,
        plan=plan,
        tps=tps,
        objective=objective,
        bound=bound,
        time_s=time_s,
        score=score,
        stats=dict(stats or {}),
        message=message,
        tolerance=tolerance,
        objective_kind=objective_kind,
        batch_time=batch_time,
    )
