"""``python -m piper warmup``: compile every DP kernel ahead, into numba's on-disk cache.

The DP compiles a kernel on its first call (the first solve after an install takes about a
minute; :mod:`piper.dp.compile_clock` keeps that time out of time limits and says so on
stderr). An install step for CI or a cluster image can do it once ahead: :func:`compile_kernels`
solves a few tiny instances that reach every kernel signature a solve uses (both engines, both
knapsacks, uniform plans, the ideal counter, the batch-time objective and interleaved plans, with
and without the cluster keys), so that later
runs only load the kernels. :func:`kernels_ready` says whether that was done for the DP's
current sources (a marker next to numba's cache, keyed by the sources and numba's and Python's
versions).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numba

from piper.core.options import Options
from piper.core.problem import Problem
from piper.dp.entry import solve_dp
from piper.dp.ideals import count_ideals
from piper.io.workload import problem_from_dict

__all__ = ["kernels_ready", "compile_kernels", "marker_path"]

_DP_DIR = Path(__file__).resolve().parent


def _sources_key() -> str:
    digest = hashlib.sha256()
    for path in sorted(_DP_DIR.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(f"numba {numba.__version__} python {sys.version_info[:3]}".encode())
    return digest.hexdigest()[:20]


def marker_path() -> Path:
    """The marker that says the kernels of these sources are in numba's cache."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    base = Path(cache) if cache else _DP_DIR / "__pycache__"
    return base / f"piper-dp-kernels-{_sources_key()}.ready"


def kernels_ready() -> bool:
    return marker_path().is_file()


def _tmpc(tid: str, p: float, a: float, b: float, ins: list[int], outs: list[int], sharded: float = 0.0) -> dict:
    out = {"id": tid, "timePerSample": p, "parameterSize": 4.0e6, "memoryUsageA": a, "memoryUsageB": b,
           "syncTimeFw": {str(u): 0.0 for u in ins}, "syncTimeBw": {str(x): 0.0 for x in outs}}
    if sharded:
        out["memoryUsageShardedB"] = sharded
    return out


def _warmup_problems() -> list[Problem]:
    """Two tiny DAGs (a diamond): one with only the paper's keys, one with every cluster key
    (nodes of devices, a faster link inside a node, another all-reduce factor, sharded state),
    with two TMPCs per layer and degree and a memory limit that binds."""
    edges = [(0, 1), (0, 2), (1, 3), (2, 3)]
    ins = {v: [u for u, w in edges if w == v] for v in range(4)}
    outs = {v: [w for u, w in edges if u == v] for v in range(4)}
    out = []
    for cluster in (False, True):
        s = 2.0e8 if cluster else 0.0
        nodes = [{"id": v, "TMPCs": {str(t): [_tmpc("vanilla", 1.0 / t, 1.0e8, 1.0e8 / t, ins[v], outs[v], s),
                                            _tmpc("activation recomp", 1.3 / t, 2.0e7, 1.0e8 / t, ins[v], outs[v], s)]
                                      for t in (1, 2)}}
                 for v in range(4)]
        raw = {"maxDevices": 8, "maxMemoryPerDevice": 9.0e8, "bandwidth": 1.0e9, "mbsInBatch": 8, "nodes": nodes,
               "edges": [{"sourceId": u, "destId": w, "communicationCost": 1.0e6} for u, w in edges]}
        if cluster:
            raw.update(devicesPerNode=4, intraNodeBandwidth=4.0e9, allReduceFactor=2.0)
        out.append(problem_from_dict(raw))
    return out


def _warmup_chain(cluster: bool) -> Problem:
    """A chain of an end layer and four identical layers (the batch-time and interleaved searches
    by counts, piper/dp/groups.py), with or without every cluster key."""
    n = 5
    ins = {v: [v - 1] if v else [] for v in range(n)}
    outs = {v: [v + 1] if v < n - 1 else [] for v in range(n)}
    s = 2.0e8 if cluster else 0.0
    nodes = [{"id": v, "TMPCs": {str(t): [_tmpc("vanilla", (1.0 + (v == 0)) / t, 1.0e8, 1.0e8 / t, ins[v], outs[v], s),
                                        _tmpc("activation recomp", 1.3 / t, 2.0e7, 1.0e8 / t, ins[v], outs[v], s)]
                                  for t in (1, 2)}} for v in range(n)]
    raw = {"maxDevices": 8, "maxMemoryPerDevice": 9.0e8, "bandwidth": 1.0e9, "mbsInBatch": 8, "nodes": nodes,
           "edges": [{"sourceId": v, "destId": v + 1, "communicationCost": 1.0e6} for v in range(n - 1)]}
    if cluster:
        raw.update(devicesPerNode=4, intraNodeBandwidth=4.0e9, allReduceFactor=2.0)
    return problem_from_dict(raw)


def compile_kernels() -> float:
    """Compile (or load) every kernel signature a solve uses by solving the warm-up instances
    (both engines, both knapsacks, uniform plans; the batch-time objective and interleaved plans,
    on a DAG and on a chain of identical layers) and counting their ideals; write the marker.
    Returns the seconds it took."""
    start = time.perf_counter()
    base = Options(threads=1)
    for problem in _warmup_problems():
        count_ideals(problem)
        for knapsack in ("exact", "greedy"):
            for engine in ("threshold", "table"):
                solve_dp(problem, replace(base, knapsack=knapsack, params={"engine": engine, "curve": True}))
        solve_dp(problem, replace(base, uniform=True))
    for problem in [*_warmup_problems(), _warmup_chain(False), _warmup_chain(True)]:
        for knapsack in ("exact", "greedy"):
            version3 = replace(base, knapsack=knapsack, max_virtual_stages=2)
            solve_dp(problem, replace(version3, objective="batch-time"))
            solve_dp(problem, replace(version3, objective="batch-time", uniform=True))
            solve_dp(problem, version3)
    seconds = time.perf_counter() - start
    marker = marker_path()
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"compiled in {seconds:.1f} s\n")
    except OSError:  # a read-only install: the kernels compile again next time (numba cannot cache them either)
        pass
    return seconds
