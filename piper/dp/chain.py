"""Chains of identical layers, detected from the numbers (never from names or kinds).

A workload is an *identical chain* when its graph is one path v_0 -> v_1 -> ... -> v_{n-1} and a
block of consecutive inner layers v_a .. v_{b-1} (b - a >= 2) is interchangeable: under the
solver's options every inner layer has the same allowed degrees and, at each, the same TMPC list
(time, parameter size, memory a, b and sharded s, and the expert keys e, e_t, w_x, s_x of
docs/problem.md §11, in list order), every edge between two inner
layers has the same cost and the same sync bytes (syncTimeBw of its tail, syncTimeFw of its head,
per TMPC), and the edges that enter v_a and leave v_{b-1} look the same from the inner side (cost
and the inner layer's sync bytes).  The layers before a and after b are the *ends* (an
embedding, a head); there may be none.

Then a stage, a chunk or a device group holding some inner layers costs the same whichever inner
layers they are: only how many it holds, and which of them sit at a cut (their sync bytes may
depend on the TMPC), matter.  :mod:`piper.dp.groups` uses this to search the plans of such a
chain by counts.  When the sync bytes of the inner layers do not depend on the TMPC
(``sync_free``; every workload of the model front end), not even the cuts matter beyond their
number.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from piper.core.errors import SolverError
from piper.core.options import Candidates
from piper.core.problem import TMPC, Problem
from piper.dp.iteration import check_iteration_keys

__all__ = ["MAX_ENDS", "RELAXED_FIELDS", "RELAXED_MAX_FIELDS", "IdenticalChain", "identical_chain", "pair_classes", "relaxed_chain",
           "segment_class"]

#: at most this many end layers (before and after the identical block together): the group
#: engine enumerates every way the chunk cuts fall among them (2 ** ends ways)
MAX_ENDS = 6


@dataclass(frozen=True)
class IdenticalChain:
    """Positions (indices into ``problem.nodes``) in chain order, and the identical block
    ``order[first:stop]``."""

    order: tuple[int, ...]
    first: int
    stop: int
    #: the inner layers' sync bytes do not depend on the TMPC
    sync_free: bool

    @property
    def n(self) -> int:
        return len(self.order)

    @property
    def inner(self) -> int:
        """How many identical layers."""
        return self.stop - self.first


def _path(problem: Problem) -> list[int] | None:
    """The node positions in path order, or None when the graph is not one path."""
    n = problem.n
    if len(problem.edges) != n - 1:
        return None
    pos = problem.index
    nxt = [-1] * n
    indeg = [0] * n
    for e in problem.edges:
        u, v = pos[e.u], pos[e.v]
        if nxt[u] >= 0:
            return None
        nxt[u] = v
        indeg[v] += 1
    if any(x > 1 for x in indeg):
        return None
    heads = [v for v in range(n) if indeg[v] == 0]
    if len(heads) != 1:
        return None
    order = [heads[0]]
    while nxt[order[-1]] >= 0:
        order.append(nxt[order[-1]])
    return order if len(order) == n else None


def identical_chain(problem: Problem, cand: Candidates) -> IdenticalChain | None:
    """The identical chain of ``problem`` under the allowed TMPCs ``cand`` (module docstring), or None."""
    order = _path(problem)
    if order is None or len(order) < 2:
        return None
    nodes = problem.nodes
    ids = [nodes[p].id for p in order]

    def core(i: int) -> tuple:
        per_t = cand.tmpcs[ids[i]]
        return tuple((t, tuple((c.time_per_sample, c.parameter_size, c.memory_a, c.memory_b, c.memory_sharded,
                                c.expert_parallel, c.expert_tensor_parallel, c.expert_parameter_size,
                                c.memory_sharded_expert, c.resync_overlap_time, c.step_time, c.step_time_sharded)
                               for _, c in per_t[t])) for t in sorted(per_t))

    def head_side(i: int) -> tuple:
        """The edge into order[i] as its head sees it: cost and its sync bytes per TMPC."""
        u, v = ids[i - 1], ids[i]
        cost = next(e.communication_cost for e in problem.in_edges[v])
        per_t = cand.tmpcs[v]
        return cost, tuple((t, tuple(c.sync_fw[u] for _, c in per_t[t])) for t in sorted(per_t))

    def tail_side(i: int) -> tuple:
        """The edge out of order[i] as its tail sees it."""
        u, v = ids[i], ids[i + 1]
        cost = next(e.communication_cost for e in problem.out_edges[u])
        per_t = cand.tmpcs[u]
        return cost, tuple((t, tuple(c.sync_bw[v] for _, c in per_t[t])) for t in sorted(per_t))

    n = len(order)
    cores = [core(i) for i in range(n)]
    best: tuple[int, int] | None = None
    i = 0
    while i < n - 1:
        j = i + 1
        if cores[j] != cores[i]:
            i = j
            continue
        edge = (tail_side(i), head_side(j))
        while j + 1 < n and cores[j + 1] == cores[i] and (tail_side(j), head_side(j + 1)) == edge:
            j += 1
        if best is None or j + 1 - i > best[1] - best[0]:
            best = (i, j + 1)
        i = j
    if best is None:
        return None
    a, b = best
    inner_in, inner_out = head_side(a + 1), tail_side(a)
    if a > 0 and head_side(a) != inner_in:
        a += 1
    if b < n and tail_side(b - 1) != inner_out:
        b -= 1
    if b - a < 2 or a + (n - b) > MAX_ENDS:
        return None
    sync_free = all(len(set(vals)) <= 1 for _, vals in inner_in[1]) and all(len(set(vals)) <= 1
                                                                         for _, vals in inner_out[1])
    return IdenticalChain(tuple(order), a, b, sync_free)


def segment_class(chain: IdenticalChain, p: int, q: int) -> tuple[int, int, int]:
    """A key shared by the segments [p, q) of chain positions whose stages cost the same: the
    segment's start and end, except that a start or end strictly inside the identical block is
    -1, and its count of identical layers."""
    a, b = chain.first, chain.stop
    start = p if p <= a or p >= b else -1
    stop = q if q <= a or q >= b else -1
    return start, stop, max(0, min(q, b) - max(p, a))


def pair_classes(chain: IdenticalChain, sizes: np.ndarray, ptr: np.ndarray, sub: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For the ideal pairs (I, J) of the chain (the sub-ideals of I: ``sub[ptr[I]:ptr[I + 1]]``;
    ideal sizes ``sizes``), the index of each pair's class and, per class, one pair of it (its
    position in the pair list): stage tables need only the representatives."""
    n = chain.n
    keys: dict[tuple[int, int, int], int] = {}
    reps: list[int] = []
    cls = np.empty(sub.shape[0], dtype=np.int64)
    for i in range(len(ptr) - 1):
        p = n - int(sizes[i])
        for r in range(int(ptr[i]), int(ptr[i + 1])):
            key = segment_class(chain, p, n - int(sizes[sub[r]]))
            if key not in keys:
                keys[key] = len(reps)
                reps.append(r)
            cls[r] = keys[key]
    return cls, np.array(reps, dtype=np.int64)


#: the TMPC numbers a relaxed chain takes the least of over its block: every plan's TPS, batch time
#: and memory are non-decreasing in each (docs/problem.md §4, §9.2, §10, §11), and none of them is a
#: structural key (the expert degrees e and e_t, which rule 6 tests, must be equal)
RELAXED_FIELDS = ("time_per_sample", "parameter_size", "memory_a", "memory_b", "memory_sharded",
                  "expert_parameter_size", "memory_sharded_expert", "step_time", "step_time_sharded")
#: the TMPC numbers a relaxed chain takes the largest of: every plan's TPS and batch time are
#: non-increasing in each (docs/problem.md §10: ``resyncOverlapTime`` hides more of the resync)
RELAXED_MAX_FIELDS = ("resync_overlap_time",)


def relaxed_chain(problem: Problem, cand: Candidates) -> tuple[Problem, Candidates, IdenticalChain] | None:
    """A relaxation of a chain whose inner layers differ only in their numbers (GPT-OSS's
    alternating sliding-window and full-attention layers): the longest run of consecutive layers
    with the same TMPC lists (ids, expert degrees, allowed choices), each layer's TMPC replaced by
    the least of each :data:`RELAXED_FIELDS` number (the largest of each :data:`RELAXED_MAX_FIELDS`
    number) and of its sync bytes over the run,
    and the edges inside the run by the least of their costs. Every plan of ``problem`` is a plan of
    the relaxation (the same stages and choices) at most as costly, so the relaxation's optimum, found
    exactly by counts (:mod:`piper.dp.groups`), bounds ``problem``'s from below. Returns the relaxed
    problem, its candidates and its identical chain; None when ``problem`` is no path, has no such
    run, or the relaxation is not an identical chain (too many end layers)."""
    order = _path(problem)
    if order is None or len(order) < 3:
        return None
    nodes = problem.nodes
    ids = [nodes[p].id for p in order]

    def shape(i: int) -> tuple:
        nd = nodes[order[i]]
        allowed = cand.tmpcs[nd.id]
        return tuple((t, tuple((c.id, c.expert_parallel, c.expert_tensor_parallel) for c in nd.tmpcs[t]),
                      tuple(k for k, _ in allowed.get(t, ()))) for t in sorted(nd.tmpcs))

    runs, at = [], 0  # (start, stop) of each run of equal shapes, in chain order
    for _, group in itertools.groupby(shape(i) for i in range(len(order))):
        size = sum(1 for _ in group)
        runs.append((at, at + size))
        at += size
    best = max((r for r in runs if r[1] - r[0] >= 2), key=lambda r: r[1] - r[0], default=None)  # the first longest
    if best is None:
        return None
    a, b = best
    run = [nodes[order[i]] for i in range(a, b)]
    inside = {(ids[i], ids[i + 1]) for i in range(a, b - 1)}
    least_cost = min(e.communication_cost for e in problem.edges if (e.u, e.v) in inside)

    def least(t: int, k: int, i: int) -> TMPC:
        """Run member i's TMPC k at t with the run's least numbers and sync bytes."""
        mine = run[i].tmpcs[t][k]
        others = [nd.tmpcs[t][k] for nd in run]
        changes = {f: min(getattr(c, f) for c in others) for f in RELAXED_FIELDS}
        changes.update({f: max(getattr(c, f) for c in others) for f in RELAXED_MAX_FIELDS})
        fw = min((x for c in others for x in c.sync_fw.values()), default=0.0)
        bw = min((x for c in others for x in c.sync_bw.values()), default=0.0)
        return replace(mine, sync_fw={u: min(x, fw) for u, x in mine.sync_fw.items()},
                       sync_bw={v: min(x, bw) for v, x in mine.sync_bw.items()}, **changes)

    relaxed_nodes = list(nodes)
    for i, nd in enumerate(run):
        relaxed_nodes[order[a + i]] = replace(nd, tmpcs={t: tuple(least(t, k, i) for k in range(len(lst)))
                                                        for t, lst in nd.tmpcs.items()})
    edges = tuple(replace(e, communication_cost=least_cost) if (e.u, e.v) in inside else e for e in problem.edges)
    relaxed = replace(problem, nodes=tuple(relaxed_nodes), edges=edges)
    by_id = relaxed.node_by_id
    tmpcs = {v: {t: tuple((k, by_id[v].tmpcs[t][k]) for k, _ in lst) for t, lst in per_t.items()}
             for v, per_t in cand.tmpcs.items()}
    rcand = replace(cand, tmpcs=tmpcs)
    chain = identical_chain(relaxed, rcand)
    if chain is None:
        return None
    try:  # the group engine's searches need a stage's value to grow with its layers (piper.dp.iteration)
        check_iteration_keys(relaxed, rcand)
    except SolverError:
        return None
    return relaxed, rcand, chain
