"""One CP-SAT search of a part of the plan space (docs/formulations.md §3.4, §4.3): below a
warm start as a proof search (strict cutoff) or with it as a hint, the status read back
through :data:`CP_STATUS`, the plan and the objective and bound in time units, and the
optional second opinion (:func:`baselines.cpsat.verify.verify_optimum`, which needs the
search's solver).
"""

from __future__ import annotations

import math
import time
from typing import Any

from ortools.sat.python import cp_model

from baselines.cpsat.model import CpsatModel
from baselines.cpsat.params import run_search, solver_parameters
from baselines.cpsat.verify import verify_optimum
from baselines.exact.answer import Answer
from baselines.exact.model_data import WarmStart
from piper.core import stopping
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.result import Status

__all__ = ["CP_STATUS", "solve_once"]


def unit_of(model: CpsatModel) -> float:
    """Problem time units per unit of the model's integer T."""
    return model.data.tau / model.unit

#: CP-SAT's status -> the answer's status (any other: unknown)
CP_STATUS = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}


def solve_once(model: CpsatModel, options: Options, warm: WarmStart | None, start: float, deadline: float | None,
               stats: dict[str, Any]) -> Answer:
    """Search ``model`` once (module docstring); ``start``: when the part's solve began
    (``time.perf_counter()``, for ``build_s``), ``stats``: what the part has to report so
    far (the search adds to it). The answer's tolerance is the model's 2ε.

    With ``warm`` and ``params["strict_cutoff"]`` (default True), only strictly better
    plans are sought: INFEASIBLE proves the warm start optimal, UNKNOWN returns it as
    feasible. Otherwise it is a hint and worse plans are cut.
    """
    data = model.data
    what = "batch time" if data.batch else "TPS"
    strict = False
    if warm is not None:
        strict = bool(options.params.get("strict_cutoff", True))
        if strict:
            worst = model.objective_int(warm)
            model.add_cutoff(worst - 1)  # only strictly better plans: a proof search
            stats["warm_start"] = f"strict cutoff below the warm start ({what} {warm.value!r})"
        else:
            worst = model.add_hint(warm)
            model.m.Add(model.obj <= worst)  # the hint stays feasible; worse plans are cut
            stats["warm_start"] = f"hinted ({what} {warm.value!r})"
    build_s = time.perf_counter() - start
    if stopping.expired(deadline):  # the build took the time (or an interrupt came): no search
        signum = stopping.requested()
        stats.update({**model.stats(), "build_s": build_s, "stopped": "time limit reached before the search"
                      if signum is None else f"interrupted ({stopping.signal_name(signum)})"})
        if strict and warm is not None:
            return Answer(Status.FEASIBLE, warm.plan, worst * unit_of(model), 0.0, 2 * model.epsilon, stats)
        return Answer(Status.UNKNOWN, stats=stats)
    remaining = None if deadline is None else max(0.01, deadline - time.perf_counter())
    solver = solver_parameters(options, remaining, proof=strict)
    searched_from = time.perf_counter()
    code = run_search(solver, model.m)
    searched_s = time.perf_counter() - searched_from
    if code == cp_model.MODEL_INVALID:
        raise SolverError(f"CP-SAT rejected the model: {model.m.Validate()}")
    status = CP_STATUS.get(code, Status.UNKNOWN)
    if (code in (cp_model.UNKNOWN, cp_model.FEASIBLE) and deadline is not None and stopping.requested() is None
            and max(solver.WallTime(), searched_s) >= 0.99 * solver.parameters.max_time_in_seconds):
        # CP-SAT gives no reason for stopping: its clock (or ours around the search: on a loaded machine CP-SAT's
        # own WallTime fell short of its limit) at the limit says the time limit ended the search (the message
        # says so, baselines.exact.driver, as for a build cut short)
        stats["stopped"] = "time limit reached during the search"
    unit = data.tau / model.unit
    eps = model.epsilon
    plan = objective = None
    bound = 0.0
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        plan = model.read_plan(solver)
        objective = solver.ObjectiveValue() * unit
        bound = max(0.0, solver.BestObjectiveBound() * unit - eps)
    elif status == Status.INFEASIBLE:
        bound = math.inf
    if strict and warm is not None:
        if status == Status.INFEASIBLE:  # no plan with T_int <= worst - 1: the warm start is optimal
            status, plan, objective, bound = Status.OPTIMAL, warm.plan, worst * unit, max(0.0, worst * unit - eps)
        elif status == Status.UNKNOWN:
            status, plan, objective = Status.FEASIBLE, warm.plan, worst * unit
            bound = max(0.0, min(solver.BestObjectiveBound(), worst) * unit - eps)
    stats.update(
        {
            **model.stats(),
            "build_s": build_s,
            "solve_s": solver.WallTime(),
            "num_workers": solver.parameters.num_workers,
            "requested_subsolvers": list(solver.parameters.subsolvers),
            "presolve_inclusion_work_limit": solver.parameters.presolve_inclusion_work_limit,
            "cp_model_probing_level": solver.parameters.cp_model_probing_level,
            "cp_status": solver.StatusName(code),
        }
    )
    answer = Answer(status, plan, objective, bound, 2 * eps, stats)
    if status == Status.OPTIMAL and options.params.get("verify") and stopping.requested() is None:
        answer = verify_optimum(model, solver, options, deadline, answer)
    return answer
