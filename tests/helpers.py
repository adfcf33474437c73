"""Small builders for test workloads (plain dicts in the reference JSON format), random
version-2 keys, and the ordered partitions of a graph (for naive oracles)."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any

from piper import Plan, Problem, Stage, problem_from_dict, problem_to_dict


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


def plan(*stages: tuple) -> Plan:
    """plan(([0, 1], d, t, "vanilla"), ([2], d, t, {2: "activation recomp"}))"""
    out = []
    for nodes, d, t, names in stages:
        tm = {v: names for v in nodes} if isinstance(names, str) else dict(names)
        out.append(Stage(tuple(nodes), d, t, tm))
    return Plan(tuple(out))


def with_v2(problem: Problem, rng: random.Random, *, slower_inside: bool | None = None,
            shard_denominator: int = 16) -> Problem:
    """Random version-2 keys: G in {1, 2, 4, 8}, B_in = B * {4..20} (or B / {2..4}: with
    probability 0.15 when ``slower_inside`` is None, always when True, never when False),
    f in {2, 4}, and on ~60% of the TMPCs a sharded size s = {0..8} M / ``shard_denominator``."""
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
