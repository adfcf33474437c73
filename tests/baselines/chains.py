"""Random chains of identical layers for the aggregated model's tests: a few random end nodes
at each end, and inner nodes that share one random TMPC list (times, sizes, memory, sync
bytes) and one edge cost. Small integers (exact in binary), so that the brute force and the
model see the same numbers."""

from __future__ import annotations

import random
from typing import Any

from piper import Problem, problem_from_dict


def _tmpcs(rng: random.Random, degrees: list[int], sharded: bool, sync: bool) -> dict[int, list[dict[str, Any]]]:
    out = {}
    for t in degrees:
        lst = []
        for i in range(rng.randint(1, 3)):
            c = {"id": f"c{i}", "timePerSample": float(rng.randint(1, 9)) / t, "parameterSize": float(rng.randint(0, 8)),
                 "memoryUsageA": float(rng.randint(0, 6)), "memoryUsageB": float(rng.randint(0, 6)),
                 "fw": float(rng.randint(0, 3)) if sync else 0.0, "bw": float(rng.randint(0, 3)) if sync else 0.0}
            if sharded and rng.random() < 0.5:
                c["memoryUsageShardedB"] = float(rng.randint(1, 8))
            lst.append(c)
        out[t] = lst
    return out


def identical_chain(seed: int, *, max_nodes: int = 8, cluster_keys: bool | None = None, sync: bool | None = None,
                    head: int | None = None, tail: int | None = None) -> Problem:
    """A random chain of at most ``max_nodes`` nodes: ``head`` and ``tail`` random end nodes
    (0-2 each by default) around identical inner nodes. ``cluster_keys``: random G, B_in, f and
    sharded state s; ``sync``: nonzero sync bytes (then the inner TMPCs' sync bytes differ)."""
    rng = random.Random(seed)
    cluster_keys = rng.random() < 0.4 if cluster_keys is None else cluster_keys
    sync = rng.random() < 0.4 if sync is None else sync
    head = rng.randint(0, 2) if head is None else head
    tail = rng.randint(0, 2) if tail is None else tail
    n_inner = rng.randint(1, max(1, max_nodes - head - tail))
    n = head + n_inner + tail
    degrees = [1, 2] if rng.random() < 0.5 else [1]
    k = rng.randint(1, 6)
    n_mb = rng.choice((1, 2, 4, 6))
    inner = _tmpcs(rng, degrees, cluster_keys, sync)
    specs = [_tmpcs(rng, degrees, cluster_keys, sync) for _ in range(head)]
    specs += [inner] * n_inner
    specs += [_tmpcs(rng, degrees, cluster_keys, sync) for _ in range(tail)]
    inner_cost = float(rng.randint(0, 4))
    costs = [inner_cost if head <= i < head + n_inner - 1 else float(rng.randint(0, 4)) for i in range(n - 1)]
    nodes = []
    worst = 0.0
    for v, spec in enumerate(specs):
        per_t = {}
        for t, lst in spec.items():
            items = []
            for c in lst:
                item = {key: val for key, val in c.items() if key not in ("fw", "bw")}
                item["syncTimeFw"] = {str(v - 1): c["fw"]} if v > 0 else {}
                item["syncTimeBw"] = {str(v + 1): c["bw"]} if v < n - 1 else {}
                items.append(item)
            per_t[str(t)] = items
        nodes.append({"id": v, "TMPCs": per_t})
        worst += min(c["memoryUsageA"] * n_mb + c["memoryUsageB"] + c.get("memoryUsageShardedB", 0.0)
                     for lst in spec.values() for c in lst)
    memory = float(max(6, round(worst * rng.uniform(0.25, 0.9))))
    raw: dict[str, Any] = {"maxDevices": k, "maxMemoryPerDevice": memory, "mbsInBatch": n_mb,
                           "bandwidth": float(rng.choice((1, 2, 4))), "nodes": nodes,
                           "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": costs[i]}
                                     for i in range(n - 1)],
                           "name": f"chain-{seed}"}
    if cluster_keys:
        raw["devicesPerNode"] = rng.choice((1, 2, 4))
        raw["intraNodeBandwidth"] = raw["bandwidth"] * rng.choice((0.5, 2.0, 4.0))
        raw["allReduceFactor"] = float(rng.choice((2, 4)))
    return problem_from_dict(raw)
