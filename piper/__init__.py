"""piper: Piper's multidimensional planner for DNN parallelization (NeurIPS 2021),
with exact baselines that check its plans.

Data flows one way: workload JSON -> :class:`Problem` -> a solver ->
:class:`Result` (holding a :class:`Plan`) -> :func:`evaluate` -> :class:`Score`.
"""

from piper.core.checks import ResultIssue, check_result
from piper.core.errors import PlanError, PlanFormatError, ProblemError, SolverError
from piper.core.evaluate import Score, StageScore, check_plan, evaluate
from piper.core.options import NO_AR, Candidates, Options, candidates
from piper.core.plan import Plan, Stage, plan_from_dict
from piper.core.problem import TMPC, Edge, Node, Problem, problem_to_dict
from piper.core.result import Result, Status, make_result
from piper.io.bert_layers import insert_bert_layers
from piper.io.plans import load_plan
from piper.io.workload import dump_problem, load_problem, problem_from_dict
from piper.render.table import render_plan
from piper.solvers.registry import get_solver, solve, solver_names

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
