"""Seeded instance generators: random small DAGs for cross-checks and benchmarks.

``random_problem(seed, ...)`` is deterministic for a given seed and arguments.
Memory limits are drawn so that memory often binds (and some instances are
infeasible), activation-recomputation TMPCs trade memory for time, and some
layers lack some tensor-parallel degrees.
"""

from __future__ import annotations

import math
import random
from typing import Any

from piper.core.evaluate import PlanError, evaluate
from piper.core.plan import Plan, Stage
from piper.core.problem import ACTIVATION_RECOMP, ITERATION_FEATURES, VANILLA, Problem, problem_to_dict
from piper.io.workload import problem_from_dict

__all__ = ["random_problem", "random_moe_problem", "with_expert_keys", "with_iteration_keys", "with_free_iteration_keys", "without_iteration_keys", "without_tmpc_keys", "with_schedule_window", "random_dag", "repeated_layers", "witness_memory",
           "operator_graph_problem", "SHAPES", "identical_chain_problem"]

SHAPES = ("chain", "branchy")


def random_dag(rng: random.Random, n: int, shape: str) -> list[tuple[int, int]]:
    """Edges of a DAG on nodes 0..n-1 whose topological order is 0..n-1.

    chain: 0->1->...->n-1 plus a few skip edges; branchy: each node takes 0-2
    random earlier predecessors (several sources and sinks, many ideals).
    """
    edges: set[tuple[int, int]] = set()
    if shape == "chain":
        for i in range(n - 1):
            edges.add((i, i + 1))
        for i in range(n):
            for j in range(i + 2, n):
                if rng.random() < 0.12:
                    edges.add((i, j))
    elif shape == "branchy":
        for j in range(1, n):
            npred = rng.choice((0, 1, 1, 1, 2, 2))
            for _ in range(npred):
                edges.add((rng.randrange(0, j), j))
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {SHAPES}")
    return sorted(edges)


def _neighbours(n: int, edges: list[tuple[int, int]]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(predecessors, successors) of layers 0..n-1."""
    preds: dict[int, list[int]] = {v: [] for v in range(n)}
    succs: dict[int, list[int]] = {v: [] for v in range(n)}
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)
    return preds, succs


def random_problem(
    seed: int,
    n: int | None = None,
    shape: str | None = None,
    *,
    devices: int | None = None,
    microbatches: int | None = None,
    degrees: tuple[int, ...] = (1, 2),
    max_tmpcs: int = 2,
    realistic: bool | None = None,
    memory_tightness: float | None = None,
    t1_missing: float = 0.15,
) -> Problem:
    """A random instance. Unset arguments are drawn from the seed:
    n in 3..7, shape chain/branchy, k in 1..6, N in {1, 2, 4, 6}, 1..max_tmpcs TMPCs per (v, t).

    ``realistic`` uses profiler-like magnitudes (ms-scale times, ~1e7-byte tensors,
    1e10 B/s, MiB-multiple memory); otherwise small integers (exact in binary).
    ``memory_tightness`` scales the memory limit (smaller = tighter; ~1 binds often).
    ``t1_missing``: probability that a layer with other degrees lacks t = 1.
    """
    rng = random.Random(seed)
    n = n if n is not None else 3 + seed % 5
    shape = shape if shape is not None else SHAPES[(seed // 5) % 2]
    k = devices if devices is not None else rng.randint(1, 6)
    n_mb = microbatches if microbatches is not None else rng.choice((1, 2, 4, 6))
    realistic = realistic if realistic is not None else (seed % 5 == 4)
    tight = memory_tightness if memory_tightness is not None else rng.uniform(1.6, 4.0)
    edges = random_dag(rng, n, shape)
    preds, succs = _neighbours(n, edges)

    time_unit = 1e-3 if realistic else 1.0
    byte_unit = 2**20 if realistic else 1
    bandwidth = 1e10 if realistic else 8.0

    nodes: list[dict[str, Any]] = []
    min_mem_total = 0.0
    max_node_min = 0.0
    for v in range(n):
        ts = [t for t in degrees if t == 1 or rng.random() < 0.8]
        if rng.random() < t1_missing and len(ts) > 1:
            ts.remove(1)  # some layers lack t = 1
        base_p = rng.randint(2, 12)
        base_w = rng.randint(0, 16)
        base_a = rng.randint(1, 12)
        base_b = rng.randint(0, 8)
        tm: dict[str, list[dict[str, Any]]] = {}
        node_min = None
        for t in ts:
            count = rng.randint(1, max_tmpcs)
            p = max(1, round(base_p * (1.15 / t + 0.05 * t)))
            a = max(1, round(base_a / t)) if rng.random() < 0.9 else base_a
            b = round(base_b / t) + rng.randint(0, 2)
            w = round(base_w / t)
            sync = (lambda: 0) if t == 1 else (lambda: rng.randint(0, 4))
            lst = []
            for j in range(count):
                if j == 0:
                    tid, pj, aj, bj = VANILLA, p, a, b
                elif j == 1:
                    tid = ACTIVATION_RECOMP
                    pj, aj, bj = p + max(1, round(p * rng.uniform(0.2, 0.5))), max(0, a // 3), b + rng.randint(0, 2)
                else:
                    tid = f"variant{j}"
                    pj, aj, bj = p + rng.randint(0, 4), rng.randint(0, a), b + rng.randint(0, 3)
                lst.append(
                    {
                        "id": tid,
                        "timePerSample": pj * time_unit,
                        "parameterSize": float(w * byte_unit),
                        "memoryUsageA": float(aj * byte_unit),
                        "memoryUsageB": float(bj * byte_unit),
                        "syncTimeFw": {str(u): float(sync() * byte_unit) for u in preds[v]},
                        "syncTimeBw": {str(x): float(sync() * byte_unit) for x in succs[v]},
                    }
                )
                m = aj + bj
                node_min = m if node_min is None else min(node_min, m)
            tm[str(t)] = lst
        min_mem_total += node_min or 0
        max_node_min = max(max_node_min, node_min or 0)
        nodes.append({"id": v, "name": f"layer{v}", "TMPCs": tm})
    raw_edges = [
        {"sourceId": u, "destId": v, "communicationCost": float(rng.randint(0, 6) * byte_unit)} for u, v in edges
    ]
    # per-stage memory need ~ total / (number of stages there is room for), at y ~ 1..2
    base = max(max_node_min, min_mem_total / max(1, min(k, n)))
    memory = max(1, round(base * tight * rng.uniform(0.8, 1.6)))
    raw = {
        "maxDevices": k,
        "maxMemoryPerDevice": float(memory * byte_unit),
        "mbsInBatch": n_mb,
        "bandwidth": bandwidth,
        "name": f"random-{shape}-n{n}-seed{seed}",
        "nodes": nodes,
        "edges": raw_edges,
    }
    return problem_from_dict(raw)


def with_expert_keys(problem: Problem, rng: random.Random, *, moe_share: float = 0.6,
                     same_per_position: bool = False) -> Problem:
    """``problem`` with the expert-parallelism keys of docs/problem.md §11 on about ``moe_share``
    of its layers (an MoE layer): each TMPC of such a layer gets e in {1, 2, 4} (mostly 2 or 4),
    e_t in {1, 2}, halved until e e_t <= max(2, k / 2), expert weights w_x of 0..16 units (bytes, the unit of the workload's sizes)
    and expert optimizer state s_x of 0..4 thirty-seconds of M. ``same_per_position`` draws the keys
    once per (t, position in the TMPC list) and gives every MoE layer the same ones (identical
    layers stay identical)."""
    raw = problem_to_dict(problem)
    unit = 2**20 if problem.bandwidth >= 1e9 else 1  # random_problem's realistic byte unit
    m = raw["maxMemoryPerDevice"]
    shared: dict[tuple[str, int], dict[str, Any]] = {}

    widest = max(2, problem.devices // 2)

    def keys() -> dict[str, Any]:
        e, e_t = rng.choice((1, 2, 2, 4, 4)), rng.choice((1, 1, 2))
        while e * e_t > widest:  # leave layouts that rule 6 allows
            e, e_t = (e // 2, e_t) if e > 1 else (e, e_t // 2)
        return {"expertParallel": e, "expertTensorParallel": e_t,
                "expertParameterSize": float(rng.randint(0, 16) * unit),
                "memoryUsageShardedExpertB": float(rng.randint(0, 4)) * m / 32}

    moe_all = rng.random() < moe_share if same_per_position else None
    for nd in raw["nodes"]:
        if not (moe_all if same_per_position else rng.random() < moe_share):
            continue
        for t, lst in nd["TMPCs"].items():
            for j, c in enumerate(lst):
                c.update(shared.setdefault((t, j), keys()) if same_per_position else keys())
    return problem_from_dict(raw)


def with_iteration_keys(problem: Problem, rng: random.Random, *, share: float = 0.8,
                        same_per_position: bool = False) -> Problem:
    """``problem`` with the iteration keys of docs/problem.md §10 on about ``share`` of its layers, in
    the form Piper's DP prices exactly (piper/dp/iteration.py): per layer and degree t one set of
    numbers for all its TMPCs (their parameter sizes set to the first's), h (``resyncOverlapTime``)
    drawn around the layer's own resync per iteration f w / B (so that the resync is sometimes hidden,
    sometimes not) and at most (N / min(N, k)) times its least p, and a step o or o_s (``stepTime``,
    ``stepTimeSharded``) of up to a tenth of its least p each. ``same_per_position`` draws the numbers
    once per (t, layer identity) so that identical layers (tests/dp/identical_chains.py) stay identical:
    the key is the layer's TMPC list."""
    raw = problem_to_dict(problem)
    bw = min(problem.bandwidth, problem.bandwidth_intra)
    f, n_mb = problem.resync_factor, problem.microbatches
    room = n_mb / min(n_mb, problem.devices)  # h d <= N p at the largest d
    drawn: dict[Any, dict[str, float]] = {}

    def keys(lst: list[dict[str, Any]]) -> dict[str, float]:
        p_min = min(c["timePerSample"] for c in lst)
        w = lst[0]["parameterSize"]
        h = min(room * p_min, rng.uniform(0.0, 1.5) * f * w / bw)
        return {"parameterSize": w, "resyncOverlapTime": float(h),
                "stepTime": float(rng.choice((0.0, rng.uniform(0.0, 0.1) * p_min))),
                "stepTimeSharded": float(rng.choice((0.0, rng.uniform(0.0, 0.1) * p_min)))}

    for nd in raw["nodes"]:
        if rng.random() >= share and not same_per_position:
            continue
        for t, lst in nd["TMPCs"].items():
            if same_per_position:
                ident = (t, repr(sorted((c["id"], c["timePerSample"], c["parameterSize"]) for c in lst)))
                got = drawn.setdefault(ident, keys(lst))
            else:
                got = keys(lst)
            for c in lst:
                c.update(got)
    return problem_from_dict(raw)


def with_free_iteration_keys(problem: Problem, rng: random.Random, *, same_per_position: bool = False) -> Problem:
    """``problem`` with the iteration keys of docs/problem.md §10 drawn per TMPC, in no form a
    solver could lean on: each TMPC gets, independently, h (``resyncOverlapTime``) with
    probability 0.8 between 0 and twice its own resync per iteration f w / B, o (``stepTime``) and
    o_s (``stepTimeSharded``) each with probability 0.5, up to 0.3 and 0.6 of its compute per
    iteration N p (so that the step weighs like the compute, as it does at small N). Piper's DP
    refuses most of these (a layer's TMPCs differ in h, o, o_s); the exact models and brute force
    take them. ``same_per_position`` draws once per (t, TMPC index, p, w) so that identical layers
    stay identical (their TMPCs still differ from each other)."""
    raw = problem_to_dict(problem)
    bw = min(problem.bandwidth, problem.bandwidth_intra)
    f, n_mb = problem.resync_factor, problem.microbatches
    drawn: dict[Any, dict[str, float]] = {}

    def keys(c: dict[str, Any]) -> dict[str, float]:
        out = {}
        if rng.random() < 0.8:
            out["resyncOverlapTime"] = rng.uniform(0.0, 2.0) * f * c["parameterSize"] / bw
        if rng.random() < 0.5:
            out["stepTime"] = rng.uniform(0.0, 0.3) * n_mb * c["timePerSample"]
        if rng.random() < 0.5:
            out["stepTimeSharded"] = rng.uniform(0.0, 0.6) * n_mb * c["timePerSample"]
        return out

    for nd in raw["nodes"]:
        for t, lst in nd["TMPCs"].items():
            for j, c in enumerate(lst):
                if same_per_position:
                    c.update(drawn.setdefault((t, j, c["timePerSample"], c["parameterSize"]), keys(c)))
                else:
                    c.update(keys(c))
    return problem_from_dict(raw)


def without_tmpc_keys(problem: Problem, keys: tuple[str, ...]) -> Problem:
    """``problem`` with the TMPC keys ``keys`` dropped from every TMPC; the rest as it was."""
    raw = problem_to_dict(problem)
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                for key in keys:
                    c.pop(key, None)
    return problem_from_dict(raw)


def without_iteration_keys(problem: Problem) -> Problem:
    """``problem`` with every TMPC's iteration keys (docs/problem.md §10:
    :data:`~piper.core.problem.ITERATION_FEATURES`) dropped; the rest as it was."""
    return without_tmpc_keys(problem, ITERATION_FEATURES)


def with_schedule_window(problem: Problem) -> Problem:
    """``problem`` with ``resyncOverlapWindow`` "schedule" (docs/problem.md §10.1) and every
    ``resyncOverlapTime`` capped at the least ``timePerSample`` of its layer's TMPCs at that degree (the
    DP's h <= p, piper/dp/iteration.py; a layer's TMPCs keep one h)."""
    raw = problem_to_dict(problem)
    raw["resyncOverlapWindow"] = "schedule"
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            p_min = min(c["timePerSample"] for c in lst)
            for c in lst:
                if "resyncOverlapTime" in c:
                    c["resyncOverlapTime"] = min(c["resyncOverlapTime"], p_min)
    return problem_from_dict(raw)


def random_moe_problem(seed: int, n: int | None = None, *, devices: int | None = None,
                       microbatches: int | None = None, degrees: tuple[int, ...] = (1, 2),
                       moe_share: float = 0.6) -> Problem:
    """A tiny random instance with MoE layers (:func:`with_expert_keys` on :func:`random_problem`):
    n in 2..5 layers, k in {4, 8} devices and N in {2, 4, 8} unless given, so that rule 6 (e e_t
    divides d t) leaves some layouts and rules out others."""
    rng = random.Random(seed * 7919 + 17)
    n = n if n is not None else rng.randint(2, 5)
    k = devices if devices is not None else rng.choice((4, 8))
    n_mb = microbatches if microbatches is not None else rng.choice((2, 4, 8))
    base = random_problem(seed, n=n, devices=k, microbatches=n_mb, degrees=degrees)
    raw = problem_to_dict(with_expert_keys(base, rng, moe_share=moe_share))
    raw["name"] = f"random-moe-n{n}-seed{seed}"
    return problem_from_dict(raw)


def witness_memory(problem: Problem, seed: int, slack: tuple[float, float] = (1.0, 1.15)) -> Problem | None:
    """``problem`` with its memory limit (bytes per device) replaced so that it is feasible
    by construction and memory still binds.

    A random *witness plan* is drawn: the topological order is cut into s contiguous
    stages (s drawn from [⌈L/2⌉, L], L = min(k, N, n), widened down to 1 when draws
    keep failing), each stage gets the smallest tensor degree every one of its layers
    has and d = 1, then stages are upgraded at random (d doubled when 2d divides N, or
    t raised) while Σ d·t <= k and Σ d <= N; every layer uses its least-memory TMPC at
    that t. The new limit is the witness's peak stage memory times a
    factor drawn from ``slack``: the witness fits, plans needing more memory do not.
    None when no witness turns up in 200 draws (the tensor degrees may rule out every
    plan, whatever the memory).
    """
    rng = random.Random(seed)
    order = problem.topological_order
    nodes = problem.node_by_id
    k, n_mb = problem.devices, problem.microbatches
    top = max(1, min(k, n_mb, len(order)))
    for attempt in range(200):
        s = rng.randint(max(1, (top + 1) // 2 - attempt // 20), top)  # fewer stages if many draws fail
        cuts = sorted(rng.sample(range(1, len(order)), s - 1)) if s > 1 else []
        bounds = [0, *cuts, len(order)]
        groups = [order[bounds[j] : bounds[j + 1]] for j in range(s)]
        common = [sorted(set.intersection(*(set(nodes[v].tmpcs) for v in g))) for g in groups]
        if any(not c for c in common):
            continue
        ts = [c[0] for c in common]
        ds = [1] * s
        if sum(ts) > k:
            continue
        for _ in range(4 * s):
            j = rng.randrange(s)
            bigger_t = [t for t in common[j] if t > ts[j]]
            if rng.random() < 0.5 and bigger_t:
                nt, nd = bigger_t[0], ds[j]
            elif n_mb % (2 * ds[j]) == 0:
                nt, nd = ts[j], 2 * ds[j]
            else:
                continue
            if sum(d * t for d, t in zip(ds, ts)) - ds[j] * ts[j] + nd * nt <= k and sum(ds) - ds[j] + nd <= n_mb:
                ts[j], ds[j] = nt, nd
        stages = []
        for g, d, t in zip(groups, ds, ts):
            tm = {v: min(nodes[v].tmpcs[t], key=lambda c: (c.memory_a, c.memory_b)).id for v in g}
            stages.append(Stage(tuple(g), d, t, tm))
        try:
            score = evaluate(problem, Plan(tuple(stages)))
        except PlanError:  # rule 6: an MoE layer's e e_t does not divide the draw's d t; draw again
            continue
        peak = max(st.memory for st in score.stages)
        memory = max(1.0, peak * rng.uniform(*slack))
        return problem.with_cluster(memory=float(math.ceil(memory)))
    return None  # e.g. a layer whose only t uses all k devices next to one lacking that t


def bench_instance(n: int, shape: str, k: int, seed: int | None = None) -> Problem:
    """The exact-model benchmark's draw (``python -m experiments.bench_exact``; seed 1000 + 100 n + k
    unless given): every layer has t = 1 (t = 2 and 4 each missing with probability 0.2), and
    the memory limit comes from a random witness plan, so the instance is feasible and memory
    binds (:func:`witness_memory`)."""
    seed = 1000 + 100 * n + k if seed is None else seed
    raw = random_problem(seed, n, shape, devices=k, microbatches=2 * k, degrees=(1, 2, 4), max_tmpcs=2, t1_missing=0.0)
    return witness_memory(raw, seed) or raw


def repeated_layers(problem: Problem, seed: int, *, share: float = 0.7, jitter: float = 0.03,
                    decoys: float = 0.6) -> Problem:
    """``problem`` with repeated layers, as in the paper's workloads (BERT's transformer
    layers): each layer, with probability ``share`` (at least two), takes the TMPCs of a
    template layer, with the same memory and parameter sizes and per-edge sync bytes that
    do not depend on the TMPC (drawn per layer, edge and t), and the template's times
    scaled by a per-layer factor: exactly 1 for half of them (twins), else within
    ±``jitter``. With probability ``decoys`` each other layer becomes a decoy: the
    template's TMPCs with one memory changed, or with sync bytes that depend on the
    TMPC (such layers must not be exchanged with the others). The layer graph, edges
    and cluster are kept.
    """
    rng = random.Random(seed)
    raw = problem_to_dict(problem)
    nodes = raw["nodes"]
    preds: dict[int, list[int]] = {nd["id"]: [] for nd in nodes}
    succs: dict[int, list[int]] = {nd["id"]: [] for nd in nodes}
    for e in raw["edges"]:
        preds[e["destId"]].append(e["sourceId"])
        succs[e["sourceId"]].append(e["destId"])
    template = max(nodes, key=lambda nd: sum(len(lst) for lst in nd["TMPCs"].values()))["TMPCs"]
    members = {nd["id"] for nd in nodes if rng.random() < share}
    for nd in nodes:
        if len(members) >= 2:
            break
        members.add(nd["id"])
    unit = 2**20 if problem.memory_per_device >= 2**20 else 1
    for nd in nodes:
        # members; among the others, decoys that a symmetry rule must not pair with them:
        # the template's times but another memory (kind 1), or sync bytes that depend on
        # the TMPC (kind 2)
        kind = 0 if nd["id"] in members else (rng.choice((1, 2)) if rng.random() < decoys else -1)
        if kind < 0:
            continue
        factor = 1.0 if rng.random() < 0.5 else 1.0 + rng.uniform(-jitter, jitter)
        tm = {}
        for t, lst in template.items():
            fw = {str(u): float(0 if t == "1" else rng.randint(0, 4) * unit) for u in preds[nd["id"]]}
            bw = {str(x): float(0 if t == "1" else rng.randint(0, 4) * unit) for x in succs[nd["id"]]}
            tm[t] = []
            for j, c in enumerate(lst):
                c2 = {**c, "timePerSample": c["timePerSample"] * factor, "syncTimeFw": dict(fw), "syncTimeBw": dict(bw)}
                if kind == 1 and j == len(lst) - 1:
                    c2["memoryUsageA"] = c["memoryUsageA"] + unit
                if kind == 2 and j > 0:
                    c2["syncTimeFw"] = {u: b + j * unit for u, b in fw.items()}
                tm[t].append(c2)
        nd["TMPCs"] = tm
    raw["name"] = f"{raw.get('name', 'random')}-repeated{seed}"
    return problem_from_dict(raw)


#: operator kinds of :func:`operator_graph_problem`: (weight, compute seconds per sample
#: (log-uniform range), parameter bytes (log-uniform range, 0 = none), activation bytes
#: per microbatch in flight (log-uniform range))
OPERATOR_KINDS: dict[str, tuple[float, tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    "matmul": (0.4, (1e-3, 1.0), (1e6, 1e9), (1e6, 1e8)),
    "attention": (0.15, (1e-3, 3e-1), (0.0, 0.0), (1e6, 1e9)),
    "elementwise": (0.3, (1e-5, 1e-3), (0.0, 0.0), (1e4, 1e8)),
    "norm": (0.15, (1e-5, 1e-4), (1e3, 1e5), (1e4, 1e7)),
}


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return lo if lo == hi else math.exp(rng.uniform(math.log(lo), math.log(hi)))


def operator_graph_problem(seed: int, n: int | None = None, shape: str | None = None, *,
                           devices: int | None = None, microbatches: int | None = None,
                           degrees: tuple[int, ...] | None = None) -> Problem:
    """An operator-like graph with the magnitudes of real profiles (issue 18's
    "real-magnitudes" family), feasible by construction with memory that binds.

    Operators are matmuls, attention cores, elementwise ops and norms with compute times
    log-uniform over 1e-5..1 s per sample, weights up to 1e9 bytes (none for elementwise
    ops and attention cores), activations 1e4..1e9 bytes per microbatch, edges of
    1e4..1e9 bytes per sample, and 1e10 bytes/s of bandwidth, all as unrounded floats
    (bytes as whole numbers, as a profiler writes them). Every operator has a "vanilla"
    TMPC and, when it keeps activations, an "activation recomp" one (activations / 3..10,
    20-40% more time); matmuls and attention cores may also take t = 2 (half the time and
    weights plus 5%, and sync bytes of a partial-sum exchange). The memory limit comes
    from a random witness plan (:func:`witness_memory`), so some plan fits and memory
    binds. Unset arguments are drawn from the seed: n in 6..24, k in {2, 4, 8}, N in
    {2, 4, 8, 16}, degrees (1,) or (1, 2).
    """
    rng = random.Random(1_000_003 * seed + 17)
    n = n if n is not None else rng.randint(6, 24)
    shape = shape if shape is not None else rng.choice(SHAPES)
    k = devices if devices is not None else rng.choice((2, 4, 8))
    n_mb = microbatches if microbatches is not None else rng.choice((2, 4, 8, 16))
    degrees = degrees if degrees is not None else rng.choice(((1,), (1, 2)))
    edges = random_dag(rng, n, shape)
    preds, succs = _neighbours(n, edges)
    kinds = list(OPERATOR_KINDS)
    weights = [OPERATOR_KINDS[kd][0] for kd in kinds]
    comm = {(u, v): float(round(_log_uniform(rng, 1e4, 1e9))) for u, v in edges}
    nodes: list[dict[str, Any]] = []
    for v in range(n):
        kind = rng.choices(kinds, weights)[0]
        _, p_range, w_range, a_range = OPERATOR_KINDS[kind]
        p = _log_uniform(rng, *p_range)
        w = float(round(_log_uniform(rng, *w_range))) if w_range[1] > 0 else 0.0
        a = float(round(_log_uniform(rng, *a_range)))
        state = w * rng.choice((2.0, 4.0, 8.0, 16.0))  # weights, gradients, optimizer state
        tm: dict[str, list[dict[str, Any]]] = {}
        for t in degrees:
            if t > 1 and kind not in ("matmul", "attention"):
                continue
            scale = 1.0 if t == 1 else 1.05 / t
            sync = 0.0 if t == 1 else float(round(a * rng.uniform(0.1, 0.5)))
            vanilla = {"id": VANILLA, "timePerSample": p * scale, "parameterSize": float(round(w * scale)),
                       "memoryUsageA": float(round(a * scale)), "memoryUsageB": float(round(state * scale)),
                       "syncTimeFw": {str(u): sync for u in preds[v]}, "syncTimeBw": {str(x): sync for x in succs[v]}}
            lst = [vanilla]
            if a > 0:
                lst.append({**vanilla, "id": ACTIVATION_RECOMP,
                            "timePerSample": p * scale * rng.uniform(1.2, 1.4),
                            "memoryUsageA": float(round(a * scale / rng.uniform(3.0, 10.0))),
                            "syncTimeFw": dict(vanilla["syncTimeFw"]), "syncTimeBw": dict(vanilla["syncTimeBw"])})
            tm[str(t)] = lst
        nodes.append({"id": v, "name": f"{kind}{v}", "TMPCs": tm})
    raw = {
        "name": f"realmag-{shape}-n{n}-k{k}-seed{seed}",
        "maxDevices": k,
        "maxMemoryPerDevice": 1e12,
        "mbsInBatch": n_mb,
        "bandwidth": 1e10,
        "nodes": nodes,
        "edges": [{"sourceId": u, "destId": v, "communicationCost": comm[(u, v)]} for u, v in edges],
    }
    problem = problem_from_dict(raw)
    fitted = witness_memory(problem, seed, slack=(1.0, 1.3))
    if fitted is None:  # pragma: no cover - every operator has t = 1, so a witness exists
        raise ValueError(f"operator_graph_problem({seed}): no witness plan")
    return fitted


def identical_chain_problem(seed: int, *, n_inner: int = 4, head: int = 1, tail: int = 2,
                            devices: int = 4, microbatches: int = 4, memory: float = 0.6) -> Problem:
    """A chain of ``head`` + ``n_inner`` + ``tail`` layers whose ``n_inner`` inner layers are
    identical (one random TMPC list at t = 1 and 2, a vanilla and a recomputing TMPC, one edge
    cost between them), as a transformer's workload is; the end layers (an embedding, a head)
    are random. The memory limit is ``memory`` times the least memory of one stage holding every
    layer with y = N; for solver ``aggregate`` (docs/formulations.md §10) and the
    solvers it is cross-checked against (brute force needs at most 8 layers)."""
    rng = random.Random(seed)
    n = head + n_inner + tail

    def tmpcs() -> dict[int, list[dict[str, Any]]]:
        p, w, a, b = rng.randint(2, 9), rng.randint(0, 6), rng.randint(2, 6), rng.randint(1, 4)
        return {t: [{"id": VANILLA, "timePerSample": float(p) / t, "parameterSize": float(w) / t,
                     "memoryUsageA": float(a) / t, "memoryUsageB": float(b) / t},
                    {"id": ACTIVATION_RECOMP, "timePerSample": float(p + rng.randint(1, 3)) / t,
                     "parameterSize": float(w) / t, "memoryUsageA": 1.0 / t, "memoryUsageB": float(b) / t}]
                for t in (1, 2)}

    inner = tmpcs()
    specs = [tmpcs() for _ in range(head)] + [inner] * n_inner + [tmpcs() for _ in range(tail)]
    c_inner = float(rng.randint(0, 3))
    costs = [c_inner if head <= i < head + n_inner - 1 else float(rng.randint(0, 3)) for i in range(n - 1)]
    nodes = []
    for v, spec in enumerate(specs):
        per_t = {}
        for t, lst in spec.items():
            items = []
            for c in lst:
                item = dict(c)
                item["syncTimeFw"] = {str(v - 1): 1.0} if v > 0 else {}
                item["syncTimeBw"] = {str(v + 1): 0.0} if v < n - 1 else {}
                items.append(item)
            per_t[str(t)] = items
        nodes.append({"id": v, "name": f"layer{v}", "TMPCs": per_t})
    least = sum(min(c["memoryUsageA"] * microbatches + c["memoryUsageB"] for c in spec[1]) for spec in specs)
    raw = {"maxDevices": devices, "maxMemoryPerDevice": float(max(4, round(memory * least))), "bandwidth": 2.0,
           "mbsInBatch": microbatches, "nodes": nodes,
           "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": costs[i]} for i in range(n - 1)],
           "name": f"identical-chain-seed{seed}"}
    return problem_from_dict(raw)
