"""The problem as flat arrays, and the bundles that the compiled kernels take (see :mod:`piper.dp`).

Every kernel argument that is more than a scalar is one of the NamedTuples below (numba
passes a NamedTuple of arrays as one struct): :class:`LayerArrays` (the layers, TMPCs and
edges of one run), :class:`Limits` (k, S, M), :class:`StageScratch` (work arrays for one
stage), and the engines' own bundles.  Units: times in the workload's time unit per sample,
memory in bytes, bandwidths in bytes/second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from piper.core.errors import SolverError
from piper.core.options import Candidates
from piper.core.problem import TMPC, Problem
from piper.dp.iteration import check_iteration_keys, iteration_active

BIG = np.int64(1) << np.int64(60)
#: table mode: achievable upper-bound values (greedy choices, galloping, shared across d)
HEUR = 2


class LayerArrays(NamedTuple):
    """Flat arrays describing the layers, their allowed TMPCs and edges (one kernel argument).

    Node positions follow ``problem.nodes``; ``ts`` are the allowed degrees t, ``ds`` the
    allowed degrees d (ascending); the allowed TMPCs of node v at degree ts[ti] are the flat
    indices ``opt_start[v, ti] .. opt_start[v, ti] + opt_cnt[v, ti] - 1``; per flat TMPC q:
    ``tp`` time per sample, ``tw`` parameter bytes, ``ta`` / ``tb`` memory a y + b (bytes).
    ``in_src[in_ptr[v]:in_ptr[v + 1]]`` are the sources of v's in-edges (file order),
    ``out_dst`` likewise; ``inb[inb_ptr[q] + j]`` = 2 (c + syncTimeFw) bytes of the j-th
    in-edge of q's node under TMPC q (likewise ``outb`` for out-edges and syncTimeBw).
    """

    n: int
    ts: np.ndarray
    ds: np.ndarray
    opt_start: np.ndarray
    opt_cnt: np.ndarray
    tp: np.ndarray
    tw: np.ndarray
    ta: np.ndarray
    tb: np.ndarray
    in_ptr: np.ndarray
    in_src: np.ndarray
    out_ptr: np.ndarray
    out_dst: np.ndarray
    inb_ptr: np.ndarray
    inb: np.ndarray
    outb_ptr: np.ndarray
    outb: np.ndarray
    #: per (TMPC, index of d in ds): f (d - 1) w / d / N (resync bytes), p / d, and the cost when
    #: no edge is cut, rq / B_resync + pq (docs/problem.md §2.2)
    rq: np.ndarray
    pq: np.ndarray
    c0: np.ndarray
    #: per (TMPC, index of d in ds): B_resync, bytes/s (B_in when t d <= G, else B); empty
    #: (:func:`absent_array`) when every B_resync == B_edge (always in version 1)
    rb: np.ndarray
    #: per (index of d in ds, TMPC): s / d, the sharded bytes each device holds; empty when no TMPC
    #: has sharded state.  An empty field sends the kernels to their version-1 loops
    #: (:func:`piper.dp.stage._absent`); it is an empty float64 array rather than None so that
    #: every run has the same numba type and each kernel compiles once
    sq: np.ndarray
    #: B_edge of this run, bytes/second: B_in for plans inside one node, else B
    bw_edge: float
    #: per flat TMPC: True when it has expert-parallelism terms (docs/problem.md §11), whose resync
    #: and memory (folded into ``rq``, ``c0`` and ``sq``) are not cost(1) / d + a constant.  Always
    #: an array (all False without the keys), so that it adds no compiled variant of the kernels
    xq: np.ndarray
    #: docs/problem.md §10 (:mod:`piper.dp.iteration`), present only when some TMPC has an iteration
    #: key: per (TMPC, index of d in ds) the resync time per sample R / B_resync (then ``rq`` is 0, so
    #: that option costs leave the resync out) and the step o + o_s / d (time units per iteration);
    #: per TMPC h (``ih``, time units per iteration); the microbatches N. Empty arrays otherwise
    ir: np.ndarray
    io: np.ndarray
    ih: np.ndarray
    n_mb: float


class Limits(NamedTuple):
    """The run's device count k, budget bound S = min(N, k) and memory per device M (bytes)."""

    devices: int
    budget: int
    memory: float


@dataclass(frozen=True)
class RunArrays:
    """The kernels' view of one run's problem, and the names behind its flat TMPC indices."""

    layers: LayerArrays
    #: flat index -> (node id, t, TMPC id)
    labels: tuple[tuple[int, int, str], ...]


def expert_terms_or_ban(c: TMPC, d: int, t: int, f: float, n_mb: int, memory: float) -> tuple[float, float]:
    """(resync bytes per sample, memory bytes) that TMPC ``c`` adds to a stage of degrees (d, t)
    (docs/problem.md §11: f (r - 1) w_x / (r N) and s_x / r, r = d t / (e e_t)); when rule 6 forbids
    it there (e e_t does not divide d t), no resync and the memory 2 M + 1 bytes (``memory`` = M):
    more than any device holds, so no knapsack, bound or memory test ever lets it fit (a finite
    number: the knapsacks' arithmetic needs no infinities)."""
    terms = c.expert_terms(d, t, f, n_mb)
    return (0.0, 2.0 * memory + 1.0) if terms is None else terms


def option_resync_memory(c: TMPC, d: int, t: int, f: float, n_mb: int, y: int, memory: float) -> tuple[float, float]:
    """(resync bytes per sample, memory bytes) of TMPC ``c`` in a stage of degrees (d, t) holding
    ``y`` micro-batches of activations: f (d - 1) w / (d N) and a y + b + s / d, plus the expert
    terms (:func:`expert_terms_or_ban`; ``memory`` = M, the device's memory)."""
    resync = f * (d - 1) * c.parameter_size / (d * n_mb)
    mem = c.memory_a * y + c.memory_b + c.memory_sharded / d
    if c.has_expert_terms:  # docs/problem.md §11; rule 6 as a memory no device holds
        resync_x, memory_x = expert_terms_or_ban(c, d, t, f, n_mb, memory)
        resync += resync_x
        mem += memory_x
    return resync, mem


def absent_array() -> np.ndarray:
    """The value of an optional 2-d field of :class:`LayerArrays` that is not needed: an empty
    C-contiguous float64 array (the same numba type as a present one, so no kernel compiles a
    second version for it)."""
    return np.zeros((0, 0), dtype=np.float64)


def limits_of(problem: Problem) -> Limits:
    """k, S = min(N, k) and M of ``problem``."""
    return Limits(problem.devices, min(problem.microbatches, problem.devices), float(problem.memory_cap))


def run_arrays(problem: Problem, cand: Candidates, bw_edge: float | None = None) -> RunArrays:
    """The flat arrays of ``problem`` under ``cand``; ``bw_edge`` = B_edge of the run in bytes/s
    (default B; docs/problem.md §2.2)."""
    pos = problem.index
    n = problem.n
    ts = np.array(cand.ts, dtype=np.int64)
    t_index = {t: i for i, t in enumerate(cand.ts)}
    in_lists = [[] for _ in range(n)]
    out_lists = [[] for _ in range(n)]
    for e in problem.edges:  # file order, like the reference's adjacency lists
        in_lists[pos[e.v]].append(e)
        out_lists[pos[e.u]].append(e)
    in_ptr = np.zeros(n + 1, dtype=np.int64)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        in_ptr[v + 1] = in_ptr[v] + len(in_lists[v])
        out_ptr[v + 1] = out_ptr[v] + len(out_lists[v])
    in_src = np.array([pos[e.u] for lst in in_lists for e in lst], dtype=np.int64)
    out_dst = np.array([pos[e.v] for lst in out_lists for e in lst], dtype=np.int64)
    opt_start = np.zeros((n, max(1, len(ts))), dtype=np.int64)
    opt_cnt = np.zeros((n, max(1, len(ts))), dtype=np.int64)
    tp, tw, ta, tb, tsh, tt, inb_ptr, outb_ptr = [], [], [], [], [], [], [], []
    experts: list[TMPC | None] = []  # the TMPC when it has expert terms (docs/problem.md §11)
    flat_tmpcs: list[TMPC] = []
    inb: list[float] = []
    outb: list[float] = []
    labels: list[tuple[int, int, str]] = []
    for v, nd in enumerate(problem.nodes):
        for t, lst in cand.tmpcs[nd.id].items():
            ti = t_index[t]
            opt_start[v, ti] = len(tp)
            opt_cnt[v, ti] = len(lst)
            for _, c in lst:
                tp.append(c.time_per_sample)
                tw.append(c.parameter_size)
                ta.append(c.memory_a)
                tb.append(c.memory_b)
                tsh.append(c.memory_sharded)
                tt.append(t)
                experts.append(c if c.has_expert_terms else None)
                flat_tmpcs.append(c)
                inb_ptr.append(len(inb))
                for e in in_lists[v]:
                    inb.append(2 * (e.communication_cost + c.sync_fw[e.u]))
                outb_ptr.append(len(outb))
                for e in out_lists[v]:
                    outb.append(2 * (e.communication_cost + c.sync_bw[e.v]))
                labels.append((nd.id, t, c.id))
    f64 = lambda x: np.array(x, dtype=np.float64)  # noqa: E731
    i64 = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    n_mb, bw = problem.microbatches, problem.bandwidth
    bw_edge = bw if bw_edge is None else float(bw_edge)
    bw_in, g_node, f = problem.bandwidth_intra, problem.node_size, problem.resync_factor
    ds = [int(d) for d in cand.ds]
    if ds != sorted(ds) or len(set(ds)) != len(ds):
        raise SolverError("internal error: the data-parallel degrees must be distinct and ascending")
    # the reference's expressions, evaluated in the same order (IEEE doubles, as compiled code);
    # version 2 (docs/problem.md §2.2): factor f (4 by default: 4.0 (d - 1) == 4 (d - 1) exactly),
    # resync at B_in when the stage fits in a node (t d <= G), else at B; s / d more memory
    rq = f64([[f * (d - 1) * w / d / n_mb for d in ds] for w in tw]).reshape(len(tw), len(ds))
    pq = f64([[p / d for d in ds] for p in tp]).reshape(len(tp), len(ds))
    rb = f64([[bw_in if t * d <= g_node else bw for d in ds] for t in tt]).reshape(len(tt), len(ds))
    sq = np.ascontiguousarray(f64([[x / d for x in tsh] for d in ds]).reshape(len(ds), len(tsh)))
    # expert parallelism (docs/problem.md §11): its resync bytes join rq, its memory sq; rule 6 is
    # a memory no stage can hold (:func:`expert_terms_or_ban`)
    for q, c in enumerate(experts):
        if c is None:
            continue
        for di, d in enumerate(ds):
            resync_x, memory_x = expert_terms_or_ban(c, d, tt[q], f, n_mb, problem.memory_cap)
            rq[q, di] += resync_x
            sq[di, q] += memory_x
    ir, io, ih = absent_array(), absent_array(), np.zeros(0, dtype=np.float64)
    if iteration_active(problem):
        # docs/problem.md §10: the options price no resync; each stage adds its exposed resync and step
        # (piper.dp.stage.stage_costs), fixed by its layers (piper.dp.iteration.check_iteration_keys)
        check_iteration_keys(problem, cand)
        ir = np.ascontiguousarray(rq / np.array([[bw_in if t * d <= g_node else bw for d in ds] for t in tt],
                                                dtype=np.float64).reshape(len(tt), len(ds)))
        io = np.ascontiguousarray(f64([[c.step_time + c.step_time_sharded / d for d in ds] for c in flat_tmpcs])
                                  .reshape(len(flat_tmpcs), len(ds)))
        ih = f64([c.resync_overlap_time for c in flat_tmpcs])
        rq = np.zeros_like(rq)
    c0 = f64([[rq[q, di] / (bw_in if t * d <= g_node else bw) + tp[q] / d for di, d in enumerate(ds)]
              for q, t in enumerate(tt)]).reshape(len(tp), len(ds))
    # empty = not needed (no sharded state / one bandwidth, as in version 1): the kernels then
    # run their version-1 loops (a present array is never empty: it has a row per TMPC, a column
    # per d, and an entry != 0 or != bw_edge)
    sq_opt = sq if bool(np.any(sq != 0)) else absent_array()
    xq = np.array([c is not None for c in experts], dtype=np.bool_)
    rb_opt = absent_array() if bool(np.all(rb == bw_edge)) else np.ascontiguousarray(rb)
    layers = LayerArrays(
        n=n, ts=ts, ds=np.array(cand.ds, dtype=np.int64), opt_start=opt_start, opt_cnt=opt_cnt,
        tp=f64(tp), tw=f64(tw), ta=f64(ta), tb=f64(tb), in_ptr=in_ptr, in_src=in_src, out_ptr=out_ptr,
        out_dst=out_dst, inb_ptr=i64(inb_ptr), inb=f64(inb), outb_ptr=i64(outb_ptr), outb=f64(outb), rq=rq, pq=pq,
        c0=c0, rb=rb_opt, sq=sq_opt, bw_edge=float(bw_edge), xq=xq, ir=ir, io=io, ih=ih, n_mb=float(n_mb),
    )
    return RunArrays(layers, tuple(labels))
