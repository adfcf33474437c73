r"""Exact MILP for Piper's partitioning problem (PuLP; CBC by default, HiGHS selectable).

``solve_milp(problem, options)``; ``options.params["backend"]`` is ``"cbc"`` (default) or
``"highs"``. ``write_lp`` / ``write_mps`` write the model for other solvers.

The model, its rows (A)-(K), (X), (E'), (U), the warm-start cutoff, the split over option
sequences and the solver settings are written once, in ``docs/formulations.md`` (§2 the
MILP, §4 warm starts and the split, §6 statuses and guards, §7 numerics: the stated
tolerance :func:`claim_tolerance` and the second proof :func:`_verify_optimum` of every
optimal claim, §8 version 2 and uniform plans). Coefficients and domain reductions come
from :mod:`baselines._model_data`. Measurements of the model's speed are in
``docs/results/exact-models.md``.

This module is the entry point: :func:`solve_milp` and one part of the plan space
(:func:`_solve_part`). The model is :mod:`baselines.milp.model`, one solver run
:mod:`baselines.milp.backend`, the second proof :mod:`baselines.milp.verify` and the split
:mod:`baselines.milp.split`; their public names are importable from here too.
"""

from __future__ import annotations

import math
import time

from baselines.exact.guards import guarded_result
from baselines.exact.model_data import build_model_data
from baselines.exact.parts import combine_results, node_parts
from baselines.exact.split import split_mode
from baselines.milp.backend import (
    CBC_INCREMENT,
    INTEGER_TOL,
    PRIMAL_TOL,
    Backend,
    _solve_once,
    claim_tolerance,
)
from baselines.milp.cbc import quiet_pulp
from baselines.milp.model import CUTOFF_REL, MilpModel, build_milp, write_lp, write_mps
from baselines.milp.split import SPLIT_CBC_OPTIONS, _split_search
from baselines.milp.verify import VERIFY_CBC_OPTIONS, VERIFY_ROUNDS, _verify_optimum
from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status

#: the public names, including those defined in the modules this one is split into
#: (:mod:`baselines.milp.model`, :mod:`baselines.milp.backend`, :mod:`baselines.milp.split`,
#: :mod:`baselines.milp.verify`)
__all__ = ["solve_milp", "build_milp", "write_lp", "write_mps", "MilpModel", "BACKENDS", "Backend", "CUTOFF_REL",
           "PRIMAL_TOL", "INTEGER_TOL", "CBC_INCREMENT", "claim_tolerance", "VERIFY_ROUNDS", "VERIFY_CBC_OPTIONS",
           "SPLIT_CBC_OPTIONS"]

BACKENDS = ("cbc", "highs")


def solve_milp(problem: Problem, options: Options | None = None) -> Result:
    """Solve ``problem`` exactly with the MILP of the module docstring.

    ``options.params``: ``backend`` ("cbc" | "highs"), ``msg`` (solver log on stdout),
    ``gap_abs`` (absolute gap in units of τ, default 1e-9), ``cutoff`` (default True: a
    warm start becomes a cutoff, see the module docstring), ``cbc_options`` (extra CBC
    command-line options, e.g. ["heuristicsOnOff off"]), ``tmpc_symmetry`` (default True:
    the rows (X)), ``split`` ("none" or "sequences": the cutoff search split over the
    stages' option sequences, :mod:`baselines.exact.split`, with :data:`SPLIT_CBC_OPTIONS`
    unless ``cbc_options`` is given; needs a warm start), ``max_sequences`` (default
    20,000), ``split_workers`` (default ``threads``: single-threaded solves at once),
    ``split_backend`` ("threads", default, or "ray": the split's sequences as Ray tasks
    sharing the cutoff, :func:`baselines.exact.split.solve_sequences_ray`), ``ray_address``
    (the Ray cluster; default ``RAY_ADDRESS``, else a local Ray instance).
    """
    options = options or Options()
    start = time.perf_counter()
    backend_name = str(options.params.get("backend", "cbc")).lower()
    if backend_name not in BACKENDS:
        raise SolverError(f"unknown MILP backend {backend_name!r}; use one of {', '.join(BACKENDS)}")
    name = "milp" if backend_name == "cbc" else "milp-highs"
    backend = Backend(backend_name)  # one per call: its runs share the HiGHS state
    deadline = None if options.time_limit_s is None else start + float(options.time_limit_s)
    parts = node_parts(problem)
    if len(parts) == 1:  # G >= k (every version-1 instance): one model, edges at B_in
        return _solve_part(problem, options, backend, name, parts[0], start, deadline, split_fallback=False)
    # G < k: plans inside one node (edges at B_in) and plans spanning nodes (edges at B),
    # one model each; the better plan wins, "optimal" only when both are proven
    results = {part: _solve_part(problem, options, backend, name, part, time.perf_counter(), deadline,
                                 split_fallback=True)
               for part in parts}
    return combine_results(problem, name, results, time_s=time.perf_counter() - start)


def _solve_part(problem: Problem, options: Options, backend: Backend, name: str, part: str, start: float,
                deadline: float | None, *, split_fallback: bool) -> Result:
    """:func:`solve_milp` on one part of the plan space (``_model_data.node_parts``).
    ``split_fallback``: a part the warm start is not in is solved unsplit (the split needs
    it) instead of refused."""
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        return guarded_result(
            data, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start, objective=None,
            bound=math.inf, tolerance=0.0, warm=None, stats={"variables": 0, "constraints": 0},
            message=data.infeasible_reason,
        )
    warm = None
    warm_msg = ""
    if options.warm_start is not None:
        warm = data.slots_from_plan(options.warm_start)
        warm_msg = "" if warm is not None else data.warm_message
    cutoff = None
    if warm is not None and options.params.get("cutoff", True):
        cutoff = warm.tps / data.tau * (1.0 - CUTOFF_REL)
    split = split_mode(options.params)
    if split == "sequences" and cutoff is None and split_fallback and options.params.get("cutoff", True):
        split = "none"
        warm_msg = warm_msg or "no warm start"
        warm_msg += f"; part {part!r} solved without the split (it needs a warm start in this part)"
    if split == "sequences" and cutoff is None:
        raise SolverError("params['split'] = 'sequences' splits a proof search below a warm start: "
                          "give a usable warm start (e.g. the DP's plan) and keep params['cutoff'] on"
                          + (f"; this warm start is not usable: {warm_msg}" if warm_msg else ""))
    with quiet_pulp():
        if split == "sequences":
            status, plan, objective, bound, stats = _split_search(data, options, backend, warm, deadline, cutoff)
        else:
            status, plan, objective, bound, stats = _solve_once(data, options, backend, warm, deadline, cutoff)
    if cutoff is not None:
        stats["cutoff"] = cutoff * data.tau
        if status == Status.INFEASIBLE:
            # no plan beats the warm start by more than CUTOFF_REL: it is optimal
            status, plan, objective, bound = Status.OPTIMAL, warm.plan, warm.tps, cutoff * data.tau
        elif status == Status.UNKNOWN:
            status, plan, objective = Status.FEASIBLE, warm.plan, warm.tps
            bound = min(bound, cutoff * data.tau)
    gap_abs = float(options.params.get("gap_abs", 1e-9))
    tol = claim_tolerance(data, gap_abs)
    if plan is not None and evaluate(problem, plan).oom:
        # accepted within the solver's feasibility tolerance, OOM for the evaluator:
        # tighten M a little and solve again (docs/problem.md, P3). That model is a
        # restriction, so its bound is no bound on this problem: the first solve's is kept
        first_bound = bound if status == Status.OPTIMAL else 0.0
        stats.setdefault("guards", []).append("plan OOM under the evaluator; re-solved with M*(1-1e-6)")
        data = build_model_data(problem, options, memory_factor=1.0 - 1e-6, part=part)
        warm = None if options.warm_start is None else data.slots_from_plan(options.warm_start)
        with quiet_pulp():
            status, plan, objective, _restricted_bound, stats2 = _solve_once(data, options, backend, None, deadline)
        stats2["guards"] = stats["guards"] + stats2.get("guards", [])
        stats = stats2
        bound = max(0.0, first_bound - tol)
    elif status == Status.OPTIMAL:
        bound = max(0.0, bound - tol)  # a proof holds within the solver's tolerances
    if status == Status.OPTIMAL and plan is not None and split != "sequences" and options.params.get("verify", True):
        with quiet_pulp():
            status, plan, objective, bound = _verify_optimum(data, options, backend, plan, objective, bound, tol,
                                                             deadline, stats, solve=_solve_once)
    if warm_msg:
        stats["warm_start"] = warm_msg
    elif warm is not None:
        stats["warm_start"] = f"used (TPS {warm.tps!r})"
    # the claim's tolerance: the solvers' tolerances on both the plan's T and the bound,
    # plus the cutoff's CUTOFF_REL (a cutoff proof excludes plans below TPS·(1 - CUTOFF_REL))
    plan_tps = evaluate(problem, plan).tps if plan is not None else math.inf
    tolerance = 2.0 * tol + (CUTOFF_REL * plan_tps if math.isfinite(plan_tps) else 0.0)
    stats["tolerance"] = tolerance
    return guarded_result(
        data, name, status, plan, time_s=time.perf_counter() - start, objective=objective, bound=bound,
        tolerance=tolerance, warm=warm, stats=stats,
    )
