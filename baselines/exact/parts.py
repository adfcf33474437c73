"""The parts of the plan space that the exact models solve separately, and one answer from
the parts' answers (see the ``baselines.exact.model_data`` docstring, "Version 2").

With G >= k there is one part, "inside"; with G < k also "spanning" (plans with
Σ t_i d_i >= G + 1, whose cut edges run at B instead of B_in).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result

__all__ = ["PARTS", "node_parts", "combine_results"]

#: the parts of the plan space that the exact models solve separately (module docstring)
PARTS = ("inside", "spanning")


def node_parts(problem: Problem) -> tuple[str, ...]:
    """The parts of the plan space to solve: ("inside",) when G >= k (every plan fits in a
    node, so B_edge = B_in for all), else ("inside", "spanning")."""
    return ("inside",) if problem.node_size >= problem.devices else PARTS


def combine_results(problem: Problem, solver: str, results: Mapping[str, Result], *, time_s: float) -> Result:
    """One answer from the answers of the parts of the plan space (:func:`node_parts`),
    each already guarded (:func:`guarded_result`).

    The plan is the part plan with the least evaluated value under the objective asked
    for (``Result.value``: TPS or batch time; the first part on ties). It
    is "optimal" only when every part is proven ("optimal" or "infeasible"); "infeasible"
    when every part is; else "feasible" with a plan, "unknown" without. The bound is the
    least of the parts' bounds (an infeasible part's is +inf), the tolerance the largest.
    Each part's stats, status, TPS and bound are kept in ``stats["parts"]``.
    """
    best_part, best = None, None
    for name, res in results.items():
        if res.plan is not None and math.isfinite(res.value) and (best is None or res.value < best.value):
            best_part, best = name, res
    statuses = [res.status for res in results.values()]
    proven = all(st in (Status.OPTIMAL, Status.INFEASIBLE) for st in statuses)
    if all(st == Status.INFEASIBLE for st in statuses):
        status = Status.INFEASIBLE
    elif best is not None:
        status = Status.OPTIMAL if proven else Status.FEASIBLE
    else:
        status = Status.UNKNOWN
    bound = min((res.bound for res in results.values()), default=0.0)
    if status != Status.INFEASIBLE and not math.isfinite(bound):
        bound = 0.0
    if best is not None:
        bound = min(bound, best.value)
    tolerance = max((res.tolerance for res in results.values()), default=0.0)
    parts = {
        name: {"status": res.status.value, "tps": res.tps, "batch_time": res.batch_time, "bound": res.bound,
               "tolerance": res.tolerance,
               "time_s": res.time_s, "message": res.message, "stats": res.stats}
        for name, res in results.items()
    }
    stats: dict = {"parts": parts, "chosen_part": best_part, "tolerance": tolerance}
    kind = next(iter(results.values())).objective_kind if results else "tps"
    if best is not None:
        for key in ("variables", "constraints", "tau"):
            if key in best.stats:
                stats[key] = best.stats[key]
    messages = [f"{name}: {res.message}" for name, res in results.items() if res.message]
    return make_result(
        problem, solver, status, None if best is None else best.plan, time_s=time_s,
        objective=None if best is None else best.objective, bound=bound, stats=stats,
        message="; ".join(messages), tolerance=tolerance, objective_kind=kind,
    )
