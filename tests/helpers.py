"""Small builders for hand-made test workloads (plain dicts in the reference JSON format)."""

from __future__ import annotations

import copy
from typing import Any

from piper import Plan, Stage, problem_from_dict


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
