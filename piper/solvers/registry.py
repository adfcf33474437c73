"""The solver registry and the one entry point: ``piper.solve(problem, options=None, solver="dp")``.

Each entry is ``name -> SolverInfo`` holding the import path ("module:function") of a
function ``f(problem: Problem, options: Options) -> Result``; modules load lazily, so the
registry is cheap to import. Piper's own DP registers here; ``baselines`` registers the
MILP, CP-SAT, brute force and equi when it is imported, which the registry does on the
first lookup of a name it does not know (:data:`PLUGINS`), so ``piper`` never imports
``baselines`` at module level. Every solver's knobs are validated (:mod:`piper.solvers.params`)
and its version-2 support checked before it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.problem import VERSION2_FEATURES, Problem
from piper.core.result import Result
from piper.solvers.params import check_params

__all__ = ["SolverInfo", "SOLVERS", "PLUGINS", "register", "unregister", "get_solver", "solve", "solver_names"]

#: packages that register more solvers when imported (optional: skipped when not installed)
PLUGINS: tuple[str, ...] = ("baselines",)
_plugins_loaded = False


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name in PLUGINS:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
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
    #: the version-2 extensions (JSON keys, see ``piper.core.problem.VERSION2_FEATURES``) the solver
    #: honours; an instance using any other (``Problem.version2_features()``) is refused
    features: frozenset[str] = frozenset()

    def unsupported(self, problem: Problem) -> dict[str, str]:
        """The problem's active version-2 features this solver does not honour: key -> why active."""
        return {key: why for key, why in problem.version2_feature_notes().items() if key not in self.features}

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
        check_params(self.name, self.target, options.params)  # a misspelt knob is an error, never ignored
        if self.fixed:
            params = dict(options.params)
            fields = {}
            for key, val in self.fixed.items():
                if hasattr(options, key):
                    fields[key] = val
                else:
                    params[key] = val
            options = replace(options, params=params, **fields)
        res = self.load()(problem, options)
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


def solve(problem: Problem, options: Options | None = None, solver: str = "dp") -> Result:
    """Solve ``problem`` with the registered ``solver``."""
    return get_solver(solver)(problem, options)


register(SolverInfo("dp", "piper.dp:solve_dp", True, "Piper's two-level DP, exact knapsack", {"knapsack": "exact"},
                    features=frozenset(VERSION2_FEATURES)))
register(SolverInfo("dp-greedy", "piper.dp:solve_dp", False, "Piper's DP with the reference greedy knapsack",
                    {"knapsack": "greedy"}, features=frozenset(VERSION2_FEATURES)))
