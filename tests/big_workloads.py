"""Large workloads for the time-limit and interrupt tests (tests/solvers/test_interrupts.py,
test_time_limits.py): long chains and wide graphs of parallel chains, as workload dicts."""

from __future__ import annotations


def chain_workload(n: int, devices: int = 8) -> dict:
    """A chain of ``n`` layers, t = 1, one TMPC (two on even layers): the time-limit
    and interrupt tests' big graph."""
    nodes = []
    for v in range(n):
        fw = {str(v - 1): 0.0} if v else {}
        bw = {str(v + 1): 0.0} if v < n - 1 else {}
        tmpcs = [{"id": "vanilla", "timePerSample": 1.0 + (v % 3) * 0.25, "parameterSize": 10.0, "memoryUsageA": 4.0,
                  "memoryUsageB": 1.0, "syncTimeFw": fw, "syncTimeBw": bw}]
        if v % 2 == 0:
            tmpcs.append({"id": "activation recomp", "timePerSample": 1.3 + (v % 3) * 0.25, "parameterSize": 10.0,
                          "memoryUsageA": 1.0, "memoryUsageB": 2.0, "syncTimeFw": fw, "syncTimeBw": bw})
        nodes.append({"id": v, "name": f"l{v}", "TMPCs": {"1": tmpcs}})
    edges = [{"sourceId": v, "destId": v + 1, "communicationCost": 1.0} for v in range(n - 1)]
    return {"maxDevices": devices, "maxMemoryPerDevice": 1e6, "bandwidth": 100.0, "mbsInBatch": 8,
            "nodes": nodes, "edges": edges, "name": f"chain{n}"}


def wide_workload(branches: int, length: int) -> dict:
    """``branches`` parallel chains of ``length`` layers between a source and a sink:
    (length + 1)^branches + 2 ideals, many more ideal pairs."""
    edges = []
    last = []
    nid = 1
    for _ in range(branches):
        prev = 0
        for _ in range(length):
            edges.append((prev, nid))
            prev, nid = nid, nid + 1
        last.append(prev)
    edges += [(v, nid) for v in last]
    ids = range(nid + 1)
    pred: dict[int, list[int]] = {v: [] for v in ids}
    succ: dict[int, list[int]] = {v: [] for v in ids}
    for a, b in edges:
        pred[b].append(a)
        succ[a].append(b)
    nodes = [{"id": v, "name": f"l{v}", "TMPCs": {"1": [{
        "id": "vanilla", "timePerSample": 1.0, "parameterSize": 10.0, "memoryUsageA": 4.0, "memoryUsageB": 1.0,
        "syncTimeFw": {str(p): 0.0 for p in pred[v]}, "syncTimeBw": {str(s): 0.0 for s in succ[v]}}]}} for v in ids]
    return {"maxDevices": 8, "maxMemoryPerDevice": 1e6, "bandwidth": 100.0, "mbsInBatch": 8, "nodes": nodes,
            "edges": [{"sourceId": a, "destId": b, "communicationCost": 1.0} for a, b in edges],
            "name": f"wide{branches}x{length}"}
