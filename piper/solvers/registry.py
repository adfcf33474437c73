"""The solver registry and the one entry point: ``piper.solve(problem, options=None, solver="dp")``.

Each entry is ``name -> SolverInfo``: the import path ("module:function") of a function
``f(problem: Problem, options: Options) -> Result`` and everything the rest of the project
needs to know about the solver, declared once (as CVXPY's solver interfaces declare their
capabilities): whether "optimal" is a proof, the options it fixes, its knobs
(``Options.params``) and their types, the solver-specific flags of ``python -m piper solve``
it takes, the largest graph it accepts and the cluster features it honours. Modules load
lazily, so the registry is cheap to import.

Piper's own DP registers here. Other packages register more solvers through the entry-point
group :data:`ENTRY_POINT_GROUP` (``pyproject.toml``: ``baselines`` registers the MILP, CP-SAT,
brute force and equi when imported); the registry loads them on the first lookup of a name it
does not know, so ``piper`` never imports ``baselines`` itself. Every solver's knobs are
validated (:mod:`piper.solvers.params`) and its cluster-feature support checked before it runs.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from typing import Any

from piper.core.errors import SolverError
from piper.core.options import BATCH_TIME, TPS, Options
from piper.core.plan import INTERLEAVED, ONE_F_ONE_B
from piper.core.problem import CLUSTER_FEATURES, EXPERT_FEATURES, ITERATION_FEATURES, WINDOW_FEATURES, Problem
from piper.core.result import Result, Status, make_result
from piper.solvers.params import BOOL, INT, LIST, NUMBER, STR, KnobTypes, check_params

__all__ = ["SolverInfo", "SOLVERS", "ENTRY_POINT_GROUP", "DP_FLAGS", "DP_OBJECTIVES", "DP_PARAMS", "DP_SCHEDULES", "register", "unregister", "get_solver", "solve",
           "solver_names", "solvers_with_flag"]

#: the entry-point group of packages that register more solvers when imported (``baselines``)
ENTRY_POINT_GROUP = "piper.solvers"
_plugins_loaded = False


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except ModuleNotFoundError as exc:  # a plugin declared but not importable here: skipped
            if exc.name != ep.value.split(":")[0].split(".")[0]:
                raise


SolverFunc = Callable[[Problem, Options], Result]


@dataclass(frozen=True)
class SolverInfo:
    name: str
    #: "module:function" of a SolverFunc
    target: str
    #: True when an "optimal" status is a proof (the solver is exact)
    exact: bool
    description: str
    #: options fields forced for this entry, e.g. {"knapsack": "greedy"}
    fixed: dict[str, Any] = field(default_factory=dict)
    #: largest graph (layers) the solver accepts; None = any
    max_nodes: int | None = None
    #: the version-2 extensions (JSON keys, see ``piper.core.problem.CLUSTER_FEATURES``) the solver
    #: honours; an instance using any other (``Problem.active_features()``) is refused
    features: frozenset[str] = frozenset()
    #: the knobs (``Options.params``) it understands, knob -> accepted types; a misspelt knob or a
    #: value of another type is an error. None: not declared (nothing is checked)
    params: KnobTypes | None = None
    #: the solver-specific flags of ``python -m piper solve`` it takes (e.g. "--warm-start"); any
    #: other solver-specific flag is an error naming the solvers that take it
    flags: frozenset[str] = frozenset()
    #: the objectives it minimizes (``Options.objective``: "tps", "batch-time"); others are refused
    objectives: frozenset[str] = frozenset({TPS})
    #: the schedules it plans ("1f1b", "interleaved"); options that allow another are refused
    schedules: frozenset[str] = frozenset({ONE_F_ONE_B})
    #: it prices the iteration keys (docs/problem.md §10) only when a layer's allowed TMPCs at a degree
    #: share them and the numbers they act on (Piper's DP: piper/dp/iteration.py); the planner then
    #: gives it the keys only for workloads built that way (piper.frontend.planner.takes_iteration_keys)
    iteration_keys_shared_per_degree: bool = False

    def refusal(self, options: Options) -> str | None:
        """Why this solver cannot honour ``options`` (an objective or a schedule it does not
        handle), or None."""
        if options.objective not in self.objectives:
            return (f"solver {self.name!r} does not minimize {options.objective!r} "
                    f"(it minimizes {', '.join(sorted(self.objectives))})")
        wanted = {ONE_F_ONE_B if v == 1 else INTERLEAVED for v in options.virtual_stage_choices()}
        missing = wanted - self.schedules
        if missing:
            return (f"solver {self.name!r} plans {', '.join(sorted(self.schedules))} schedules only; the options allow "
                    f"{', '.join(sorted(missing))} (--schedule / --max-virtual-stages)")
        return None

    def unsupported(self, problem: Problem) -> dict[str, str]:
        """The problem's active version-2 features this solver does not honour: key -> why active."""
        return {key: why for key, why in problem.active_feature_notes().items() if key not in self.features}

    def load(self) -> SolverFunc:
        module, func = self.target.split(":")
        return getattr(importlib.import_module(module), func)

    def __call__(self, problem: Problem, options: Options | None = None) -> Result:
        missing = self.unsupported(problem)
        if missing:
            what = ", ".join(f"{key} ({why})" for key, why in missing.items())
            keys = "the key" if len(missing) == 1 else "the keys"
            raise SolverError(f"solver {self.name!r} does not support {what} yet; "
                              f"use --solver brute or drop {keys}")
        options = options or Options()
        why = self.refusal(options)
        if why is not None:
            raise SolverError(why)
        check_params(self.name, self.params, options.params)  # a misspelt knob is an error, never ignored
        if self.fixed:
            params = dict(options.params)
            fields = {}
            for key, val in self.fixed.items():
                if hasattr(options, key):
                    fields[key] = val
                else:
                    params[key] = val
            options = replace(options, params=params, **fields)
        solver = self.load()
        start = time.perf_counter()
        try:
            res = solver(problem, options)
        except MemoryError as exc:  # out of memory is a result (no plan, no proof), not a crash
            detail = str(exc).split("\n")[0][:200] or "MemoryError"
            return make_result(problem, self.name, Status.UNKNOWN, None, time_s=time.perf_counter() - start,
                               stats={"out_of_memory": True}, objective_kind=options.objective,
                               message=f"out of memory: {detail}")
        return res if res.solver == self.name else replace(res, solver=self.name)


SOLVERS: dict[str, SolverInfo] = {}


def register(info: SolverInfo) -> SolverInfo:
    if info.name in SOLVERS:
        raise ValueError(f"solver {info.name!r} is already registered")
    SOLVERS[info.name] = info
    return info


def unregister(name: str) -> None:
    SOLVERS.pop(name, None)


def solver_names() -> list[str]:
    _load_plugins()
    return list(SOLVERS)


def get_solver(name: str) -> SolverInfo:
    if name not in SOLVERS:
        _load_plugins()
    try:
        return SOLVERS[name]
    except KeyError:
        raise KeyError(f"unknown solver {name!r}; known: {', '.join(SOLVERS)}") from None


def solvers_with_flag(flag: str) -> list[str]:
    """The registered solvers that take the ``solve`` flag ``flag``, in registration order."""
    return [name for name in solver_names() if flag in SOLVERS[name].flags]


def solve(problem: Problem, options: Options | None = None, solver: str = "dp") -> Result:
    """Solve ``problem`` with the registered ``solver``."""
    return get_solver(solver)(problem, options)


#: the knobs of Piper's DP (``solve_dp``'s docstring)
DP_PARAMS: dict[str, tuple[type, ...]] = {"engine": STR, "curve": BOOL, "curve_points": LIST, "greedy_bound": BOOL,
                                          "upper_bound": NUMBER, "max_ideal_pairs": INT}
#: the solver-specific ``solve`` flags of the DP
DP_FLAGS = frozenset({"--knapsack", "--max-ideals", "--max-ideal-pairs", "--linearize", "--curve", "--no-curve"})

#: the objectives and schedules of the DP (docs/problem.md §9; piper/dp/schedules.py)
DP_OBJECTIVES = frozenset({TPS, BATCH_TIME})
DP_SCHEDULES = frozenset({ONE_F_ONE_B, INTERLEAVED})

register(SolverInfo("dp", "piper.dp:solve_dp", True, "Piper's two-level DP, exact knapsack", {"knapsack": "exact"},
                    features=frozenset(CLUSTER_FEATURES + ITERATION_FEATURES + WINDOW_FEATURES + EXPERT_FEATURES), params=DP_PARAMS, flags=DP_FLAGS,
                    objectives=DP_OBJECTIVES, schedules=DP_SCHEDULES, iteration_keys_shared_per_degree=True))
register(SolverInfo("dp-greedy", "piper.dp:solve_dp", False, "Piper's DP with the reference greedy knapsack",
                    {"knapsack": "greedy"}, features=frozenset(CLUSTER_FEATURES + ITERATION_FEATURES + WINDOW_FEATURES + EXPERT_FEATURES), params=DP_PARAMS, flags=DP_FLAGS,
                    objectives=DP_OBJECTIVES, schedules=DP_SCHEDULES, iteration_keys_shared_per_degree=True))
