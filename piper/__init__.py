"""piper: Piper's multidimensional planner for DNN parallelization (NeurIPS 2021),
with exact baselines that check its plans.

Data flows one way: workload JSON -> :class:`Problem` -> a solver ->
:class:`Result` (holding a :class:`Plan`) -> :func:`evaluate` -> :class:`Score`.
"""

from .checks import ResultIssue, check_result
from .evaluate import PlanError, Score, StageScore, check_plan, evaluate
from .options import NO_AR, Candidates, Options, candidates
from .plan import Plan, PlanFormatError, Stage, load_plan, plan_from_dict, render_plan
from .problem import (
    TMPC,
    Edge,
    Node,
    Problem,
    ProblemError,
    dump_problem,
    insert_bert_layers,
    load_problem,
    problem_from_dict,
    problem_to_dict,
)
from .result import Result, SolverError, Status, make_result
from .solvers import get_solver, solve, solver_names

__all__ = [
    "TMPC", "Edge", "Node", "Problem", "ProblemError", "load_problem", "problem_from_dict",
    "problem_to_dict", "dump_problem", "insert_bert_layers",
    "Plan", "Stage", "PlanFormatError", "load_plan", "plan_from_dict", "render_plan",
    "PlanError", "Score", "StageScore", "evaluate", "check_plan",
    "Options", "Candidates", "candidates", "NO_AR",
    "Result", "Status", "SolverError", "make_result",
    "solve", "get_solver", "solver_names", "check_result", "ResultIssue",
]
__version__ = "0.1.0"
