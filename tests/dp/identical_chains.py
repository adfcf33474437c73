"""Random chains of identical layers for the DP's version-3 tests: an identical block of 2..5
layers (one random TMPC list shared by all of them, random sync bytes that may depend on the
TMPC, one edge cost between them), 0..1 random end layers before it and 0..2 after it, random
edge costs at the ends, tight memory, and sometimes the version-2 cluster keys.  Small enough for
brute force (at most 8 layers).  ``disagreement`` checks a DP result against brute force."""

from __future__ import annotations

import math
import random

from piper import Options, Problem, problem_from_dict, solve
from piper.core.checks import check_result
from piper.core.result import Status

__all__ = ["disagreement", "identical_chain_problem", "same", "worked_check_chain"]


def _tmpcs(rng: random.Random, t: int, count: int, w_shared: bool) -> list[dict]:
    base_p = rng.randint(2, 10)
    w = rng.randint(0, 8)
    return [{"id": f"c{j}", "timePerSample": float(base_p + 2 * j + rng.randint(0, 2)) / t,
             "parameterSize": float(w if w_shared else rng.randint(0, 8)),
             "memoryUsageA": float(max(0, rng.randint(1, 6) - 2 * j)), "memoryUsageB": float(rng.randint(0, 4)),
             "memoryUsageShardedB": float(rng.choice([0, 0, 2, 4]))} for j in range(count)]


def identical_chain_problem(seed: int, *, n_inner: int | None = None, ends: tuple[int, int] | None = None,
                            cluster: bool | None = None, w_shared: bool = True, sync_free: bool | None = None,
                            flush: bool = False) -> Problem:
    """A random chain with an identical block (module docstring); ``w_shared`` False draws every
    TMPC's parameter size on its own (the TMPCs of a layer then differ in w); ``flush``: the
    edges into and out of the block cost what the edges inside it cost."""
    rng = random.Random(seed)
    n_inner = rng.randint(2, 5) if n_inner is None else n_inner
    pre, post = (rng.randint(0, 1), rng.randint(0, 2)) if ends is None else ends
    n = pre + n_inner + post
    sync_free = rng.random() < 0.6 if sync_free is None else sync_free
    degrees = [1, 2] if rng.random() < 0.7 else [1]
    inner = {t: _tmpcs(rng, t, rng.randint(1, 3), w_shared) for t in degrees}
    inner_sync = {t: [(1, 0) if sync_free else (rng.randint(0, 2), rng.randint(0, 2)) for _ in inner[t]]
                  for t in degrees}
    c_inner = float(rng.randint(0, 4))
    nodes, edges = [], []
    for i in range(n):
        is_inner = pre <= i < pre + n_inner
        per_t = {t: [dict(c) for c in inner[t]] if is_inner else _tmpcs(rng, t, rng.randint(1, 2), w_shared)
                 for t in degrees}
        for t, lst in per_t.items():
            for j, c in enumerate(lst):
                fw, bw = inner_sync[t][j] if is_inner else (rng.randint(0, 2), rng.randint(0, 2))
                c["syncTimeFw"] = {str(i - 1): float(fw)} if i > 0 else {}
                c["syncTimeBw"] = {str(i + 1): float(bw)} if i < n - 1 else {}
        nodes.append({"id": i, "name": f"layer{i}", "TMPCs": {str(t): lst for t, lst in per_t.items()}})
        if i > 0:
            both_inner = pre <= i - 1 and i < pre + n_inner or flush and pre <= i <= pre + n_inner
            edges.append({"sourceId": i - 1, "destId": i,
                          "communicationCost": c_inner if both_inner else float(rng.randint(0, 4))})
    k, n_mb = rng.choice([2, 3, 4, 6, 8]), rng.choice([2, 4, 8])
    total = sum(max(c["memoryUsageA"] + c["memoryUsageB"] for c in nd["TMPCs"]["1"]) for nd in nodes)
    raw = {"maxDevices": k, "maxMemoryPerDevice": float(max(6, round(total * rng.uniform(0.3, 1.0)))),
           "bandwidth": 2.0, "mbsInBatch": n_mb, "nodes": nodes, "edges": edges,
           "name": f"identical-chain-{seed}"}
    if rng.random() < 0.4 if cluster is None else cluster:
        raw.update(devicesPerNode=rng.choice([1, 2, 4]), intraNodeBandwidth=rng.choice([1.0, 4.0, 8.0]),
                   allReduceFactor=rng.choice([2.0, 4.0]))
    return problem_from_dict(raw)


def worked_check_chain(n: int = 4, k: int = 2, n_mb: int = 4) -> Problem:
    """docs/problem.md §9.4: n layers with p = 1, no edge, resync or memory cost."""
    def tmpc(i: int) -> dict:
        return {"id": "a", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 0, "memoryUsageB": 0,
                "syncTimeFw": {str(i - 1): 0} if i else {}, "syncTimeBw": {str(i + 1): 0} if i < n - 1 else {}}

    return problem_from_dict({"maxDevices": k, "maxMemoryPerDevice": 1, "bandwidth": 1, "mbsInBatch": n_mb,
                              "nodes": [{"id": i, "TMPCs": {"1": [tmpc(i)]}} for i in range(n)],
                              "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 0}
                                        for i in range(n - 1)]})


def same(a: float, b: float) -> bool:
    return (math.isinf(a) and math.isinf(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def disagreement(problem: Problem, options: Options, solver: str = "dp") -> str | None:
    """Why the DP's result disagrees with brute force (None when it agrees): an exact status must
    be brute's optimum; "feasible" needs a bound <= the optimum; every result passes check_result."""
    dp, brute = solve(problem, options, solver=solver), solve(problem, options, solver="brute")
    name = problem.extra.get("name", "instance")
    optimum = brute.value if brute.plan is not None else math.inf
    issues = check_result(problem, options, dp, optimum=optimum)
    if issues:
        return f"{name}: {[str(i) for i in issues]}"
    if brute.plan is None:
        if dp.plan is None and (dp.status == Status.INFEASIBLE or dp.status == Status.UNKNOWN
                                and not dp.stats.get("identical_chain", True)):
            return None
        return f"{name}: brute infeasible, dp {dp.status} {dp.value}"
    if dp.status == Status.OPTIMAL and same(dp.value, optimum) and same(dp.objective, dp.value):
        return None
    if dp.status == Status.FEASIBLE and (solver != "dp" or dp.bound <= optimum * (1 + 1e-9)):
        return None
    return f"{name}: dp {dp.status} {dp.value} (bound {dp.bound}), brute {optimum}"


def periodic_chain_problem(seed: int) -> Problem:
    """A random chain whose 3-5 inner layers alternate between two kinds with the same TMPC ids and
    other numbers (time and activation memory; GPT-OSS's sliding-window and full-attention layers),
    at most 8 nodes (brute force's limit): no identical chain, a relaxed one
    (piper/dp/chain.py ``relaxed_chain``)."""
    rng = random.Random(seed)
    n_inner = rng.randint(3, 5)
    pre, post = rng.randint(0, 1), rng.randint(0, 2)
    n = pre + n_inner + post
    degrees = [1, 2] if rng.random() < 0.7 else [1]
    base = {t: _tmpcs(rng, t, rng.randint(1, 3), True) for t in degrees}
    other = {t: [dict(c, timePerSample=c["timePerSample"] + (rng.choice([-1.0, 0.5, 1.0, 2.0]) / t
                                                             if c["timePerSample"] > 1 else 1.0),
                      memoryUsageA=max(0.0, c["memoryUsageA"] + rng.choice([-1.0, 0.0, 1.0])))
                 for c in lst] for t, lst in base.items()}
    nodes, edges = [], []
    for i in range(n):
        inner = pre <= i < pre + n_inner
        kind = base if (i - pre) % 2 == 0 else other
        per_t = {t: [dict(c) for c in kind[t]] if inner else _tmpcs(rng, t, rng.randint(1, 2), True) for t in degrees}
        for lst in per_t.values():
            for c in lst:
                c["syncTimeFw"] = {str(i - 1): float(rng.randint(0, 1))} if i > 0 else {}
                c["syncTimeBw"] = {str(i + 1): float(rng.randint(0, 1))} if i < n - 1 else {}
        nodes.append({"id": i, "TMPCs": {str(t): lst for t, lst in per_t.items()}})
        if i:
            edges.append({"sourceId": i - 1, "destId": i, "communicationCost": float(rng.randint(0, 3))})
    k, n_mb = rng.choice([2, 3, 4, 6]), rng.choice([2, 4, 8])
    total = sum(max(c["memoryUsageA"] + c["memoryUsageB"] for c in nd["TMPCs"]["1"]) for nd in nodes)
    return problem_from_dict({"maxDevices": k, "maxMemoryPerDevice": float(max(6, round(total * rng.uniform(0.3, 1.0)))),
                              "bandwidth": 2.0, "mbsInBatch": n_mb, "nodes": nodes, "edges": edges,
                              "name": f"periodic-chain-{seed}"})
