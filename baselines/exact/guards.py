"""The guards that every exact model's answer goes through (:func:`guarded_result`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from piper.core.errors import PlanError
from piper.core.evaluate import evaluate
from piper.core.plan import Plan
from piper.core.result import Result, Status, make_result

if TYPE_CHECKING:
    from baselines.exact.model_data import ModelData, WarmStart

__all__ = ["guarded_result"]


def guarded_result(
    data: ModelData,
    solver: str,
    status: Status,
    plan: Plan | None,
    *,
    time_s: float,
    objective: float | None,
    bound: float,
    tolerance: float,
    warm: WarmStart | None,
    stats: dict,
    message: str = "",
) -> Result:
    """Package an exact model's answer, after the checks a solver bug would fail.

    ``objective`` and ``bound`` are in the problem's time units, and measure the models'
    objective (``data.objective``: the TPS, or the batch time; "TPS" below reads "batch
    time" then); ``tolerance`` is the absolute amount by which the model's objective may
    differ from the evaluator's TPS of the same plan (rounding in CP-SAT, feasibility
    tolerances in a MILP).

    Guards (each one records what it did in ``stats["guards"]``):

    1. the plan is re-scored by the evaluator (``make_result``); an OOM or invalid
       plan is never returned as a solution;
    2. if a known plan (the warm start) is better than the solver's by more than the
       tolerance, it is returned instead, and an "optimal" claim is downgraded to
       "feasible": the solver's proof contradicts a plan we hold (the OR-Tools 9.15
       wrong-OPTIMAL bug looks exactly like this);
    3. the reported bound never exceeds the evaluated TPS of the returned plan,
       and a solver objective that disagrees with the evaluator by more than the
       tolerance downgrades "optimal" to "feasible";
    4. "infeasible" while holding a feasible warm start is a contradiction: the
       warm start is returned with status "feasible";
    5. "optimal" stands only when the evaluator's TPS of the plan is at most the proven
       bound plus ``tolerance`` (docs/formulations.md §6); the result carries
       ``tolerance`` as :attr:`piper.core.result.Result.tolerance`.

    A bound weaker than :meth:`ModelData.static_bound` is raised to it (the solver's own
    is kept in ``stats["solver_bound"]``).
    """
    guards: list[str] = list(stats.get("guards", []))
    problem = data.problem
    what = "TPS" if not data.batch else "batch time"
    tps = math.inf  # the plan's value under the objective (its TPS or batch time)
    if plan is not None:
        try:
            score = evaluate(problem, plan)
        except PlanError as exc:  # a model bug: never return an invalid plan
            guards.append(f"solver plan invalid ({exc}); dropped")
            plan, status = None, Status.UNKNOWN if status != Status.INFEASIBLE else status
        else:
            if score.oom:
                guards.append("solver plan is out of memory under the evaluator; dropped")
                plan = None
                status = Status.UNKNOWN
            else:
                tps = data.plan_value(score)
    if warm is not None and warm.value < tps - tolerance:
        if status == Status.OPTIMAL:
            guards.append(
                f"solver claimed optimal {tps!r} but the warm start has {what} {warm.value!r}: solver bug, "
                "returning the warm start as feasible"
            )
            bound = min(bound, warm.value)
        elif status == Status.INFEASIBLE:
            guards.append("solver claimed infeasible but the warm start is a feasible plan: solver bug")
            bound = 0.0
        status = Status.FEASIBLE
        plan, tps = warm.plan, warm.value
    if plan is None and status in (Status.OPTIMAL, Status.FEASIBLE):
        status = Status.UNKNOWN
    if status == Status.OPTIMAL and objective is not None and abs(objective - tps) > tolerance:
        guards.append(f"objective {objective!r} differs from evaluated {what} {tps!r} by more than {tolerance:g}")
        status = Status.FEASIBLE
    if status == Status.INFEASIBLE:
        bound = math.inf
    else:
        if not math.isfinite(bound) or bound < 0:
            bound = 0.0
        static = data.static_bound()
        if static > bound:
            stats = {**stats, "solver_bound": bound}
            bound = static
        if bound > tps:
            if math.isfinite(tps) and bound > tps + tolerance:
                guards.append(f"bound {bound!r} above the evaluated {what} {tps!r} of a plan: clamped")
            bound = tps
        if status == Status.OPTIMAL and tps > bound + tolerance:
            # a proof must hold for the evaluator's score of the plan, within the tolerance
            guards.append(f"solver claimed optimal, but the plan's {what} {tps!r} is more than the tolerance "
                          f"{tolerance:g} above the proven bound {bound!r}")
            status = Status.FEASIBLE
    stats = dict(stats)
    stats["guards"] = guards
    if guards and not message:
        message = "; ".join(guards)
    return make_result(
        problem, solver, status, plan, time_s=time_s, objective=objective, bound=bound, stats=stats, message=message,
        tolerance=tolerance, objective_kind=data.objective,
    )
