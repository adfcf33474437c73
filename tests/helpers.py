"""Small builders for test workloads (plain dicts in the reference JSON format), random
cluster keys and tiny random instances with them, the ordered partitions of a graph (for
naive oracles), random plans for the brute-force oracle's checks, the comparison of two
TPS values, and test skeletons that several modules share (a loader's refusal of unreadable
and invalid JSON files, the first N qualifying cases of a sweep)."""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from experiments.lib.instances import random_problem
from piper import Options, Plan, Problem, Result, Stage, evaluate, problem_from_dict, problem_to_dict
from piper.core.errors import PlanError
from piper.core.plan import INTERLEAVED, Schedule


def tmpc(tid: str = "vanilla", p: float = 1.0, w: float = 0.0, a: float = 0.0, b: float = 0.0,
         fw: dict | None = None, bw: dict | None = None) -> dict[str, Any]:
    return {"id": tid, "timePerSample": p, "parameterSize": w, "memoryUsageA": a, "memoryUsageB": b,
            "syncTimeFw": fw, "syncTimeBw": bw}


def workload(nodes: dict[int, dict[int, list[dict]]], edges: list[tuple[int, int, float]], *,
             k: int = 8, M: float = 1e12, N: int = 8, B: float = 1.0) -> dict[str, Any]:
    """A workload dict; TMPC sync maps left as None are filled with zeros for every neighbour."""
    preds = {v: [u for u, x, _ in edges if x == v] for v in nodes}
    succs = {v: [x for u, x, _ in edges if u == v] for v in nodes}
    out_nodes = []
    for v, per_t in nodes.items():
        tm = {}
        for t, lst in per_t.items():
            items = []
            for c in lst:
                c = copy.deepcopy(c)
                if c["syncTimeFw"] is None:
                    c["syncTimeFw"] = {str(u): 0.0 for u in preds[v]}
                if c["syncTimeBw"] is None:
                    c["syncTimeBw"] = {str(x): 0.0 for x in succs[v]}
                items.append(c)
            tm[str(t)] = items
        out_nodes.append({"id": v, "TMPCs": tm})
    return {"maxDevices": k, "maxMemoryPerDevice": M, "mbsInBatch": N, "bandwidth": B,
            "nodes": out_nodes, "edges": [{"sourceId": u, "destId": v, "communicationCost": c} for u, v, c in edges]}


def problem(*args, **kw):
    return problem_from_dict(workload(*args, **kw))


def three_layer_chain(**top: Any) -> dict[str, Any]:
    """Layers 0 -> 1 -> 2 (edges of 4 bytes) on k = 8 devices, B = 1 byte/s; layer 1 has two
    TMPCs (vanilla, activation recomp), layer 2 also a t = 2 TMPC; ``top`` sets top-level keys."""
    raw = workload({0: {1: [tmpc(p=1.0)]}, 1: {1: [tmpc(p=2.0), tmpc("activation recomp", p=3.0)]},
                    2: {1: [tmpc(p=1.0)], 2: [tmpc(p=0.5)]}}, [(0, 1, 4.0), (1, 2, 4.0)])
    raw.update(top)
    return raw


def two_layer_workload(**top: Any) -> dict[str, Any]:
    """Layers 0 -> 1 (an edge of 8 bytes), k = 8, N = 8, B = 2 bytes/s; layer 0 also has a
    t = 2 TMPC; ``top`` sets top-level keys (the cluster keys, say)."""
    nodes = {0: {1: [tmpc(p=2.0, w=4.0, bw={"1": 0.0})], 2: [tmpc(p=1.5, w=2.0, bw={"1": 0.0})]},
             1: {1: [tmpc(p=3.0, w=4.0, fw={"0": 0.0})]}}
    raw = workload(nodes, [(0, 1, 8.0)], k=8, N=8, B=2.0)
    raw.update(top)
    return raw


#: a plan of :func:`two_layer_workload`: one stage per layer, d = 2, t = 1
TWO_STAGE_PLAN = {"stages": [
    {"nodes": [0], "dataParallelDegree": 2, "tensorParallelDegree": 1, "TMPCids": {"0": "vanilla"}},
    {"nodes": [1], "dataParallelDegree": 2, "tensorParallelDegree": 1, "TMPCids": {"1": "vanilla"}},
]}


def write_json(folder: Path, value: Any, name: str = "w.json") -> str:
    """``value`` written as JSON to ``folder / name``; returns the path."""
    path = folder / name
    path.write_text(json.dumps(value))
    return str(path)


def assert_unreadable_and_invalid_json_refused(load: Any, error: type[Exception], folder: Path,
                                               invalid: str = "{") -> Path:
    """``load(path)`` raises ``error`` for a missing file ("cannot read") and for a file holding
    ``invalid`` ("not valid JSON"); returns that file's path (``folder / "bad.json"``)."""
    with pytest.raises(error, match="cannot read"):
        load(folder / "missing.json")
    bad = folder / "bad.json"
    bad.write_text(invalid)
    with pytest.raises(error, match="not valid JSON"):
        load(bad)
    return bad


Case = TypeVar("Case")


def first_cases(cases: Iterable[Case], count: int, what: str) -> Iterator[Case]:
    """The first ``count`` of ``cases`` (the instances a test checks); when there are fewer, the
    test fails with "only N ``what``" after checking them."""
    taken = 0
    for case in cases:
        yield case
        taken += 1
        if taken == count:
            return
    pytest.fail(f"only {taken} {what}")


def brute_force_sweep(count: int, check: Callable[[int], object], oracle: Callable[[int], Result]) -> dict[str, int]:
    """A slow sweep: ``check(i)`` for each case i < ``count`` (a solver against brute force), and
    how many of the cases brute force (``oracle(i)``) found optimal and infeasible (a status that
    is neither is an error: the oracle runs without a time limit)."""
    counts = {"optimal": 0, "infeasible": 0}
    for i in range(count):
        check(i)
        counts[oracle(i).status.value] += 1
    return counts


def plan(*stages: tuple) -> Plan:
    """plan(([0, 1], d, t, "vanilla"), ([2], d, t, {2: "activation recomp"}))"""
    out = []
    for nodes, d, t, names in stages:
        tm = {v: names for v in nodes} if isinstance(names, str) else dict(names)
        out.append(Stage(tuple(nodes), d, t, tm))
    return Plan(tuple(out))


def with_random_cluster_keys(problem: Problem, rng: random.Random, *, slower_inside: bool | None = None,
                             shard_denominator: int = 16) -> Problem:
    """Random cluster keys: nodes of G in {1, 2, 4, 8} devices, intra-node bandwidth
    B_in = B * {4..20} (or B / {2..4}: with probability 0.15 when ``slower_inside`` is None,
    always when True, never when False), all-reduce factor f in {2, 4}, and on ~60% of the
    TMPCs a sharded optimizer state s = {0..8} M / ``shard_denominator`` bytes."""
    raw = problem_to_dict(problem)
    raw["devicesPerNode"] = rng.choice((1, 2, 4, 8))
    raw["intraNodeBandwidth"] = raw["bandwidth"] * rng.randint(4, 20)
    slower = rng.random() < 0.15 if slower_inside is None else slower_inside
    if slower:  # allowed, if odd: slower inside a node than across
        raw["intraNodeBandwidth"] = raw["bandwidth"] / rng.randint(2, 4)
    raw["allReduceFactor"] = rng.choice((2, 4))
    m = raw["maxMemoryPerDevice"]
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                if rng.random() < 0.6:
                    c["memoryUsageShardedB"] = float(rng.randint(0, 8)) * m / shard_denominator
    return problem_from_dict(raw)


def random_cluster_cases(count: int, seed: int, slower_inside: bool = False) -> list[Problem]:
    """``count`` tiny random instances (2-4 layers, k in 2..8, N in {1, 2, 4, 8}, t in {1, 2})
    with random cluster keys (:func:`with_random_cluster_keys`), drawn from ``seed``."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        base = random_problem(seed * 1000 + i, n=rng.choice((2, 3, 3, 4)), devices=rng.choice((2, 3, 4, 4, 6, 8)),
                              microbatches=rng.choice((1, 2, 4, 8)), degrees=(1, 2))
        out.append(with_random_cluster_keys(base, rng, slower_inside=slower_inside))
    return out


def same_tps(a: float, b: float) -> bool:
    """Two TPS values agree: both infinite (infeasible), or equal within 1e-9 relative."""
    return (math.isinf(a) and math.isinf(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def ordered_partitions(problem: Problem, remaining: frozenset[int]):
    """Every ordered partition into non-empty stages with stage(u) <= stage(v) on each edge."""
    if not remaining:
        yield []
        return
    items = sorted(remaining)
    for r in range(1, len(items) + 1):
        for first in itertools.combinations(items, r):
            s = set(first)
            # no edge into the first stage from a node placed later
            if any(e.u in remaining and e.u not in s for v in s for e in problem.in_edges[v]):
                continue
            for rest in ordered_partitions(problem, remaining - s):
                yield [first, *rest]


def random_plan(problem: Problem, rng: random.Random, v: int, d_choices: tuple[int, ...] = (1, 2)) -> Plan | None:
    """A random plan on a random topological order: stages (v = 1) or L * v chunks, random
    (d, t) (t from 1, 2; d from ``d_choices``) and TMPCs; None when the draw breaks a rule."""
    order = list(problem.topological_order)
    n = len(order)
    parts = rng.randint(1, n) if v == 1 else v * rng.randint(2, max(2, n // v))
    if parts > n:
        return None
    bounds = [0, *sorted(rng.sample(range(1, n), parts - 1)), n]
    t, d = rng.choice([1, 2]), rng.choice(d_choices)
    stages = []
    for j in range(parts):
        nodes = tuple(order[bounds[j]:bounds[j + 1]])
        if v == 1:
            t, d = rng.choice([1, 2]), rng.choice(d_choices)
        tmpcs = {}
        for u in nodes:
            lst = problem.node(u).tmpcs.get(t)
            if not lst:
                return None
            tmpcs[u] = rng.choice(lst).id
        stages.append(Stage(nodes, d, t, tmpcs))
    return Plan(tuple(stages), Schedule() if v == 1 else Schedule(INTERLEAVED, v))


def assert_no_random_plan_beats(problem: Problem, options: Options, objective: str, v: int, best: float,
                                rng: random.Random, tries: int, d_choices: tuple[int, ...] = (1, 2)) -> None:
    """``tries`` random plans (:func:`random_plan`, v drawn from the options' choices): none that
    evaluates and fits is better than ``best`` under ``objective``."""
    for _ in range(tries):
        plan = random_plan(problem, rng, rng.choice(options.virtual_stage_choices()), d_choices)
        if plan is None:
            continue
        try:
            score = evaluate(problem, plan)
        except PlanError:
            continue
        if not score.oom:
            assert score.value(objective) >= best - 1e-9 * abs(score.value(objective)), (objective, v, plan)


def check_against_oracle(solver: str, problem: Problem, options: Options, best: Result, label: str) -> None:
    """``solver`` on ``problem`` agrees with the oracle's answer ``best`` (brute force): the same
    status, check_result clean against its optimum, an optimum within the result's tolerance, a bound
    never above it, and the value the evaluator's. ``label`` names the case in failures."""
    from piper import solve
    from piper.core.checks import check_result
    from piper.core.result import Status

    res = solve(problem, options, solver=solver)
    what = (f"{solver} {label} ({options.objective}, uniform={options.uniform}, "
            f"features={problem.active_features()})")
    optimum = best.value if best.status == Status.OPTIMAL else math.inf
    assert res.status == best.status, (what, res.status, res.message)
    issues = check_result(problem, options, res, optimum=optimum)
    assert not issues, (what, [str(x) for x in issues])
    if best.status == Status.OPTIMAL:
        assert abs(res.value - optimum) <= res.tolerance + 1e-12 * optimum, (what, res.value, optimum, res.tolerance)
        assert res.bound <= optimum * (1 + 1e-12) and res.value == evaluate(problem, res.plan).value(options.objective)
