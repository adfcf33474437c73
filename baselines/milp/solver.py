r"""Exact MILP for Piper's partitioning problem (PuLP; CBC by default, HiGHS selectable).

``solve_milp(problem, options)``; ``options.params["backend"]`` is ``"cbc"`` (default) or
``"highs"``. ``write_lp`` / ``write_mps`` (:mod:`baselines.milp.model`) write the model for
other solvers.

The model, its rows (A)-(K), (X), (E'), (U), the warm-start cutoff, the split over option
sequences and the solver settings are written once, in ``docs/formulations.md`` (§2 the
MILP, §4 warm starts and the split, §6 statuses and guards, §7 numerics: the stated
tolerance :func:`baselines.milp.solve_once.claim_tolerance` and the second proof
:func:`baselines.milp.verify.verify_optimum` of every optimal claim, §8 version 2 and
uniform plans). Coefficients and domain reductions come from
:mod:`baselines.exact.model_data`. Measurements of the model's speed are in
``docs/results/exact-models.md``.

This module is the MILP's interface to the exact models' driver
(:func:`baselines.exact.driver.solve_exact`): :class:`MilpSolver` and the entry point
:func:`solve_milp`. The model is :mod:`baselines.milp.model`, one solver run
:mod:`baselines.milp.solve_once`, the second proof :mod:`baselines.milp.verify` and the
split :mod:`baselines.milp.split`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from baselines.exact.answer import Answer
from baselines.exact.driver import PartSearch, SolvedPart, solve_exact
from baselines.exact.model_data import build_model_data
from baselines.milp.cbc import quiet_pulp
from baselines.milp.model import CUTOFF_REL
from baselines.milp.solve_once import PULP_STATUS, Backend, claim_tolerance, solve_once
from baselines.milp.split import split_search
from baselines.milp.verify import verify_optimum
from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status

__all__ = ["BACKENDS", "MilpSolver", "solve_milp"]

@dataclass(frozen=True)
class MilpSolver:
    """The MILP as an exact model of :func:`baselines.exact.driver.solve_exact`
    (:class:`baselines.exact.driver.ExactSolver`), with CBC or HiGHS (``backend``: one per
    call, its runs share the HiGHS state)."""

    backend: Backend
    #: ``params["backend"]`` -> the solver's name in the registry and the results
    NAMES: ClassVar[dict[str, str]] = {"cbc": "milp", "highs": "milp-highs"}
    #: PuLP's solution status -> the answer's status (read in :func:`baselines.milp.solve_once.solve_once`)
    STATUS: ClassVar[dict[Any, Any]] = PULP_STATUS
    #: the Python modules it needs (and a CBC binary: PuLP's, or ``cbc`` on the PATH)
    REQUIRED_MODULES: ClassVar[tuple[str, ...]] = ("pulp", "highspy")

    @classmethod
    def for_options(cls, options: Options) -> MilpSolver:
        """The solver ``options.params["backend"]`` names (default CBC)."""
        backend_name = str(options.params.get("backend", "cbc")).lower()
        if backend_name not in cls.NAMES:
            raise SolverError(f"unknown MILP backend {backend_name!r}; use one of {', '.join(cls.NAMES)}")
        return cls(Backend(backend_name))

    @property
    def name(self) -> str:
        return self.NAMES[self.backend.name]

    def split_allowed(self, options: Options) -> bool:
        """The split searches below the warm start's cutoff: ``params["cutoff"]`` must stay on."""
        return bool(options.params.get("cutoff", True))

    def split_refusal(self, search: PartSearch) -> str:
        return ("params['split'] = 'sequences' splits a proof search below a warm start: "
                "give a usable warm start (e.g. the DP's plan) and keep params['cutoff'] on"
                + (f"; this warm start is not usable: {search.warm_message}" if search.warm_message else ""))

    def solve(self, search: PartSearch) -> SolvedPart:
        """One solve below the warm start's cutoff (a MIP start without it), then the
        MILP's rules (:meth:`_settle`) and the second proof of an optimal claim."""
        cutoff = self._cutoff(search)
        with quiet_pulp():
            answer = solve_once(search.data, search.options, self.backend, search.warm, search.deadline, cutoff)
        return self._settle(search, answer, cutoff, verify=True)

    def split(self, search: PartSearch) -> SolvedPart:
        """The split cutoff search (:func:`baselines.milp.split.split_search`), then the
        MILP's rules (:meth:`_settle`); the split is not proved twice."""
        cutoff = self._cutoff(search)
        assert search.warm is not None and cutoff is not None  # the driver splits only below a warm start
        with quiet_pulp():
            answer = split_search(search.data, search.options, self.backend, search.warm, search.deadline, cutoff)
        return self._settle(search, answer, cutoff, verify=False)

    @staticmethod
    def _cutoff(search: PartSearch) -> float | None:
        """The cutoff below the warm start (units of τ; docs/formulations.md §4.2), None
        without one or with ``params["cutoff"]`` off."""
        if search.warm is not None and search.options.params.get("cutoff", True):
            return search.warm.value / search.data.tau * (1.0 - CUTOFF_REL)
        return None

    def _settle(self, search: PartSearch, answer: Answer, cutoff: float | None, *, verify: bool) -> SolvedPart:
        """The MILP's rules after its search (docs/formulations.md §2.6, §4.2, §7.2):
        INFEASIBLE below the cutoff proves the warm start optimal (UNKNOWN returns it as
        feasible); a plan OOM under the evaluator is solved again with M·(1 - 1e-6); a
        proven bound holds within :func:`claim_tolerance`; with ``verify`` (and
        ``params["verify"]``, default on) an optimal claim is proved twice
        (:func:`verify_optimum`); the stated tolerance."""
        problem, options, data, warm = search.problem, search.options, search.data, search.warm
        status, plan, objective, bound, stats = answer.status, answer.plan, answer.objective, answer.bound, answer.stats
        if cutoff is not None:
            assert warm is not None
            stats["cutoff"] = cutoff * data.tau
            if status == Status.INFEASIBLE:
                # no plan beats the warm start by more than CUTOFF_REL: it is optimal
                status, plan, objective, bound = Status.OPTIMAL, warm.plan, warm.value, cutoff * data.tau
            elif status == Status.UNKNOWN:
                status, plan, objective = Status.FEASIBLE, warm.plan, warm.value
                bound = min(bound, cutoff * data.tau)
        gap_abs = float(options.params.get("gap_abs", 1e-9))
        tol = claim_tolerance(data, gap_abs)
        if plan is not None and evaluate(problem, plan).oom:
            # accepted within the solver's feasibility tolerance, OOM for the evaluator:
            # tighten M a little and solve again (docs/problem.md, P3). That model is a
            # restriction, so its bound is no bound on this problem: the first solve's is kept
            first_bound = bound if status == Status.OPTIMAL else 0.0
            stats.setdefault("guards", []).append("plan OOM under the evaluator; re-solved with M*(1-1e-6)")
            data = build_model_data(problem, options, memory_factor=1.0 - 1e-6, part=search.part)
            warm = None if options.warm_start is None else data.slots_from_plan(options.warm_start)
            with quiet_pulp():
                again = solve_once(data, options, self.backend, None, search.deadline)
            again.stats["guards"] = stats["guards"] + again.stats.get("guards", [])
            # a proof on the restriction proves nothing here (a plan between M·(1 - 1e-6) and
            # the cap may fit): its INFEASIBLE is UNKNOWN, its OPTIMAL only FEASIBLE
            restricted = {Status.INFEASIBLE: Status.UNKNOWN, Status.OPTIMAL: Status.FEASIBLE}
            status = restricted.get(again.status, again.status)
            plan, objective, stats = again.plan, again.objective, again.stats
            bound = max(0.0, first_bound - tol)
            if again.status in (Status.INFEASIBLE, Status.OPTIMAL):
                stats["guards"].append(f"the re-solve's '{again.status.value}' holds for the restricted model only: "
                                       f"reported as '{status.value}'")
        elif status == Status.OPTIMAL:
            bound = max(0.0, bound - tol)  # a proof holds within the solver's tolerances
        settled = Answer(status, plan, objective, bound, stats=stats)
        if verify and status == Status.OPTIMAL and plan is not None and options.params.get("verify", True):
            with quiet_pulp():
                settled = verify_optimum(data, options, self.backend, settled, tol, search.deadline, solve=solve_once)
        if search.warm_message or search.split_note:
            stats["warm_start"] = (search.warm_message or "no warm start") + (
                f"; {search.split_note}" if search.split_note else "")
        elif warm is not None:
            stats["warm_start"] = f"used ({'batch time' if data.batch else 'TPS'} {warm.value!r})"
        # the claim's tolerance: the solvers' tolerances on both the plan's T and the bound,
        # plus the cutoff's CUTOFF_REL (a cutoff proof excludes plans below TPS·(1 - CUTOFF_REL))
        plan_tps = data.plan_value(evaluate(problem, settled.plan)) if settled.plan is not None else math.inf
        tolerance = 2.0 * tol + (CUTOFF_REL * plan_tps if math.isfinite(plan_tps) else 0.0)
        stats["tolerance"] = tolerance
        return SolvedPart(replace(search, data=data, warm=warm), replace(settled, tolerance=tolerance))


#: the values of ``params["backend"]``
BACKENDS = tuple(MilpSolver.NAMES)


def solve_milp(problem: Problem, options: Options | None = None) -> Result:
    """Solve ``problem`` exactly with the MILP of the module docstring.

    ``options.params``: ``backend`` ("cbc" | "highs"), ``msg`` (solver log on stdout),
    ``gap_abs`` (absolute gap in units of τ, default 1e-9), ``cutoff`` (default True: a
    warm start becomes a cutoff, see the module docstring), ``cbc_options`` (extra CBC
    command-line options, e.g. ["heuristicsOnOff off"]), ``tmpc_symmetry`` (default True:
    the rows (X)), ``split`` ("none" or "sequences": the cutoff search split over the
    stages' option sequences, :mod:`baselines.exact.sequences`, with
    :data:`baselines.milp.split.SPLIT_CBC_OPTIONS` unless ``cbc_options`` is given; needs a
    warm start), ``max_sequences`` (default 20,000), ``split_workers`` (default
    ``threads``: single-threaded solves at once), ``split_backend`` ("threads", default, or
    "ray": the split's sequences as Ray tasks sharing the cutoff,
    :func:`baselines.exact.split_ray.solve_sequences_ray`), ``ray_address`` (the Ray
    cluster; default ``RAY_ADDRESS``, else a local Ray instance).
    """
    options = options or Options()
    return solve_exact(problem, options, MilpSolver.for_options(options))
