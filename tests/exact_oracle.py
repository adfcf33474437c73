"""The seeded tiny instances of the exact models' tests, the brute-force oracle (cached per
process), the check of an exact solver's Result against it, and random plans as the
models' slot assignments."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from baselines.brute import solve_brute
from baselines.cpsat.solver import solve_cpsat
from baselines.exact.model_data import build_model_data
from baselines.milp.solver import solve_milp
from experiments.lib.instances import random_problem
from piper import NO_AR, Options, Status, evaluate
from piper.core.problem import Problem

#: relative tolerance of an optimum against brute force's
REL = 1e-6

#: the exact solvers by name, each called as ``SOLVERS[name](problem, options)``
SOLVERS = {
    "milp": lambda p, o: solve_milp(p, replace(o, params={**o.params, "backend": "cbc"})),
    "milp-highs": lambda p, o: solve_milp(p, replace(o, params={**o.params, "backend": "highs"})),
    "cpsat": lambda p, o: solve_cpsat(p, o),
}


def tiny(seed: int) -> Problem:
    """Seeded tiny instance: 2-7 layers, chains and branchy DAGs, 1-3 TMPCs, t in {1,2,4},
    k in 1..6, N in {1,2,4,6}, memory often binding (about a third are infeasible)."""
    return random_problem(seed, n=2 + seed % 6, shape=("chain", "branchy")[(seed // 6) % 2], max_tmpcs=3, degrees=(1, 2, 4))


_ORACLE: dict[tuple[int, str], object] = {}


def oracle(seed: int, ablation: str = "default"):
    """Brute force's Result for ``tiny(seed)`` under the ablation (cached)."""
    key = (seed, ablation)
    if key not in _ORACLE:
        _ORACLE[key] = solve_brute(tiny(seed), ABLATIONS[ablation])
    return _ORACLE[key]


def optimal_seeds(seeds: Iterable[int]) -> Iterator[tuple[int, Any]]:
    """(seed, brute force's Result) for each of ``seeds`` whose ``tiny(seed)`` has an optimum."""
    for seed in seeds:
        best = oracle(seed)
        if best.status == Status.OPTIMAL:
            yield seed, best


#: the options of the ablations, by name
ABLATIONS = {
    "default": Options(threads=2),
    "no-dp": Options(threads=2, data_parallel=False),
    "no-tp": Options(threads=2, tensor_parallel=False),
    "no-ar": Options(threads=2, exclude_tmpcs=NO_AR),
}


def check_against_oracle(problem: Problem, solver: str, options: Options, best):
    """Solve and check against the brute-force result ``best``; returns the solver's Result."""
    res = SOLVERS[solver](problem, options)
    if best.status == Status.INFEASIBLE:
        assert res.status == Status.INFEASIBLE, f"{solver}: {res.status} {res.tps} but brute force says infeasible"
        assert res.plan is None and math.isinf(res.bound)
        return res
    opt = best.tps
    assert res.status == Status.OPTIMAL, f"{solver}: {res.status} ({res.message}); optimum {opt}"
    score = evaluate(problem, res.plan)
    assert not score.oom and res.tps == score.tps
    # never better than the optimum (that would be an evaluator/oracle bug), and optimal
    assert res.tps >= opt * (1 - 1e-12)
    # the certificate's documented tolerance (CP-SAT: 2ε of its integer scaling; MILP: its
    # feasibility tolerances, docs/formulations.md §7)
    tol = max(REL * opt, res.tolerance)
    assert res.tps <= opt + tol, f"{solver}: TPS {res.tps} above the optimum {opt}"
    assert res.objective is not None and abs(res.objective - opt) <= max(tol, REL * opt)
    # the bound is a proven lower bound: never above the optimum, never above the plan
    assert res.bound <= res.tps
    assert res.bound <= opt * (1 + 1e-9)
    assert res.bound >= opt - 2 * tol
    assert res.stats["variables"] > 0 and res.stats["constraints"] > 0
    return res


def other_cluster(seed: int) -> Problem:
    """Cluster shapes ``tiny`` never draws: k in {7, 8}, N in {3, 8, 12} (so d in {3, 6, 12}
    as well as powers of two), t in {1} or {1, 4}, and memory from tight to loose."""
    rng = random.Random(10_007 * seed)
    return random_problem(
        seed, n=2 + seed % 6, shape=("chain", "branchy")[(seed // 6) % 2], max_tmpcs=3,
        devices=rng.choice((7, 8)), microbatches=rng.choice((3, 8, 12)),
        degrees=rng.choice(((1,), (1, 4))), memory_tightness=rng.uniform(1.0, 3.0),
    )


def random_assignment(data, rng: random.Random):
    """A random slot assignment: the topological order cut into 1-3 groups, each with a
    random option every one of its layers has, random TMPCs (None if the draw needs more
    devices or data parallelism than there is; memory is not checked)."""
    order = data.problem.topological_order
    s = rng.randint(1, min(3, len(order), data.slots))
    cuts = sorted(rng.sample(range(1, len(order)), s - 1))
    groups = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    assign = {}
    for i, group in enumerate(groups, start=1):
        common = set(data.slot_opts[i])
        for v in group:
            common &= {c.opt for c in data.choices[v]}
        if not common:
            return None
        o = rng.choice(sorted(common))
        for v in group:
            assign[v] = (i, rng.choice([c for c in data.choices[v] if c.opt == o]))
    used = {i: data.opts[c.opt] for i, c in assign.values()}
    if sum(o.t * o.d for o in used.values()) > data.problem.devices or sum(o.d for o in used.values()) > data.s_max:
        return None
    return assign


def random_plans(problem, rng: random.Random, tries: int = 20):
    """Random memory-feasible plans of ``problem`` as slot assignments."""
    data = build_model_data(problem, Options())
    if data.infeasible_reason is not None:
        return data, []
    out = []
    for _ in range(tries):
        assign = random_assignment(data, rng)
        if assign is not None and not evaluate(problem, data.plan_from_slots(assign)).oom:
            out.append(assign)
    return data, out
