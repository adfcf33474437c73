"""Uniform plans of an identical chain (:mod:`piper.dp.chain`), by counts: 1F1B (v = 1) and
Megatron-LM's interleaved schedule (v >= 2 chunks per device group), for both objectives.

A *layout* fixes (t, d), the number of device groups L and v (docs/problem.md §9.2, rule 5:
L >= 2, m = N / d a multiple of L and L v <= n when v >= 2; L d <= N when v = 1; L d t <= k).
Chunk j (in pipeline order) runs on group j mod L (for v = 1 a chunk is a stage and a group its
device group).  Per group g, with y_g its microbatches in flight (1F1B: L - g; interleaved:
min(m, (2 (L - g - 1) + (v - 1) L + 1) / v)), tau_g = sum over its chunks of P_j + X_j / B_edge,
TPS_g = sum_j (X_j / (d B_edge) + P_j / d) + R_g / B_resync and memory sum (a y_g + b + s / d).

On an identical chain a group's numbers depend only on which end layers it holds (with their
cuts), how many identical layers it holds, and how many of its chunks hold identical layers
with each cut pattern (a cut before the chunk, after it, both, none) and how many of them hold
exactly one (a layer with both cuts; this matters only when the sync bytes depend on the TMPC).
So for one layout:

* a *configuration* says where the cuts among the end layers fall (2 ** ends ways); it fixes
  every chunk's end layers and cut pattern, and how many chunks hold identical layers;
* a group's value curve (:func:`~piper.dp.group_kernels.group_curve`) gives, for each count c
  of identical layers, its least TPS (the exact multiple-choice knapsack over its layers), the tau
  of that choice and a lower bound on the tau of every choice that fits;
* a DP over the groups (:func:`~piper.dp.group_kernels.group_dp`) picks one count per group
  summing to the block's size, minimising max TPS_g or N max TPS_g + (sum tau_g - max tau_g) / v.

Every plan of the layout is one configuration plus one count per group (chunk sizes within a
group do not matter beyond the counts above), so the search is exact over the layout.  Layouts
are tried in the order of a lower bound on their value (T >= (W / d + R / B_resync) / L from the
least compute W and resync R of all layers at t, and BT >= N T + max(0, W - d T) / v since
tau_g <= d TPS_g); the search stops when the bound reaches the best plan found.  The batch time
is exact when every layer's TMPCs share one w (a group's least-TPS choice is then one of least
tau); otherwise the plan found is bounded from below by the DP with each group's least tau.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from piper.core.options import Candidates
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.core.problem import Problem
from piper.dp.chain import IdenticalChain
from piper.dp.compile_clock import solve_clock
from piper.dp.group_kernels import group_choice, group_curve, group_dp
from piper.dp.knapsack import EXACT
from piper.dp.outcome import Outcome

__all__ = ["Layout", "layouts", "solve_groups"]

#: relative slack on an upper bound before it prunes (other summation orders; piper.dp.limits.with_slack)
SLACK = 1e-9
#: cut patterns of a chunk's identical layers: a cut before and after, after only, before only, none
CUT_BOTH, CUT_AFTER, CUT_BEFORE, UNCUT = range(4)


@dataclass(frozen=True)
class Layout:
    """One (t, d, L, v); ``lower`` bounds the objective of its every plan from below."""

    t: int
    d: int
    groups: int
    v: int
    bw_edge: float
    bw_resync: float
    lower: float

    def y(self, g: int, n_mb: int) -> int | float:
        """Microbatches in flight on group g (the evaluator's expression)."""
        if self.v == 1:
            return self.groups - g
        m = n_mb // self.d
        return min(m, (2 * (self.groups - g - 1) + (self.v - 1) * self.groups + 1) / self.v)


@dataclass(frozen=True)
class Chunk:
    """A chunk of a configuration: end layers before its identical layers, the cut pattern of its
    identical layers (None: it holds none), end layers after them (chain positions)."""

    pre: tuple[int, ...]
    pattern: int | None
    post: tuple[int, ...] = ()


@dataclass(frozen=True)
class GroupShape:
    """What a configuration puts on one group: its end layers (chain position, cut before, cut
    after) and how many of its chunks hold identical layers, per cut pattern."""

    ends: tuple[tuple[int, bool, bool], ...]
    patterns: tuple[int, int, int, int]

    @property
    def chunks(self) -> int:
        return sum(self.patterns)

    def least(self, singles: int) -> int:
        """The fewest identical layers with ``singles`` one-layer chunks cut on both sides."""
        io, o, i, n = self.patterns
        return singles + 2 * (io - singles) + o + i + n

    def roomy(self, singles: int) -> bool:
        """Whether a chunk can take more layers than :meth:`least` (one that is not a single)."""
        io, o, i, n = self.patterns
        return (io - singles) + o + i + n > 0


@dataclass
class _Search:
    """The state of one search: the best plan and the bound so far."""

    best: float
    plan: Plan | None = None
    lower: float = math.inf
    complete: bool = True
    stats: dict = field(default_factory=dict)


def _least_work(problem: Problem, cand: Candidates, positions: tuple[int, ...], t: int) -> tuple[float, float]:
    """(W, w): the least compute p and the least parameter bytes w summed over the layers at
    ``positions`` at degree t (the least resync bytes at d are f (d - 1) w / (d N))."""
    p_sum = w_sum = 0.0
    for p in positions:
        opts = cand.tmpcs[problem.nodes[p].id][t]
        p_sum += min(c.time_per_sample for _, c in opts)
        w_sum += min(c.parameter_size for _, c in opts)
    return p_sum, w_sum


def layouts(problem: Problem, cand: Candidates, positions: tuple[int, ...], kinds: tuple[int, ...],
            batch: bool) -> list[Layout]:
    """Every uniform layout of the layers at ``positions`` (all of the graph's) that the options
    allow (v in ``kinds``), by ascending lower bound; the bound holds for any graph."""
    n, k, n_mb = len(positions), problem.devices, problem.microbatches
    g_size = problem.node_size
    out = []
    ts = [t for t in cand.ts if all(t in cand.tmpcs[problem.nodes[p].id] for p in positions)]
    f = problem.resync_factor
    for t in ts:
        w_sum, params = _least_work(problem, cand, positions, t)
        for d in cand.ds:
            if t * d > k:
                continue
            r_sum = f * (d - 1) * params / (d * n_mb)
            bw_resync = problem.bandwidth_intra if d * t <= g_size else problem.bandwidth
            for v in kinds:
                if v == 1:
                    top = min(n, n_mb // d, k // (d * t))
                    sizes = range(1, top + 1)
                else:
                    top = min(n // v, k // (d * t))
                    sizes = [L for L in range(2, top + 1) if (n_mb // d) % L == 0]
                for L in sizes:
                    bw_edge = problem.bandwidth_intra if L * d * t <= g_size else problem.bandwidth
                    t_low = (w_sum / d + r_sum / bw_resync) / L
                    lower = n_mb * t_low + max(0.0, w_sum - d * t_low) / v if batch else t_low
                    out.append(Layout(t, d, L, v, bw_edge, bw_resync, lower))
    out.sort(key=lambda lay: (lay.lower, lay.v, lay.groups, lay.t, lay.d))
    return out


def configurations(chain: IdenticalChain, chunks: int) -> list[list[Chunk]]:
    """Every way ``chunks`` non-empty chunks can cover the chain, up to the sizes of the chunks
    of identical layers (module docstring)."""
    n, a, b = chain.n, chain.first, chain.stop
    out = []
    for n_left in range(a + 1):
        for left in itertools.combinations(range(1, a + 1), n_left):
            for n_right in range(n - b + 1):
                for right in itertools.combinations(range(b, n), n_right):
                    middle = chunks - 1 - n_left - n_right
                    if middle < 0 or middle > chain.inner - 1:
                        continue
                    starts = (0, *left)
                    cfg = [Chunk(tuple(range(starts[j], starts[j + 1])), None) for j in range(n_left)]
                    p_a = starts[-1]
                    ends = (*right, n)
                    q_b = ends[0]
                    pre = tuple(range(p_a, a))
                    post = tuple(range(b, q_b))
                    cut_in = p_a == a and a > 0
                    cut_out = q_b == b and b < n
                    if middle == 0:
                        pattern = (CUT_BOTH if cut_in and cut_out else CUT_BEFORE if cut_in else
                                   CUT_AFTER if cut_out else UNCUT)
                        cfg.append(Chunk(pre, pattern, post))
                    else:
                        cfg.append(Chunk(pre, CUT_BOTH if cut_in else CUT_AFTER))
                        cfg.extend(Chunk((), CUT_BOTH) for _ in range(middle - 1))
                        cfg.append(Chunk((), CUT_BOTH if cut_out else CUT_BEFORE, post))
                    cfg.extend(Chunk(tuple(range(ends[j], ends[j + 1])), None) for j in range(n_right))
                    out.append(cfg)
    return out


def group_shapes(chain: IdenticalChain, cfg: list[Chunk], groups: int) -> list[GroupShape]:
    """The :class:`GroupShape` of every group under the configuration ``cfg``."""
    n = chain.n
    out = []
    for g in range(groups):
        ends: list[tuple[int, bool, bool]] = []
        counts = [0, 0, 0, 0]
        for ch in cfg[g::groups]:
            first = ch.pre[0] if ch.pre else None
            last = ch.post[-1] if ch.post else (ch.pre[-1] if ch.pattern is None else None)
            for p in (*ch.pre, *ch.post):
                ends.append((p, p == first and p > 0, p == last and p < n - 1))
            if ch.pattern is not None:
                counts[ch.pattern] += 1
        out.append(GroupShape(tuple(ends), (counts[0], counts[1], counts[2], counts[3])))
    return out


class _Items:
    """A group's knapsack items at one layout and y: per item its options' cost (TPS share, time
    per sample), tau (time units per microbatch) and memory (bytes), flat with offsets; fixed
    items first (end layers, then identical layers at a cut), then ``mids`` identical layers
    without a cut.  ``rows[i]`` = (chain position of an end layer or -1, role: 0 end layer,
    1 identical layer cut on both sides, 2 cut before it, 3 cut after it, 4 no cut).
    ``memo`` caches each kind of layer's option arrays across groups of one layout and y."""

    def __init__(self, problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                 shape: GroupShape, singles: int, mids: int, memo: dict) -> None:
        kinds: list[tuple[int, bool, bool]] = []
        self.rows: list[tuple[int, int]] = []
        for p, cut_in, cut_out in shape.ends:
            kinds.append((p, cut_in, cut_out))
            self.rows.append((p, 0))
        io, o, i, _ = shape.patterns
        for role, count, cut_in, cut_out in ((1, singles, True, True), (2, io - singles + i, True, False),
                                             (3, io - singles + o, False, True)):
            kinds.extend([(-1, cut_in, cut_out)] * count)
            self.rows.extend([(-1, role)] * count)
        self.n_fixed = len(self.rows)
        self.rows.extend([(-1, 4)] * mids)
        arrays = []
        for kind in kinds:
            key = (kind, y)
            if key not in memo:
                memo[key] = _options(problem, chain, cand, lay, y, *kind)
            arrays.append(memo[key])
        key = ((-1, False, False), y)
        if key not in memo:
            memo[key] = _options(problem, chain, cand, lay, y, -1, False, False)
        mid = memo[key]
        sizes = [a.shape[1] for a in arrays] + [mid.shape[1]] * mids
        self.off = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.off[1:])
        table = np.concatenate([*arrays, np.tile(mid, (1, mids))], axis=1) if arrays or mids else np.zeros((4, 0))
        self.cost, self.tau, self.mem = (np.ascontiguousarray(table[r]) for r in range(3))
        self.shared = all(np.all(a[3] == a[3, 0]) for a in (*arrays, mid))


def _options(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float, pos: int,
             cut_in: bool, cut_out: bool) -> np.ndarray:
    """Rows cost, tau, memory, w of every allowed TMPC (columns, in list order) of the end layer at
    chain position ``pos`` (or of an identical layer, ``pos`` = -1) with those cuts
    (docs/problem.md §9.2).  An identical layer's cuts are the block's inner edges: the edge into
    its second layer and the edge out of its first (the same for every identical layer,
    :mod:`piper.dp.chain`)."""
    order, nodes = chain.order, problem.nodes
    if pos >= 0:
        own = head = tail = nodes[order[pos]].id
    else:
        own = tail = nodes[order[chain.first]].id
        head = nodes[order[chain.first + 1]].id
    d, t = lay.d, lay.t
    in_edge = problem.in_edges[head][0] if cut_in else None
    out_edge = problem.out_edges[tail][0] if cut_out else None
    f, n_mb = problem.resync_factor, problem.microbatches
    heads, tails = cand.tmpcs[head][t], cand.tmpcs[tail][t]
    out = []
    for idx, (_, c) in enumerate(cand.tmpcs[own][t]):
        edge = 0.0
        if in_edge is not None:
            edge += 2.0 * (in_edge.communication_cost + heads[idx][1].sync_fw[in_edge.u])
        if out_edge is not None:
            edge += 2.0 * (out_edge.communication_cost + tails[idx][1].sync_bw[out_edge.v])
        resync = f * (d - 1) * c.parameter_size / (d * n_mb)
        cost = edge / (d * lay.bw_edge) + resync / lay.bw_resync + c.time_per_sample / d
        out.append((cost, c.time_per_sample + edge / lay.bw_edge,
                    c.memory_a * y + c.memory_b + c.memory_sharded / d, c.parameter_size))
    return np.array(out, dtype=np.float64).T.reshape(4, len(out))


@dataclass(frozen=True)
class _Points:
    """The points of one group: count of identical layers, value (time per sample), tau and a lower
    bound on tau (time units), and the one-layer chunks cut on both sides."""

    c: np.ndarray
    k: np.ndarray
    tau: np.ndarray
    low: np.ndarray
    singles: np.ndarray

    def within(self, c_hi: int, t_max: float) -> _Points:
        """The points with at most c_hi layers and value at most t_max."""
        if self.c.shape[0] == 0 or (int(self.c.max()) <= c_hi and float(self.k.max()) <= t_max):
            return self
        keep = (self.c <= c_hi) & (self.k <= t_max)
        return _Points(self.c[keep], self.k[keep], self.tau[keep], self.low[keep], self.singles[keep])


def _curve(items: _Items, base: int, m_lo: int, m_hi: int, t_max: float, mode: int, memory: float,
           singles: int) -> tuple[np.ndarray, ...]:
    """The group's points for m_lo .. m_hi middle layers (count base + m), up to the first that
    does not fit or exceeds t_max."""
    n = m_hi - m_lo + 1
    out_k, out_tau, out_low = np.empty(n), np.empty(n), np.empty(n)
    group_curve(items.off, items.cost, items.mem, items.tau, items.n_fixed, m_lo, m_hi, memory, t_max, mode,
                items.shared, out_k, out_tau, out_low)
    ok = int(np.argmax(np.isinf(out_k))) if bool(np.isinf(out_k).any()) else n
    return (np.arange(base + m_lo, base + m_lo + ok, dtype=np.int64), out_k[:ok], out_tau[:ok], out_low[:ok],
            np.full(ok, singles, dtype=np.int64))


def _group_points(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                  shape: GroupShape, room: int, c_hi: int, t_max: float, mode: int, cache: dict,
                  memo: dict) -> tuple[_Points, bool]:
    """The group's points with at most ``c_hi`` identical layers and value <= ``t_max``; and whether
    its layers' TMPCs share one w each (then tau is exact).  Curves are computed up to ``room``
    layers and kept (``cache``) for the other configurations of the layout."""
    key = (shape, y, lay.t, lay.d, lay.bw_edge, lay.bw_resync, mode)
    hit = cache.get(key)
    if hit is not None and hit[2] >= t_max and hit[3] >= c_hi:
        return hit[0].within(c_hi, t_max), hit[1]
    parts = []
    shared = True
    memory = problem.memory_per_device
    io, n_none = shape.patterns[0], shape.patterns[3]
    for singles in range(io + 1):
        least = shape.least(singles)
        if least > room:
            continue
        top = room if shape.roomy(singles) else least
        if chain.sync_free and singles > 0:
            top = least  # with TMPC-free sync bytes the singles matter only below least(0)
        extra = top - least
        items = _Items(problem, chain, cand, lay, y, shape, singles, n_none + extra, memo)
        shared = shared and items.shared
        parts.append(_curve(items, least - n_none, n_none, n_none + extra, t_max, mode, memory, singles))
    if parts:
        pts = _Points(*(np.concatenate([p[j] for p in parts]) for j in range(5)))
    else:
        pts = _Points(*(np.zeros(0, dtype=x) for x in (np.int64, float, float, float, np.int64)))
    cache[key] = (pts, shared, t_max, room)
    return pts.within(c_hi, t_max), shared


def _room(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float, shape: GroupShape) -> int:
    """A count of identical layers no plan of the layout can exceed on this group (every layer at
    its least memory, with one layer's margin for rounding); -1 when its end layers alone do not fit."""
    d, t, memory = lay.d, lay.t, problem.memory_per_device

    def least(p: int) -> float:
        return min(c.memory_a * y + c.memory_b + c.memory_sharded / d
                   for _, c in cand.tmpcs[problem.nodes[chain.order[p]].id][t])

    fixed = sum(least(p) for p, _, _ in shape.ends)
    if fixed > memory * (1 + 1e-12):
        return -1
    per = least(chain.first)
    if per <= 0:
        return chain.inner
    return min(chain.inner, int((memory - fixed) / per) + 1)


def _solve_layout(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, mode: int, batch: bool,
                  search: _Search, cache: dict, configs: dict) -> None:
    """The best plan of one layout below ``search.best``; updates ``search`` (best plan, lower bound)."""
    n_mb = problem.microbatches
    L, v = lay.groups, lay.v
    key = (L, v)
    if key not in configs:
        configs[key] = [(cfg, group_shapes(chain, cfg, L)) for cfg in configurations(chain, L * v)]
    ys = [lay.y(g, n_mb) for g in range(L)]
    memo: dict = {}
    rooms: dict = {}
    for cfg, shapes in configs[key]:
        cap = search.best * (1 + SLACK) if math.isfinite(search.best) else math.inf
        t_max = cap / n_mb if batch else cap
        least = [sh.least(sh.patterns[0]) for sh in shapes]
        if sum(least) > chain.inner:
            continue
        room = []
        for g, sh in enumerate(shapes):
            if (sh, ys[g]) not in rooms:
                rooms[sh, ys[g]] = _room(problem, chain, cand, lay, ys[g], sh)
            room.append(rooms[sh, ys[g]])
        if any(r < lo for r, lo in zip(room, least)) or sum(room) < chain.inner:
            continue  # no plan of this configuration fits in memory
        spare = chain.inner - sum(least)
        points: list[_Points] = []
        exact_tau = True
        for g, sh in enumerate(shapes):
            c_hi = min(room[g], least[g] + spare) if sh.chunks else 0
            pts, shared = _group_points(problem, chain, cand, lay, ys[g], sh, room[g] if sh.chunks else 0, c_hi,
                                        t_max, mode, cache, memo)
            exact_tau = exact_tau and shared
            points.append(pts)
        if any(p.c.shape[0] == 0 for p in points):
            continue  # no plan at most ``cap``
        ptr = np.zeros(L + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([p.c.shape[0] for p in points])
        p_c = np.concatenate([p.c for p in points])
        p_k = np.concatenate([p.k for p in points])
        p_tau = np.concatenate([p.tau for p in points])
        value, picks = group_dp(ptr, p_c, p_k, p_tau, L, chain.inner, float(n_mb), float(v), cap, batch)
        search.stats["group_dps"] = search.stats.get("group_dps", 0) + 1
        if picks.shape[0] and value < search.best:
            chosen = [int(picks[g]) - int(ptr[g]) for g in range(L)]
            search.best = float(value)
            search.plan = build_plan(problem, chain, cand, lay, cfg, shapes, ys, points, chosen, mode, memo)
        if mode == EXACT and batch and not exact_tau:
            p_low = np.concatenate([p.low for p in points])
            low, _ = group_dp(ptr, p_c, p_k, p_low, L, chain.inner, float(n_mb), float(v), cap, batch)
            search.lower = min(search.lower, float(low))


def build_plan(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, cfg: list[Chunk],
               shapes: list[GroupShape], ys: list[float], points: list[_Points], chosen: list[int],
               mode: int, memo: dict) -> Plan:
    """The plan of a configuration with one point per group: chunk sizes (singles first, the spare
    layers to the group's first chunk that is not a single), then each group's knapsack choice laid
    onto its layers (identical layers by role, in any order: they are interchangeable)."""
    L, t = lay.groups, lay.t
    nodes = problem.nodes
    sizes: dict[int, int] = {}
    index_of: dict[int, int] = {}  # end layer's chain position -> index in its allowed TMPC list
    by_role: dict[int, dict[int, list[int]]] = {}
    for g in range(L):
        pts, r = points[g], chosen[g]
        c, singles = int(pts.c[r]), int(pts.singles[r])
        sh = shapes[g]
        spare = c - sh.least(singles)
        seen = 0
        for j in range(g, len(cfg), L):
            pattern = cfg[j].pattern
            if pattern is None:
                continue
            if pattern == CUT_BOTH and seen < singles:
                sizes[j] = 1
                seen += 1
            else:
                sizes[j] = (2 if pattern == CUT_BOTH else 1) + spare
                spare = 0
        mids = c - sh.least(singles) + sh.patterns[3]
        items = _Items(problem, chain, cand, lay, ys[g], sh, singles, mids, memo)
        choice = group_choice(items.off, items.cost, items.mem, items.n_fixed, mids, problem.memory_per_device, mode)
        roles: dict[int, list[int]] = {1: [], 2: [], 3: [], 4: []}
        for item, ((pos, role), opt) in enumerate(zip(items.rows, choice)):
            idx = int(opt) - int(items.off[item])
            if pos >= 0:
                index_of[pos] = idx
            else:
                roles[role].append(idx)
        by_role[g] = roles
    stages = []
    at = chain.first
    for j, ch in enumerate(cfg):
        positions = list(ch.pre)
        if ch.pattern is not None:
            size = sizes[j]
            cut_in, cut_out = ch.pattern in (CUT_BOTH, CUT_BEFORE), ch.pattern in (CUT_BOTH, CUT_AFTER)
            for r in range(size):
                first, last = r == 0 and cut_in, r == size - 1 and cut_out
                role = 1 if first and last else 2 if first else 3 if last else 4
                index_of[at + r] = by_role[j % L][role].pop()
            positions += range(at, at + size)
            at += size
        positions += ch.post
        ids = [nodes[chain.order[p]].id for p in positions]
        names = {v: cand.tmpcs[v][t][index_of[p]][1].id for v, p in zip(ids, positions)}
        stages.append(Stage(tuple(ids), lay.d, t, names))
    return Plan(tuple(stages), Schedule() if lay.v == 1 else Schedule(INTERLEAVED, lay.v))


def solve_groups(problem: Problem, chain: IdenticalChain, cand: Candidates, kinds: tuple[int, ...], batch: bool,
                 mode: int, ub: float = math.inf, deadline: float | None = None) -> Outcome:
    """The best uniform plan with v in ``kinds`` (1: 1F1B, >= 2: interleaved) below ``ub`` (a known
    plan's value; inf: none), for the TPS (``batch`` False) or the batch time.  ``value`` is the
    search's own number for the plan and ``lower`` a bound on every plan with v in ``kinds``."""
    t0 = solve_clock()
    search = _Search(best=ub)
    cache: dict = {}
    configs: dict = {}
    lays = layouts(problem, cand, chain.order, kinds, batch)
    tried = 0
    for lay in lays:
        if lay.lower >= search.best:
            search.lower = min(search.lower, lay.lower)
            break
        if deadline is not None and solve_clock() > deadline:
            search.complete = False
            break
        _solve_layout(problem, chain, cand, lay, mode, batch, search, cache, configs)
        tried += 1
    stats = {"layouts": len(lays), "layouts_tried": tried, "groups_s": solve_clock() - t0,
             "group_dps": search.stats.get("group_dps", 0)}
    if mode != EXACT or not search.complete:
        lower = 0.0 if search.plan is not None or not search.complete or math.isfinite(ub) else math.inf
        if mode != EXACT and search.complete and search.plan is None and math.isinf(ub):
            lower = math.inf  # the greedy knapsack's "no choice fits" is a proof
        return Outcome(search.plan, search.best if search.plan is not None else math.inf, lower, search.complete,
                       stats)
    lower = min(search.lower, search.best)
    return Outcome(search.plan, search.best if search.plan is not None else math.inf, lower, True, stats)
