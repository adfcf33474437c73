r"""Exact CP-SAT model for Piper's partitioning problem (OR-Tools).

``solve_cpsat(problem, options)``. Same slots, options and choices as the MILP
(:mod:`baselines.exact.model_data`), with reification instead of big-M and y as a division.
The variables and constraints, the integer scaling of times (tolerance 2ε) and memory,
the proof portfolio of a search below a warm start, the guards against OR-Tools 9.15's
wrong-OPTIMAL bug (google/or-tools#5293: ``presolve_inclusion_work_limit = 0``), the
optional ``verify`` and the split over option sequences are written once in
``docs/formulations.md`` (§3 the CP-SAT model, §4 warm starts and the split, §6
statuses and guards, §7 numerics, §8 version 2 and uniform plans). Measurements are in
``docs/results/exact-models.md``.

This module is the entry point: :func:`solve_cpsat` and one part of the plan space
(:func:`_solve_part`). The model is :mod:`baselines.cpsat.model`, the solver parameters
and the guard :mod:`baselines.cpsat.params`, the split :mod:`baselines.cpsat.split`, the
second opinion and the memory guard :mod:`baselines.cpsat.verify`; their public names are
importable from here too.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ortools.sat.python import cp_model

from baselines.cpsat.model import CpsatModel, _build_model, memory_scaling
from baselines.cpsat.params import (
    GUARD_PARAMETERS,
    PROOF_PARAMETERS,
    PROOF_SUBSOLVERS,
    solver_parameters,
)
from baselines.cpsat.split import _split_search
from baselines.cpsat.verify import _restricted_memory, _verify
from baselines.exact.guards import guarded_result
from baselines.exact.model_data import build_model_data
from baselines.exact.parts import combine_results, node_parts
from baselines.exact.split import split_mode
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status

#: the public names, including those defined in the modules this one is split into
#: (:mod:`baselines.cpsat.model`, :mod:`baselines.cpsat.params`)
__all__ = ["solve_cpsat", "CpsatModel", "solver_parameters", "memory_scaling", "GUARD_PARAMETERS",
           "PROOF_SUBSOLVERS", "PROOF_PARAMETERS"]

_STATUS = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}


def solve_cpsat(problem: Problem, options: Options | None = None) -> Result:
    """Solve ``problem`` exactly (up to the documented 2ε) with CP-SAT.

    ``options.params``: ``num_workers`` (default ``options.threads``), ``msg`` (search
    log), ``precision_bits`` (P, default 30), ``verify`` (re-prove an optimum with
    presolve off), ``cp_params`` (extra CP-SAT parameters; a value None leaves the
    default, e.g. {"presolve_inclusion_work_limit": None} switches the guard off),
    ``strict_cutoff`` (default True: a warm start makes a proof search below it; False
    hints it), ``proof_portfolio`` (default True: a proof search runs
    :data:`PROOF_SUBSOLVERS` only), ``device_products`` (default True: the bin-packing rows),
    ``prefix_rows`` (default True: the prefix / suffix device-time rows of a proof search),
    ``prefix_cut_edges`` (default True: their crossing-edge terms), ``tmpc_symmetry``
    (default True: the TMPC exchange rule of repeated layers), ``split`` ("none" or
    "sequences": the proof search below the warm start split over the stages' option
    sequences, :mod:`baselines.exact.split`; needs a warm start), ``max_sequences`` (default
    20,000: the split refuses instances with more sequences), ``split_workers`` (default
    ``threads``: that many single-worker searches of the split at once),
    ``split_backend`` ("threads", default, or "ray": the split's sequences as Ray tasks
    sharing the cutoff, :func:`baselines.exact.split.solve_sequences_ray`), ``ray_address``
    (the Ray cluster; default ``RAY_ADDRESS``, else a local Ray instance).
    """
    options = options or Options()
    start = time.perf_counter()
    deadline = None if options.time_limit_s is None else start + float(options.time_limit_s)
    parts = node_parts(problem)
    if len(parts) == 1:  # G >= k (every version-1 instance): one model, edges at B_in
        return _solve_part(problem, options, parts[0], start, deadline, split_fallback=False)
    # G < k: plans inside one node (edges at B_in) and plans spanning nodes (edges at B),
    # one model each; the better plan wins, "optimal" only when both are proven
    results = {part: _solve_part(problem, options, part, time.perf_counter(), deadline, split_fallback=True)
               for part in parts}
    return combine_results(problem, "cpsat", results, time_s=time.perf_counter() - start)


def _solve_part(problem: Problem, options: Options, part: str, start: float, deadline: float | None, *,
                split_fallback: bool) -> Result:
    """:func:`solve_cpsat` on one part of the plan space (``_model_data.node_parts``).
    ``split_fallback``: a part the warm start is not in is solved unsplit (the split needs
    it) instead of refused."""
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        return guarded_result(
            data, "cpsat", Status.INFEASIBLE, None, time_s=time.perf_counter() - start, objective=None,
            bound=math.inf, tolerance=0.0, warm=None, stats={"variables": 0, "constraints": 0},
            message=data.infeasible_reason,
        )
    def build() -> CpsatModel:
        return _build_model(data, options)

    split = split_mode(options.params)
    model = build()
    warm = None
    strict = False
    stats: dict[str, Any] = {}
    if options.warm_start is not None:
        warm = data.slots_from_plan(options.warm_start)
        if warm is None:
            stats["warm_start"] = data.warm_message
    if split == "sequences" and warm is None and split_fallback:
        split = "none"
        stats["split"] = f"part {part!r} solved without the split (it needs a warm start in this part)"
    if split == "sequences":
        if warm is None:
            raise SolverError("params['split'] = 'sequences' splits a proof search below a warm start: "
                              "give a usable warm start (e.g. the DP's plan)"
                              + (f"; this one is not: {data.warm_message}" if options.warm_start is not None else ""))
        status, plan, objective, bound, eps, stats = _split_search(data, options, warm, deadline, model, build, start)
        status, bound = _restricted_memory(model, status, bound, stats)
        return guarded_result(
            data, "cpsat", status, plan, time_s=time.perf_counter() - start, objective=objective, bound=bound,
            tolerance=2 * eps, warm=warm, stats=stats,
        )
    if warm is not None:
        strict = bool(options.params.get("strict_cutoff", True))
        if strict:
            worst, _ = model.stage_int(warm)
            model.add_cutoff(worst - 1)  # only strictly better plans: a proof search
            stats["warm_start"] = f"strict cutoff below the warm start (TPS {warm.tps!r})"
        else:
            worst = model.add_hint(warm)
            model.m.Add(model.T <= worst)  # the hint stays feasible; worse plans are cut
            stats["warm_start"] = f"hinted (TPS {warm.tps!r})"
    build_s = time.perf_counter() - start
    remaining = None if deadline is None else max(0.01, deadline - time.perf_counter())
    solver = solver_parameters(options, remaining, proof=strict)
    code = solver.Solve(model.m)
    if code == cp_model.MODEL_INVALID:
        raise SolverError(f"CP-SAT rejected the model: {model.m.Validate()}")
    status = _STATUS.get(code, Status.UNKNOWN)
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
    if strict:
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
            "cp_status": solver.StatusName(code),
        }
    )
    if status == Status.OPTIMAL and options.params.get("verify"):
        status, plan, objective, bound = _verify(model, solver, options, deadline, status, plan, objective, bound, stats)
    status, bound = _restricted_memory(model, status, bound, stats)
    return guarded_result(
        data, "cpsat", status, plan, time_s=time.perf_counter() - start, objective=objective, bound=bound,
        tolerance=2 * eps, warm=warm, stats=stats,
    )
