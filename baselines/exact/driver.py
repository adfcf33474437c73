"""The one driver of the exact models (CVXPY style): :func:`solve_exact` runs a solver
interface (:class:`ExactSolver`: :class:`baselines.milp.solver.MilpSolver`,
:class:`baselines.cpsat.solver.CpsatSolver`) through the steps both models share, and the
interface fills in the model's own.

The driver holds the deadline, the parts of the plan space (:func:`node_parts`: one part
is solved, two are solved and combined, :func:`combine_results`) and, for each part
(:func:`solve_part`): the model data (:func:`build_model_data`) and its infeasible early
exit, the warm start in the part's slots (or why it is not used), the split's fallback
rule, the dispatch to the interface's unsplit search (``solve``) or its split over option
sequences (``split``), and the guards of the final answer (:func:`guarded_result`). See
docs/formulations.md §4 (warm starts and the split), §6 (statuses and guards) and §8 (parts).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Protocol

from baselines.exact.answer import Answer
from baselines.exact.guards import guarded_result
from baselines.exact.model_data import ModelData, WarmStart, build_model_data
from baselines.exact.parts import combine_results, node_parts
from baselines.exact.sequences import split_mode
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status

__all__ = ["PartSearch", "SolvedPart", "ExactSolver", "solve_exact", "solve_part"]


@dataclass(frozen=True)
class PartSearch:
    """One part of the plan space to solve, as the driver hands it to the solver interface."""

    problem: Problem
    options: Options
    #: "inside" or "spanning" (:func:`node_parts`)
    part: str
    data: ModelData
    #: ``options.warm_start`` in this part's slots; None when none is given or it is not usable
    warm: WarmStart | None
    #: why ``options.warm_start`` is not used ("" when it is, or none is given)
    warm_message: str
    #: "" or why the part is solved without the split asked for (it needs a warm start here)
    split_note: str
    #: when the part's solve began, and the deadline (``time.perf_counter()`` seconds; None: no limit)
    start: float
    deadline: float | None


@dataclass(frozen=True)
class SolvedPart:
    """A part's answer, and the part it holds for: the MILP's re-solve of an OOM plan
    (docs/formulations.md §2.6) replaces the model data and the warm start with those of
    its restricted model."""

    search: PartSearch
    answer: Answer


class ExactSolver(Protocol):
    """What an exact model fills in for :func:`solve_exact` (its interface)."""

    @property
    def name(self) -> str:
        """The solver's name in the results (the registry's)."""
        ...

    def split_allowed(self, options: Options) -> bool:
        """Whether a usable warm start may drive the split (the MILP's needs its cutoff on)."""
        ...

    def split_refusal(self, search: PartSearch) -> str:
        """The error when the split is asked for but cannot run (no usable warm start)."""
        ...

    def solve(self, search: PartSearch) -> SolvedPart:
        """The part's unsplit search, below the warm start if there is one."""
        ...

    def split(self, search: PartSearch) -> SolvedPart:
        """The part's search below the warm start split over option sequences."""
        ...


def solve_exact(problem: Problem, options: Options, solver: ExactSolver) -> Result:
    """Solve ``problem`` with ``solver`` within ``options.time_limit_s``: one model when
    G >= k, else one per part of the plan space and the better plan (module docstring)."""
    start = time.perf_counter()
    deadline = None if options.time_limit_s is None else start + float(options.time_limit_s)
    parts = node_parts(problem)
    if len(parts) == 1:  # G >= k (every version-1 instance): one model, edges at B_in
        return solve_part(problem, options, solver, parts[0], start, deadline, split_fallback=False)
    # G < k: plans inside one node (edges at B_in) and plans spanning nodes (edges at B),
    # one model each; the better plan wins, "optimal" only when both are proven
    results = {part: solve_part(problem, options, solver, part, time.perf_counter(), deadline, split_fallback=True)
               for part in parts}
    return combine_results(problem, solver.name, results, time_s=time.perf_counter() - start)


def solve_part(problem: Problem, options: Options, solver: ExactSolver, part: str, start: float,
               deadline: float | None, *, split_fallback: bool) -> Result:
    """:func:`solve_exact` on one part of the plan space (:func:`node_parts`).
    ``split_fallback``: a part the warm start is not in is solved unsplit (the split needs
    it) instead of refused."""
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        return guarded_result(
            data, solver.name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start, objective=None,
            bound=math.inf, tolerance=0.0, warm=None, stats={"variables": 0, "constraints": 0},
            message=data.infeasible_reason,
        )
    warm = None if options.warm_start is None else data.slots_from_plan(options.warm_start)
    search = PartSearch(problem, options, part, data, warm,
                        data.warm_message if options.warm_start is not None and warm is None else "", "",
                        start, deadline)
    split = split_mode(options.params)
    if split == "sequences" and (warm is None or not solver.split_allowed(options)):
        if not (split_fallback and solver.split_allowed(options)):
            raise SolverError(solver.split_refusal(search))
        split = "none"
        search = replace(search, split_note=f"part {part!r} solved without the split (it needs a warm start in "
                                            "this part)")
    solved = solver.split(search) if split == "sequences" else solver.solve(search)
    answer = solved.answer
    return guarded_result(
        solved.search.data, solver.name, answer.status, answer.plan, time_s=time.perf_counter() - start,
        objective=answer.objective, bound=answer.bound, tolerance=answer.tolerance, warm=solved.search.warm,
        stats=answer.stats,
    )
