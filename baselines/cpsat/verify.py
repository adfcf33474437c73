"""What a CP-SAT "optimal" claim is worth (docs/formulations.md §6): the optional second
opinion with presolve off (:func:`verify_optimum`) and the guard of an inexact memory
scaling (:func:`restricted_memory`: the model is then a restriction and proves nothing).
"""

from __future__ import annotations

import time
from dataclasses import replace

from ortools.sat.python import cp_model

from baselines.cpsat.model import CpsatModel
from baselines.cpsat.params import solver_parameters
from baselines.exact.answer import Answer
from baselines.exact.model_data import Choice
from piper.core.options import Options
from piper.core.result import Status

__all__ = ["restricted_memory", "verify_optimum"]


def restricted_memory(model: CpsatModel, answer: Answer) -> Answer:
    """When the memory numbers could not be scaled to integers exactly, the model rounds
    a and b up and M down (:func:`memory_scaling`): it is a restriction of the problem, so
    its proofs are no proofs of the problem's optimum or infeasibility. "optimal" becomes
    "feasible" (the plan fits: the evaluator checks it) with no bound from the search, and
    "infeasible" becomes "unknown" (docs/formulations.md §6)."""
    if model.memory_exact or answer.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        return answer
    answer.stats.setdefault("guards", []).append(
        "memory scaled inexactly (rounded conservatively): the model is a restriction, its proof is not one "
        "for the problem")
    return replace(answer, status=Status.FEASIBLE if answer.status == Status.OPTIMAL else Status.UNKNOWN, bound=0.0)


def verify_optimum(model: CpsatModel, solver: cp_model.CpSolver, options: Options, deadline: float | None,
                   claim: Answer) -> Answer:
    """Second opinion on an OPTIMAL ``claim`` of ``solver``'s search of ``model``: is there a
    plan with T <= T_opt - 1 (presolve off; T: the objective variable, the batch time's
    under that objective)? The answer keeps the claim's stats, with the
    second opinion's status in ``stats["verify"]``."""
    stats = claim.stats
    t_opt = int(round(solver.ObjectiveValue()))
    unit = model.data.tau / model.unit
    check = model.m.Clone()
    check.ClearObjective()
    t_var = check.GetIntVarFromProtoIndex(model.obj.Index())
    check.Add(t_var <= t_opt - 1)
    remaining = None if deadline is None else max(0.01, deadline - time.perf_counter())
    s2 = solver_parameters(options, remaining, proof=True)  # a proof search too: below T_opt
    s2.parameters.cp_model_presolve = False
    code = s2.Solve(check)
    stats["verify"] = s2.StatusName(code)
    if code == cp_model.INFEASIBLE:
        return claim
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        stats.setdefault("guards", []).append(
            f"verify: CP-SAT claimed optimum {t_opt} but a plan with T = {s2.Value(t_var)} "
            "exists: solver bug; returning the better plan as feasible"
        )
        assign: dict[int, tuple[int, Choice]] = {}
        for (v, i, c), var in model.x.items():
            if s2.BooleanValue(check.GetBoolVarFromProtoIndex(var.Index())):
                assign[v] = (i, c)
        better = model.data.plan_from_slots(assign)
        return replace(claim, status=Status.FEASIBLE, plan=better, objective=s2.Value(t_var) * unit, bound=0.0)
    stats.setdefault("guards", []).append("verify: the second opinion ran out of time; optimum unconfirmed")
    return replace(claim, status=Status.FEASIBLE)
