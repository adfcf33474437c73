"""The baselines register their solvers in the one registry (:mod:`piper.solvers.registry`):
the exact MILP (CBC, HiGHS), CP-SAT, brute force, the paper's equi baseline and the aggregated
model for chains of identical layers. Each entry
declares, in one place, what the rest of the project needs to know: its knobs
(``Options.params``) and their types, the ``python -m piper solve`` flags it takes, its
size limit and the cluster features it honours.

The registry imports this package through the entry point ``piper.solvers`` (pyproject.toml)
on the first lookup of a name it does not know; solve with ``piper.solve(problem, options,
solver="milp")``.
"""

from __future__ import annotations

from baselines.brute import MAX_NODES as BRUTE_MAX_NODES
from piper.core.options import OBJECTIVES
from piper.core.plan import SCHEDULE_KINDS
from piper.core.problem import WORKLOAD_FEATURES, EXPERT_FEATURES, CLUSTER_FEATURES, ITERATION_FEATURES, WINDOW_FEATURES
from piper.solvers.params import BOOL, DICT, INT, LIST, NUMBER, STR
from piper.solvers.registry import SolverInfo, register

__all__ = ["EXACT_PARAMS", "EXACT_FLAGS", "MILP_PARAMS", "CPSAT_PARAMS", "AGGREGATE_PARAMS"]

#: knobs shared by the MILP and CP-SAT (the split over option sequences, logs, verification)
EXACT_PARAMS: dict[str, tuple[type, ...]] = {
    "msg": BOOL, "verify": BOOL, "split": STR, "max_sequences": INT, "split_workers": INT,
    "tmpc_symmetry": BOOL, "split_backend": STR, "ray_address": STR, "max_model_size": INT,
}
#: the MILP's knobs (``solve_milp``'s docstring)
MILP_PARAMS = {**EXACT_PARAMS, "backend": STR, "gap_abs": NUMBER, "cutoff": BOOL, "cbc_options": LIST}
#: CP-SAT's knobs (``solve_cpsat``'s docstring)
CPSAT_PARAMS = {
    **EXACT_PARAMS, "num_workers": INT, "precision_bits": INT, "cp_params": DICT, "strict_cutoff": BOOL,
    "proof_portfolio": BOOL, "device_products": BOOL, "prefix_rows": BOOL, "prefix_cut_edges": BOOL,
}
#: the aggregated model's knobs (``solve_aggregate``'s docstring)
AGGREGATE_PARAMS = {"msg": BOOL, "num_workers": INT, "precision_bits": INT, "rel_gap": NUMBER, "slice_s": NUMBER,
                    "cp_params": DICT, "max_sequences": INT, "probe_parts": INT, "probe_s": NUMBER}
#: the solver-specific ``solve`` flags of the exact models
EXACT_FLAGS = frozenset({"--warm-start", "--split", "--verify", "--split-backend", "--ray-address", "--max-model-size"})
#: the exact models and equi honour every workload key: expert parallelism (docs/problem.md §11, rule 6)
#: and the iteration keys of docs/problem.md §10 (rows (E), docs/formulations.md §12; equi scores its
#: candidates with the evaluator only); ``resyncOverlapWindow`` (§10.1) changes only interleaved plans,
#: which none of them makes (its window is 1 for every 1F1B plan)
_EXACT = frozenset(CLUSTER_FEATURES + EXPERT_FEATURES + ITERATION_FEATURES + WINDOW_FEATURES)
#: the aggregated model: the cluster and the iteration keys, not expert parallelism
_AGGREGATE = frozenset(CLUSTER_FEATURES + ITERATION_FEATURES + WINDOW_FEATURES)
#: the exact models minimize both objectives over 1F1B plans (docs/formulations.md §9); they
#: do not model interleaved plans, so the registry refuses options that allow them
_EXACT_OBJECTIVES = frozenset(OBJECTIVES)

register(SolverInfo("milp", "baselines.milp.solver:solve_milp", True, "exact MILP (PuLP + CBC)", {"backend": "cbc"},
                    features=_EXACT, params=MILP_PARAMS, flags=EXACT_FLAGS, objectives=_EXACT_OBJECTIVES))
register(SolverInfo("milp-highs", "baselines.milp.solver:solve_milp", True, "exact MILP (PuLP + HiGHS)",
                    {"backend": "highs"}, features=_EXACT, params=MILP_PARAMS, flags=EXACT_FLAGS,
                    objectives=_EXACT_OBJECTIVES))
register(SolverInfo("cpsat", "baselines.cpsat.solver:solve_cpsat", True, "exact CP-SAT model (OR-Tools)",
                    features=_EXACT, params=CPSAT_PARAMS, flags=EXACT_FLAGS, objectives=_EXACT_OBJECTIVES))
register(SolverInfo("brute", "baselines.brute:solve_brute", True, "exhaustive enumeration (tiny graphs)",
                    max_nodes=BRUTE_MAX_NODES, features=frozenset(WORKLOAD_FEATURES), params={}, objectives=frozenset(OBJECTIVES),
                    schedules=frozenset(SCHEDULE_KINDS)))
register(SolverInfo("equi", "baselines.equi:solve_equi", False, "PipeDream-2BW-like equi-partition baseline",
                    features=_EXACT, params={"equi_mode": STR, "equi_separate": BOOL}, objectives=frozenset(OBJECTIVES)))
register(SolverInfo("aggregate", "baselines.aggregate.solver:solve_aggregate", True,
                    "exact CP-SAT model over layer counts (docs/formulations.md §11); only for chains whose inner "
                    "layers are identical (at most 8 other nodes at the ends): any other graph is refused",
                    features=_AGGREGATE, params=AGGREGATE_PARAMS, flags=frozenset({"--warm-start"}),
                    objectives=frozenset(OBJECTIVES)))
