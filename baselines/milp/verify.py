"""The second proof of the MILP's "optimal" claims (docs/formulations.md §7):
:func:`verify_optimum` solves again strictly below the claimed plan, with another seed and
another configuration, before :func:`baselines.milp.solver.solve_milp` keeps the claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from baselines.exact.answer import Answer
from baselines.exact.model_data import ModelData
from baselines.milp.model import CUTOFF_REL
from baselines.milp.solve_once import Backend
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.result import Status

#: an "optimal" claim is re-proved by a second solve strictly below it, with another seed
#: and another CBC / HiGHS configuration, at most this many times (each refuted claim is
#: replaced by the better plan the second solve found) before the result is "feasible"
VERIFY_ROUNDS = 3
#: CBC options of a verification solve (a refutation: no heuristics, no cuts, probing)
VERIFY_CBC_OPTIONS = ("heur off", "cuts off", "probing forceOn")


def verify_optimum(data: ModelData, options: Options, backend: Backend, claim: Answer, tol: float,
                   deadline: float | None, *, solve: Callable[..., Answer]) -> Answer:
    """Re-prove an "optimal" ``claim``: solve again strictly below the plan's evaluated TPS
    (the cutoff model of a warm start), with another seed and another configuration
    (:data:`VERIFY_CBC_OPTIONS`; HiGHS without presolve). Infeasible there confirms the
    claim, with the cutoff as the bound. A plan found there refutes it (CBC 2.10 certified
    a plan twice the optimum on docs/formulations.md §7's reproducer): the better plan
    is verified in turn, up to :data:`VERIFY_ROUNDS` times. A second solve that stops
    without an answer leaves the claim unconfirmed: "feasible". ``tol``: the solvers'
    tolerance in time units (:func:`baselines.milp.solve_once.claim_tolerance`). The answer
    keeps the claim's stats, with the rounds in ``stats["verify"]``.

    ``solve``: the one MILP solve (:func:`baselines.milp.solve_once.solve_once`), passed in by
    :class:`baselines.milp.solver.MilpSolver` as the name it calls itself, so that a stand-in
    for ``baselines.milp.solver.solve_once`` (tests/baselines/test_certificates.py) answers both proofs.
    """
    plan, objective, bound, stats = claim.plan, claim.objective, claim.bound, claim.stats
    records: list[str] = []
    stats["verify"] = records

    def answer(status: Status, proven: float) -> Answer:
        """The claim, now with this status, the current plan and the bound ``proven``."""
        return replace(claim, status=status, plan=plan, objective=objective, bound=proven)

    for round_ in range(1, VERIFY_ROUNDS + 1):
        tps = data.plan_value(evaluate(data.problem, plan))  # under the objective: TPS or batch time
        warm = data.slots_from_plan(plan)
        if warm is None:
            records.append(f"round {round_}: the plan is not representable ({data.warm_message})")
            return answer(Status.FEASIBLE, 0.0)
        cutoff = warm.value / data.tau * (1.0 - CUTOFF_REL)
        params = {**options.params, "msg": False}
        if backend.name == "cbc":
            params["cbc_options"] = list(VERIFY_CBC_OPTIONS)
        vopts = replace(options, seed=options.seed + 7919 * round_, params=params)
        second = solve(data, vopts, backend, None, deadline, cutoff, presolve_off=backend.name == "highs")
        if second.status == Status.INFEASIBLE:
            records.append(f"round {round_}: nothing below {tps!r} (second proof)")
            return answer(Status.OPTIMAL, max(bound, cutoff * data.tau - tol))
        better = None if second.plan is None else evaluate(data.problem, second.plan)
        if better is not None and not better.oom and data.plan_value(better) < tps:
            what = "batch time" if data.batch else "TPS"
            stats.setdefault("guards", []).append(
                f"verify: the solver proved {tps!r} optimal, but a second solve below it found a plan "
                f"with {what} {data.plan_value(better)!r}: the first proof was wrong"
            )
            records.append(f"round {round_}: refuted by a plan with {what} {data.plan_value(better)!r}")
            plan, objective, bound = second.plan, second.objective, 0.0
            if second.status != Status.OPTIMAL:
                return answer(Status.FEASIBLE, 0.0)
            continue
        if second.status == Status.OPTIMAL:
            # the cutoff model's optimum is a plan no better than ours (it sits below the
            # cutoff only within the tolerances): its proven bound confirms the claim
            records.append(f"round {round_}: nothing below {tps!r} beyond the tolerance (second proof)")
            return answer(Status.OPTIMAL, max(bound, second.bound - tol))
        records.append(f"round {round_}: the second proof stopped ({second.status.value}); optimum unconfirmed")
        return answer(Status.FEASIBLE, 0.0)
    records.append(f"no confirmed proof after {VERIFY_ROUNDS} rounds")
    return answer(Status.FEASIBLE, 0.0)
