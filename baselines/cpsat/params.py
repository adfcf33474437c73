"""CP-SAT's solver parameters (docs/formulations.md §3, §6): :func:`solver_parameters`
configures a CpSolver from the options, always with the guards against OR-Tools 9.15's
wrong certificates (:data:`GUARD_PARAMETERS`: google/or-tools#5293, and presolve's probing) and, for a proof search
below a warm start, the proof portfolio (:data:`PROOF_SUBSOLVERS`, :data:`PROOF_PARAMETERS`;
OR-Tools 9.15 runs the first num_workers - 1 of the subsolvers requested). :func:`run_search`
runs one search so that SIGINT / SIGTERM stop it (``StopSearch``, docs/errors.md,
"Interrupts").
"""

from __future__ import annotations

from typing import Any

from ortools.sat.python import cp_model

from piper.core import stopping
from piper.core.errors import SolverError
from piper.core.options import Options

#: the finest time precision (bits per unit of time) the CP-SAT models accept. Above it OR-Tools 9.15's
#: presolve gave wrong certificates on these models, with or without probing: "infeasible" for a
#: 4-layer instance brute force solves at 32, 35 and 36 bits (correct at 24-31, 33-34, 37-39), and
#: wrong optima at 36-46 bits (docs/formulations.md §3.3; 200 keyed instances x 28, 30, 32, 36 bits:
#: 4 wrong answers, none at 28 or 30)
MAX_PRECISION_BITS = 30

#: the parameters that avoid OR-Tools 9.15's wrong answers on these models: the inclusion step of
#: presolve certified wrong optima (google/or-tools#5293), and presolve's probing certified wrong
#: optima and wrong infeasibility at 32-46 bits of time precision (docs/formulations.md §3.4;
#: tests/baselines/test_exact_models.py::test_probing_off_keeps_the_certificates_right)
GUARD_PARAMETERS: dict[str, Any] = {"presolve_inclusion_work_limit": 0, "cp_model_probing_level": 0}

#: A proof search (strict cutoff below a warm start) requests only complete tree searches,
#: in this order: CP-SAT's pure CP/SAT search with clause learning first (it found the
#: infeasibility proofs in ``experiments.bench_exact``), then the LP-based ones (OR-Tools
#: 9.15 runs the first num_workers - 1 of them, see the module docstring).
PROOF_SUBSOLVERS: tuple[str, ...] = ("no_lp", "default_lp", "max_lp", "quick_restart_no_lp", "quick_restart",
                                     "reduced_costs", "pseudo_costs", "core")
#: ... and none of the first-solution and neighbourhood heuristics, which only look for
#: plans (there is usually none below an optimal warm start) and took CPU time from them
PROOF_PARAMETERS: dict[str, Any] = {"use_feasibility_jump": False, "use_lns": False, "use_feasibility_pump": False}


def solver_parameters(options: Options, time_limit: float | None, *, proof: bool = False) -> cp_model.CpSolver:
    """A CpSolver configured from ``options`` (threads, time limit, seed, guard).

    ``proof``: the model is a proof search below a warm start; unless
    ``params["proof_portfolio"]`` is False, the first ``num_workers`` of
    :data:`PROOF_SUBSOLVERS` are requested (OR-Tools runs fewer, see the module docstring)
    and the heuristics of :data:`PROOF_PARAMETERS` are off.
    """
    solver = cp_model.CpSolver()
    p = solver.parameters
    params = dict(options.params)
    p.num_workers = int(params.get("num_workers", max(1, int(options.threads))))
    if proof and params.get("proof_portfolio", True):
        for key, val in PROOF_PARAMETERS.items():
            setattr(p, key, val)
        if p.num_workers > 1:
            p.subsolvers.extend(PROOF_SUBSOLVERS[: p.num_workers])
    p.random_seed = int(options.seed)
    p.relative_gap_limit = 0.0
    p.absolute_gap_limit = 0.0
    p.log_search_progress = bool(params.get("msg", options.progress))
    if time_limit is not None:
        p.max_time_in_seconds = max(0.01, float(time_limit))
    if stopping.installed():  # the command handles SIGINT: CP-SAT's own handler would turn it into "unknown"
        p.catch_sigint_signal = False
    for key, val in {**GUARD_PARAMETERS, **dict(params.get("cp_params", {}))}.items():
        if val is None:
            continue  # None = leave the OR-Tools default (the regression test's "no guard")
        try:
            if isinstance(val, (list, tuple)):
                field = getattr(p, key)
                field.clear()
                field.extend(val)
            else:
                setattr(p, key, val)
        except AttributeError:  # the guard's field too: ortools >= 9.14 has it
            raise SolverError(f"unknown CP-SAT parameter {key!r}") from None
        except (TypeError, ValueError):  # protobuf's message spans lines: name the type instead
            current = getattr(p, key)
            shown = list(current) if isinstance(val, (list, tuple)) else current
            raise SolverError(f"CP-SAT parameter {key!r} cannot be {val!r} (it is now {shown!r}, of type "
                              f"{type(shown).__name__})") from None
    return solver


def run_search(solver: cp_model.CpSolver, model: cp_model.CpModel) -> Any:
    """``solver.Solve(model)``, stopped by SIGINT / SIGTERM (:func:`piper.core.stopping.stoppable`:
    ``StopSearch``; the search then returns its best plan, FEASIBLE, or UNKNOWN)."""
    if stopping.requested() is not None:  # stopped before it began: a search without time
        solver.parameters.max_time_in_seconds = 0.0
    with stopping.stoppable(solver.StopSearch):
        return solver.Solve(model)
