"""The baselines register their solvers in the one registry (:mod:`piper.solvers.registry`):
the exact MILP (CBC, HiGHS), CP-SAT, brute force and the paper's equi baseline.

    piper.solve(problem, options=None, solver="milp") -> Result

The registry's names are re-exported here (``baselines.solve`` is ``piper.solve``).
"""

from __future__ import annotations

from piper.core.problem import VERSION2_FEATURES
from piper.solvers.registry import (
                    SOLVERS,
                    SolverInfo,
                    get_solver,
                    register,
                    solve,
                    solver_names,
                    unregister,
)

__all__ = ["SolverInfo", "SOLVERS", "register", "unregister", "get_solver", "solve", "solver_names"]

register(SolverInfo("milp", "baselines.milp.solver:solve_milp", True, "exact MILP (PuLP + CBC)", {"backend": "cbc"},
                    features=frozenset(VERSION2_FEATURES)))
register(SolverInfo("milp-highs", "baselines.milp.solver:solve_milp", True, "exact MILP (PuLP + HiGHS)", {"backend": "highs"},
                    features=frozenset(VERSION2_FEATURES)))
register(SolverInfo("cpsat", "baselines.cpsat.solver:solve_cpsat", True, "exact CP-SAT model (OR-Tools)",
                    features=frozenset(VERSION2_FEATURES)))
register(SolverInfo("brute", "baselines.brute:solve_brute", True, "exhaustive enumeration (tiny graphs)", max_nodes=8,
                    features=frozenset(VERSION2_FEATURES)))
register(SolverInfo("equi", "baselines.equi:solve_equi", False, "PipeDream-2BW-like equi-partition baseline",
                    features=frozenset(VERSION2_FEATURES)))
