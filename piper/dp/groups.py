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
* a group's value curve (:func:`~piper.dp.group_kernels.group_points`: one per count of its
  one-layer chunks cut on both sides, in one call) gives, for each count c
  of identical layers, its least TPS (the exact multiple-choice knapsack over its layers), the tau
  of that choice and a lower bound on the tau of every choice that fits;
* a DP over the groups (:func:`~piper.dp.group_kernels.group_dp`) picks one count per group
  summing to the block's size, minimising max TPS_g or N max TPS_g + (sum tau_g - max tau_g) / v.

Every plan of the layout is one configuration plus one count per group (chunk sizes within a
group do not matter beyond the counts above), so the search is exact over the layout.  Layouts
are tried in the order of a lower bound on their value (T >= (W / d + R / B_resync) / L from the
least compute W and resync R of all layers at t, and BT >= N T + max(0, W - d T) / v since
tau_g <= d TPS_g); the search stops when the bound reaches the best plan found.  With the exact
knapsack a layout is also skipped when its memory floor (:func:`_memory_floor`: each group's
least TPS for c identical layers in memory M, relaxed) reaches the best plan found.  The batch time
is exact when every layer's TMPCs share one w (a group's least-TPS choice is then one of least
tau); otherwise the plan found is bounded from below by the DP with each group's least tau.

What does not depend on the layout is computed once: the configurations of L groups and v chunks
(kept across searches: the planner solves dozens of workloads of one chain), each kind of layer's
option rows but memory, rooms and curves per (t, d) and group shape (kept across the layouts of a
search), the points a configuration asks of a curve per t_max; a layout's configurations run in
one kernel call (:func:`~piper.dp.group_kernels.group_dp_rows`) with each curve computed at its
first configuration at that moment's t_max.  The same numbers, configurations, layouts and curves
in the same order as computing each where it is used (tests/dp/test_group_points.py,
tests/dp/test_search_rows.py, tests/dp/test_option_rows.py; docs/results/dp-speed.md,
DeepSeek-V3: every solve of four presets' searches replayed identical).  A layout skipped by its
memory floor computes no curves: a later layout with the same curve key computes them at its own
t_max instead of filtering the skipped layout's (the points at most t_max either way, a curve's
value being non-decreasing in its count, as the reuse of curves across layouts assumes).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from piper.core.options import Candidates
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.core.problem import Problem, overlap_window
from piper.dp.arrays import expert_terms_or_ban, option_resync_memory
from piper.dp.chain import IdenticalChain
from piper.dp.compile_clock import solve_clock
from piper.dp.group_kernels import group_choice, group_dp_rows, group_points
from piper.dp.knapsack import EXACT
from piper.dp.limits import past
from piper.dp.outcome import Outcome

__all__ = ["Layout", "layouts", "least_layout_bound", "solve_groups"]

#: relative slack on an upper bound before it prunes (other summation orders; piper.dp.limits.with_slack)
SLACK = 1e-9
#: cut patterns of a chunk's identical layers: a cut before and after, after only, before only, none
CUT_BOTH, CUT_AFTER, CUT_BEFORE, UNCUT = range(4)
#: rows of an option table (:func:`_options`): cost, tau, memory, resync bytes, h, step
ROWS = 6


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
    rows = _layout_rows(problem, cand, positions, kinds, batch)
    rows.sort()  # (lower, v, L, t, d) tells every layout apart: the order of sorting by it
    return [Layout(t, d, L, v, bw_edge, bw_resync, lower) for lower, v, L, t, d, bw_edge, bw_resync in rows]


def least_layout_bound(problem: Problem, cand: Candidates, positions: tuple[int, ...], kinds: tuple[int, ...],
                       batch: bool) -> float:
    """The least lower bound of :func:`layouts` (that of its first layout; +inf without one),
    without making the layouts."""
    return min((row[0] for row in _layout_rows(problem, cand, positions, kinds, batch)), default=math.inf)


def _layout_rows(problem: Problem, cand: Candidates, positions: tuple[int, ...], kinds: tuple[int, ...],
                 batch: bool) -> list[tuple]:
    """:func:`layouts`' layouts as (lower, v, L, t, d, bw_edge, bw_resync), in the order they are made."""
    n, k, n_mb = len(positions), problem.devices, problem.microbatches
    g_size = problem.node_size
    out = []
    ts = [t for t in cand.ts if all(t in cand.tmpcs[problem.nodes[p].id] for p in positions)]
    f = problem.resync_factor
    iteration = problem.has_iteration_keys
    for t in ts:
        w_sum, params = _least_work(problem, cand, positions, t)
        opts = [cand.tmpcs[problem.nodes[p].id][t] for p in positions]
        hide = sum(max(c.resync_overlap_time for _, c in lst) for lst in opts) if iteration else 0.0
        for d in cand.ds:
            if t * d > k:
                continue
            r_sum = f * (d - 1) * params / (d * n_mb)
            bw_resync = problem.bandwidth_intra if d * t <= g_size else problem.bandwidth
            plain_t = r_sum / bw_resync
            step = (sum(min(c.step_time + c.step_time_sharded / d for _, c in lst) for lst in opts)
                    if iteration else 0.0)
            for v in kinds:
                if v == 1:
                    top = min(n, n_mb // d, k // (d * t))
                    sizes = range(1, top + 1)
                else:
                    top = min(n // v, k // (d * t))
                    sizes = [L for L in range(2, top + 1) if (n_mb // d) % L == 0]
                for L in sizes:
                    resync_t = plain_t
                    if iteration:
                        # docs/problem.md §10: the groups' exposed resyncs sum to at least the whole
                        # graph's (max(0, .) is subadditive), and their steps to the graph's; each
                        # group hides its h times the layout's window (§10.1)
                        window = overlap_window(problem, L, v, d)
                        resync_t = max(0.0, n_mb * plain_t - hide * window) / n_mb + step / n_mb
                    bw_edge = problem.bandwidth_intra if L * d * t <= g_size else problem.bandwidth
                    t_low = (w_sum / d + resync_t) / L
                    lower = n_mb * t_low + max(0.0, w_sum - d * t_low) / v if batch else t_low
                    out.append((lower, v, L, t, d, bw_edge, bw_resync))
    return out


def configurations(chain: IdenticalChain, chunks: int) -> list[list[Chunk]]:
    """Every way ``chunks`` non-empty chunks can cover the chain, up to the sizes of the chunks
    of identical layers (module docstring)."""
    n, a, b = chain.n, chain.first, chain.stop
    inner_chunk = Chunk((), CUT_BOTH)  # a chunk of identical layers only, cut on both sides
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
                        cfg.extend([inner_chunk] * (middle - 1))  # one immutable chunk, shared
                        cfg.append(Chunk((), CUT_BOTH if cut_out else CUT_BEFORE, post))
                    cfg.extend(Chunk(tuple(range(ends[j], ends[j + 1])), None) for j in range(n_right))
                    out.append(cfg)
    return out


def group_shapes(chain: IdenticalChain, cfg: list[Chunk], groups: int) -> list[GroupShape]:
    """The :class:`GroupShape` of every group under the configuration ``cfg``."""
    return [GroupShape(ends, patterns) for ends, patterns in _shape_keys(chain.n, cfg, groups)]


def _shape_keys(n: int, cfg: list[Chunk], groups: int) -> list[tuple[tuple, tuple[int, int, int, int]]]:
    """(ends, patterns) of every group's :class:`GroupShape` under ``cfg`` on a chain of n layers:
    one pass over the chunks in order (chunk j on group j mod ``groups``), so each group's end
    layers come in chunk order."""
    ends: list[list[tuple[int, bool, bool]]] = [[] for _ in range(groups)]
    counts = [[0, 0, 0, 0] for _ in range(groups)]
    for j, ch in enumerate(cfg):
        g = j % groups
        if ch.pre or ch.post:
            first = ch.pre[0] if ch.pre else None
            last = ch.post[-1] if ch.post else (ch.pre[-1] if ch.pattern is None else None)
            ends[g].extend((p, p == first and p > 0, p == last and p < n - 1) for p in (*ch.pre, *ch.post))
        if ch.pattern is not None:
            counts[g][ch.pattern] += 1
    return [(tuple(e), (c[0], c[1], c[2], c[3])) for e, c in zip(ends, counts)]


@dataclass(frozen=True)
class _Config:
    """A configuration with what the search needs of it: its chunks, the shape of every group, the
    index of each group's shape in :attr:`_ConfigTable.shapes`, and each group's least count of
    identical layers (every chunk cut on both sides a single)."""

    chunks: list[Chunk]
    shapes: list[GroupShape]
    #: (shape index, group) of every group
    pairs: tuple[tuple[int, int], ...]
    least: tuple[int, ...]
    total_least: int
    #: whether each group holds a chunk of identical layers
    chunked: tuple[bool, ...]


@dataclass(frozen=True)
class _ConfigTable:
    """Every configuration of L groups and v chunks each (:func:`configurations`), and the distinct
    group shapes they use."""

    configs: tuple[_Config, ...]
    shapes: tuple[GroupShape, ...]
    #: the (shape index, group) pairs of the configurations whose least counts fit in the chain
    #: (the others are never searched), and per such configuration its pairs' indices in that
    #: list, each group's least count and whether it holds identical layers (arrays, one row each)
    pairs: tuple[tuple[int, int], ...] = ()
    live: tuple[int, ...] = ()
    pair_index: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    least: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    chunked: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.bool_))


@functools.lru_cache(maxsize=512)
def _config_table(n: int, first: int, stop: int, groups: int, v: int) -> _ConfigTable:
    """The configurations of a chain of n layers with the identical block first .. stop - 1 on
    ``groups`` groups of ``v`` chunks; they depend on nothing else, so they are kept across
    searches (the planner solves dozens of workloads of one chain)."""
    chain = IdenticalChain(tuple(range(n)), first, stop, False)
    # each distinct shape once (by its fields): its index, the shape, its least count, whether it has chunks
    ids: dict[tuple, tuple[int, GroupShape, int, bool]] = {}
    out = []
    for cfg in configurations(chain, groups * v):
        known = []
        for key in _shape_keys(n, cfg, groups):
            got = ids.get(key)
            if got is None:
                sh = GroupShape(*key)
                got = ids[key] = (len(ids), sh, sh.least(sh.patterns[0]), sh.chunks > 0)
            known.append(got)
        least = tuple(k[2] for k in known)
        out.append(_Config(cfg, [k[1] for k in known], tuple((k[0], g) for g, k in enumerate(known)), least,
                           sum(least), tuple(k[3] for k in known)))
    live = tuple(j for j, conf in enumerate(out) if conf.total_least <= stop - first)
    index: dict[tuple[int, int], int] = {}
    rows = [[index.setdefault(pair, len(index)) for pair in out[j].pairs] for j in live]
    return _ConfigTable(tuple(out), tuple(k[1] for k in ids.values()), tuple(index), live,
                        np.array(rows, dtype=np.int64).reshape(len(live), groups),
                        np.array([out[j].least for j in live], dtype=np.int64).reshape(len(live), groups),
                        np.array([out[j].chunked for j in live], dtype=np.bool_).reshape(len(live), groups))


class _Items:
    """A group's knapsack items at one layout and y: per item its options' cost (TPS share, time
    per sample), tau (time units per microbatch) and memory (bytes), flat with offsets; fixed
    items first (end layers, then identical layers at a cut), then ``mids`` identical layers
    without a cut.  ``rows[i]`` = (chain position of an end layer or -1, role: 0 end layer,
    1 identical layer cut on both sides, 2 cut before it, 3 cut after it, 4 no cut).
    ``memo`` caches each kind of layer's option arrays (per t, d and bandwidths, across layouts)."""

    def __init__(self, problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                 shape: GroupShape, singles: int, mids: int, memo: dict) -> None:
        io, o, i, _ = shape.patterns
        # runs of items of one kind, in item order: (kind, how many, role)
        runs: list[tuple[tuple[int, bool, bool], int, int]] = [((p, cut_in, cut_out), 1, 0)
                                                               for p, cut_in, cut_out in shape.ends]
        runs += [((-1, True, True), singles, 1), ((-1, True, False), io - singles + i, 2),
                 ((-1, False, True), io - singles + o, 3)]
        self.n_fixed = sum(count for _, count, _ in runs)
        runs.append(((-1, False, False), mids, 4))
        self.rows: list[tuple[int, int]] = []
        blocks = []
        sizes = []
        shared = True
        for kind, count, role in runs:
            self.rows.extend([(kind[0] if role == 0 else -1, role)] * count)
            if not count and role != 4:
                continue  # no such layer (the middle layers' array counts even when there are none)
            arr, same = _kind_arrays(problem, chain, cand, lay, y, kind, memo)
            shared = shared and same
            if count:
                blocks.append(arr if count == 1 else np.tile(arr, (1, count)))
                sizes += [arr.shape[1]] * count
        self.off = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.off[1:])
        table = np.concatenate(blocks, axis=1) if blocks else np.zeros((4, 0))
        self.cost, self.tau, self.mem = (np.ascontiguousarray(table[r]) for r in range(3))
        self.shared = shared


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
    iteration = problem.has_iteration_keys
    heads, tails = cand.tmpcs[head][t], cand.tmpcs[tail][t]
    out = []
    for idx, (_, c) in enumerate(cand.tmpcs[own][t]):
        edge = 0.0
        if in_edge is not None:
            edge += 2.0 * (in_edge.communication_cost + heads[idx][1].sync_fw[in_edge.u])
        if out_edge is not None:
            edge += 2.0 * (out_edge.communication_cost + tails[idx][1].sync_bw[out_edge.v])
        resync, memory = option_resync_memory(c, d, t, f, n_mb, y, problem.memory_cap)
        if iteration:  # docs/problem.md §10: the group adds its exposed resync and step (group_points)
            cost = edge / (d * lay.bw_edge) + c.time_per_sample / d
        else:
            cost = edge / (d * lay.bw_edge) + resync / lay.bw_resync + c.time_per_sample / d
        # row 3: the resync bytes, equal over a layer's options exactly when its least-TPS choice is a
        # least-tau one; rows 4, 5: h and the step o + o_s / d (docs/problem.md §10)
        out.append((cost, c.time_per_sample + edge / lay.bw_edge, memory, resync, c.resync_overlap_time,
                    c.step_time + c.step_time_sharded / d))
    return np.array(out, dtype=np.float64).T.reshape(ROWS, len(out))


class _OptionParts:
    """:func:`_options` of one kind of layer at one layout, apart from y: every row but the memory,
    and the memory's terms, so that :meth:`at` computes the memory row of each y with numpy, in
    the same operations and order as :func:`_options` (a y + b + s / d, then the expert memory
    where the TMPC has expert terms): the same numbers."""

    __slots__ = ("a", "b", "has_x", "rows", "s_d", "x")

    def __init__(self, rows: np.ndarray, a: np.ndarray, b: np.ndarray, s_d: np.ndarray, x: np.ndarray,
                 has_x: np.ndarray) -> None:
        self.rows, self.a, self.b, self.s_d, self.x, self.has_x = rows, a, b, s_d, x, has_x

    def memory(self, y: float) -> np.ndarray:
        """The memory row at y (bytes per option)."""
        memory = self.a * y
        memory += self.b
        memory += self.s_d
        return np.where(self.has_x, memory + self.x, memory)

    def at(self, y: float) -> np.ndarray:
        out = self.rows.copy()
        out[2] = self.memory(y)
        return out

    @staticmethod
    def side_by_side(parts: list[_OptionParts | None]) -> _OptionParts | None:
        """The parts of several kinds of layer, their options side by side (columns in order):
        each option's numbers are computed on its own, so :meth:`memory` gives, option for option,
        what each kind's own gives. None when some kind has none (:func:`_option_parts`)."""
        if not parts or any(p is None for p in parts):
            return None
        return _OptionParts(*(np.concatenate([getattr(p, f) for p in parts], axis=-1)
                              for f in ("rows", "a", "b", "s_d", "x", "has_x")))


def _option_parts(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, pos: int, cut_in: bool,
                  cut_out: bool) -> _OptionParts | None:
    """The y-free parts of :func:`_options` (its arguments less y), or None when some memory term is
    not a float (then :func:`_options` computes each y itself: Python's int arithmetic differs)."""
    order, nodes = chain.order, problem.nodes
    own = nodes[order[pos if pos >= 0 else chain.first]].id
    d, t = lay.d, lay.t
    opts = [c for _, c in cand.tmpcs[own][t]]
    if not all(type(c.memory_a) is float and type(c.memory_b) is float and type(c.memory_sharded) is float
               for c in opts):
        return None
    rows = _options(problem, chain, cand, lay, 1.0, pos, cut_in, cut_out)
    f, n_mb, memory = problem.resync_factor, problem.microbatches, problem.memory_cap
    x = [expert_terms_or_ban(c, d, t, f, n_mb, memory)[1] if c.has_expert_terms else 0.0 for c in opts]
    return _OptionParts(rows, np.array([c.memory_a for c in opts], dtype=np.float64),
                        np.array([c.memory_b for c in opts], dtype=np.float64),
                        np.array([c.memory_sharded / d for c in opts], dtype=np.float64),
                        np.array(x, dtype=np.float64), np.array([c.has_expert_terms for c in opts], dtype=np.bool_))


class _Points:
    """The points of one group: count of identical layers, value (time per sample), tau and a lower
    bound on tau (time units), and the one-layer chunks cut on both sides."""

    __slots__ = ("c", "c_max", "k", "k_max", "low", "singles", "tau")

    def __init__(self, c: np.ndarray, k: np.ndarray, tau: np.ndarray, low: np.ndarray, singles: np.ndarray) -> None:
        self.c, self.k, self.tau, self.low, self.singles = c, k, tau, low, singles
        self.c_max = int(c.max()) if c.shape[0] else 0
        self.k_max = float(k.max()) if c.shape[0] else 0.0

    def within(self, c_hi: int, t_max: float) -> _Points:
        """The points with at most c_hi layers and value at most t_max."""
        if self.c.shape[0] == 0 or (self.c_max <= c_hi and self.k_max <= t_max):
            return self
        keep = (self.c <= c_hi) & (self.k <= t_max)
        return _Points(self.c[keep], self.k[keep], self.tau[keep], self.low[keep], self.singles[keep])


def _kind_arrays(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                 kind: tuple[int, bool, bool], memo: dict) -> tuple[np.ndarray, bool]:
    """:func:`_options` of one kind of layer (chain position or -1, cuts) at y, and whether its
    options share one resync; kept in ``memo`` (one per t, d and bandwidths)."""
    key = (kind, y, type(y))
    got = memo.get(key)
    if got is None:
        parts = memo.get(kind)
        if parts is None:
            parts = memo[kind] = _option_parts(problem, chain, cand, lay, *kind)
        arr = _options(problem, chain, cand, lay, y, *kind) if parts is None else parts.at(y)
        got = memo[key] = (arr, bool(np.all(arr[3] == arr[3, 0])))
    return got


def _end_arrays(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                ends: tuple[tuple[int, bool, bool], ...], memo: dict) -> tuple:
    """The options of a group's end layers, flat (offsets, cost, tau, memory), and whether each end
    layer's options share one resync."""
    key = ("ends", ends, y, type(y))
    got = memo.get(key)
    if got is None:
        fixed = _fixed_rows(problem, chain, cand, lay, ends, memo)
        if fixed is not None:  # every row but the memory is the same at every y
            off, cost, tau, same, parts = fixed
            got = memo[key] = (off, cost, tau, parts.memory(y), all(same))
            return got
        arrays = [_kind_arrays(problem, chain, cand, lay, y, end, memo) for end in ends]
        off = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum([a.shape[1] for a, _ in arrays], out=off[1:])
        table = np.concatenate([a for a, _ in arrays], axis=1) if arrays else np.zeros((4, 0))
        got = memo[key] = (off, *(np.ascontiguousarray(table[r]) for r in range(3)), all(sh for _, sh in arrays))
    return got


#: the kinds of an identical layer: cut on both sides, before only, after only, neither
_IDENTICAL_KINDS = ((-1, True, True), (-1, True, False), (-1, False, True), (-1, False, False))


def _fixed_rows(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout,
                kinds: tuple[tuple[int, bool, bool], ...], memo: dict) -> tuple | None:
    """What :func:`_kind_arrays` gives for the layers ``kinds`` at every y but the memory, their
    options side by side: (offsets, cost, tau, per kind whether its options share one resync (the
    resync does not depend on y), their :class:`_OptionParts` side by side for the memory at a y); kept in
    ``memo``. None when there are no kinds or some kind's memory terms are not floats (then each y
    is computed on its own)."""
    key = ("fixed", kinds)
    if key in memo:
        return memo[key]
    parts = []
    for kind in kinds:
        if kind not in memo:
            memo[kind] = _option_parts(problem, chain, cand, lay, *kind)
        parts.append(memo[kind])
    joined = _OptionParts.side_by_side(parts)
    got = None
    if joined is not None:
        off = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([p.rows.shape[1] for p in parts], out=off[1:])
        same = [bool(np.all(p.rows[3] == p.rows[3, 0])) for p in parts]
        got = (off, np.ascontiguousarray(joined.rows[0]), np.ascontiguousarray(joined.rows[1]), same, joined)
    memo[key] = got
    return got


def _identical_arrays(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                      memo: dict) -> tuple:
    """The options of an identical layer cut on both sides, before only, after only, neither (rows):
    cost, tau, memory, and whether each kind's options share one resync."""
    key = ("identical", y, type(y))
    got = memo.get(key)
    if got is None:
        fixed = _fixed_rows(problem, chain, cand, lay, _IDENTICAL_KINDS, memo)
        if fixed is not None:  # every row but the memory is the same at every y
            off, cost, tau, same, parts = fixed
            q = int(off[1])  # the four kinds are one layer's options
            got = memo[key] = (cost.reshape(4, q), tau.reshape(4, q), parts.memory(y).reshape(4, q),
                               np.array(same, dtype=np.bool_))
            return got
        arrays = [_kind_arrays(problem, chain, cand, lay, y, kind, memo) for kind in _IDENTICAL_KINDS]
        got = memo[key] = (*(np.ascontiguousarray(np.stack([a[r] for a, _ in arrays])) for r in range(3)),
                           np.array([sh for _, sh in arrays], dtype=np.bool_))
    return got


def _group_curves(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                  shape: GroupShape, room: int, c_hi: int, t_max: float, mode: int, cache: dict,
                  memo: dict) -> tuple[_Points, bool, float, int]:
    """The group's points up to ``room`` identical layers and value <= ``t_max`` (filter them with
    :meth:`_Points.within`); whether its layers' TMPCs share one w each (then tau is exact); and the
    t_max and room they were computed for.  Curves are kept (``cache``) for the other
    configurations of the layout and the other layouts of the same (t, d)."""
    key = _curve_key(shape, y, lay, mode, problem)
    hit = cache.get(key)
    if hit is not None and hit[2] >= t_max and hit[3] >= c_hi:
        return hit
    e_off, e_cost, e_tau, e_mem, e_shared = _end_arrays(problem, chain, cand, lay, y, shape.ends, memo)
    k_cost, k_tau, k_mem, k_shared = _identical_arrays(problem, chain, cand, lay, y, memo)
    io, n_o, n_i, n_none = shape.patterns
    e_it, k_it = _iteration_sums(problem, chain, cand, lay, y, shape, memo)
    c, k, tau, low, singles, shared = group_points(e_off, e_cost, e_tau, e_mem, e_shared, k_cost, k_tau, k_mem,
                                                   k_shared, io, n_o, n_i, n_none, room, chain.sync_free,
                                                   problem.memory_cap, t_max, mode, e_it, k_it,
                                                   float(problem.microbatches))
    pts = _Points(c, k, tau, low, singles)
    shared = bool(shared)
    entry = cache[key] = (pts, shared, t_max, room)
    return entry


def _iteration_sums(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float,
                    shape: GroupShape, memo: dict) -> tuple[np.ndarray, np.ndarray]:
    """docs/problem.md §10 (:func:`~piper.dp.group_kernels.group_curve`): (resync time per sample, h
    times the layout's window of §10.1, step) summed over the group's end layers, and of one
    identical layer, each layer's from its first
    option (every option of a layer has the same: :func:`piper.dp.iteration.check_iteration_keys`);
    two empty arrays when the workload has no §10 key."""
    if not problem.has_iteration_keys:
        return np.empty(0), np.empty(0)

    window = overlap_window(problem, lay.groups, lay.v, lay.d)  # docs/problem.md §10.1

    def terms(kind: tuple[int, bool, bool]) -> np.ndarray:
        arr, _ = _kind_arrays(problem, chain, cand, lay, y, kind, memo)
        return np.array([arr[3, 0] / lay.bw_resync, arr[4, 0] * window, arr[5, 0]])

    ends = np.zeros(3)
    for end in shape.ends:
        ends = ends + terms(end)
    return ends, terms((-1, False, False))


def _room(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, y: float, shape: GroupShape,
          memo: dict | None = None) -> int:
    """A count of identical layers no plan of the layout can exceed on this group (every layer at
    its least memory, with one layer's margin for rounding); -1 when its end layers alone do not fit.
    ``memo`` keeps each layer's least memory (per y, d and t)."""
    d, t, memory = lay.d, lay.t, problem.memory_cap
    memo = {} if memo is None else memo

    def least(p: int) -> float:
        key = (p, y, type(y), d, t)
        got = memo.get(key)
        if got is None:
            f, n_mb = problem.resync_factor, problem.microbatches
            got = memo[key] = min(c.memory_a * y + c.memory_b + c.memory_sharded / d
                                  + (expert_terms_or_ban(c, d, t, f, n_mb, memory)[1] if c.has_expert_terms else 0.0)
                                  for _, c in cand.tmpcs[problem.nodes[chain.order[p]].id][t])
        return got

    fixed = sum(least(p) for p, _, _ in shape.ends)
    if fixed > memory * (1 + 1e-12):
        return -1
    per = least(chain.first)
    if per <= 0:
        return chain.inner
    return min(chain.inner, int((memory - fixed) / per) + 1)


def _solve_layout(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, mode: int, batch: bool,
                  search: _Search, cache: dict, memos: dict, rooms: dict) -> None:
    """The best plan of one layout below ``search.best``; updates ``search`` (best plan, lower bound).
    ``cache`` (group curves), ``memos`` (option arrays) and ``rooms`` are kept across the layouts
    of one search."""
    n_mb = problem.microbatches
    L, v = lay.groups, lay.v
    table = _config_table(chain.n, chain.first, chain.stop, L, v)
    ys = [lay.y(g, n_mb) for g in range(L)]
    memo = memos.setdefault((lay.t, lay.d, lay.bw_edge, lay.bw_resync), {})
    least_memory = rooms.setdefault("least", {})
    inner = chain.inner
    # every live configuration's rooms, at once: which fit in memory, and each group's c_hi
    room_of = []
    for sid, g in table.pairs:
        sh = table.shapes[sid]
        key = (sh.ends, ys[g], type(ys[g]), lay.t, lay.d)
        r = rooms.get(key)
        if r is None:
            r = rooms[key] = _room(problem, chain, cand, lay, ys[g], sh, least_memory)
        room_of.append(r)
    room = np.array(room_of, dtype=np.int64)[table.pair_index] if room_of else table.least.copy()
    fits = (room >= table.least).all(axis=1) & (room.sum(axis=1) >= inner)
    spare = inner - table.least.sum(axis=1)
    c_his = np.where(table.chunked, np.minimum(room, table.least + spare[:, None]), 0)
    rooms_passed = np.where(table.chunked, room, 0)
    rows = np.flatnonzero(fits)
    if rows.shape[0] == 0:
        return
    _search_rows(problem, chain, cand, lay, mode, batch, search, cache, memo, table, ys, rows,
                 c_his[rows], rooms_passed[rows])


def _curve_key(shape: GroupShape, y: float, lay: Layout, mode: int, problem: Problem) -> tuple:
    """The key of a group's curves in the search's ``cache`` (:func:`_group_curves`); the window of
    docs/problem.md §10.1 scales the group's h, so it is part of the key."""
    return (shape, y, lay.t, lay.d, lay.bw_edge, lay.bw_resync, mode,
            overlap_window(problem, lay.groups, lay.v, lay.d))


def _search_rows(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, mode: int, batch: bool,
                 search: _Search, cache: dict, memo: dict, table: _ConfigTable, ys: list, rows: np.ndarray,
                 c_his: np.ndarray, rooms_passed: np.ndarray) -> None:
    """The group DP of every configuration of a layout that fits (``rows``: indices into
    ``table.live``; per row and group its c_hi and the room its curves are computed for), in order,
    below ``search.best``: each group's curves computed at its first row (row by row, group by group)
    at the t_max of that moment, each row's points those curves' points with at most c_hi layers and
    value at most t_max (:meth:`_Points.within`), and the rows' DPs run by one kernel call
    (:func:`~piper.dp.group_kernels.group_dp_rows`) until a row improves the best plan.

    The curves of the pairs first met after the current row are computed ahead, at the current
    t_max; when a row improves the plan (t_max falls), those are taken back (the search's cache
    restored) and computed again at the new t_max, so that every curve is computed exactly where
    and as the row-by-row search computes it."""
    n_mb, L, v, inner = problem.microbatches, lay.groups, lay.v, chain.inner
    pair_ids = table.pair_index[rows]
    span = inner + 1
    keys, key_of = np.unique(pair_ids * span + c_his, return_inverse=True)
    row_keys = np.ascontiguousarray(key_of.reshape(pair_ids.shape), dtype=np.int64)
    key_pair, key_hi = (keys // span).tolist(), (keys % span).tolist()
    # each pair at its first row (row-major: rows in order, groups in order)
    flat = pair_ids.ravel()
    pairs, first = np.unique(flat, return_index=True)
    by_first = np.argsort(first, kind="stable")
    order = pairs[by_first].tolist()
    first_row = (first[by_first] // L).tolist()
    first_hi = c_his.ravel()[first[by_first]].tolist()
    first_room = rooms_passed.ravel()[first[by_first]].tolist()
    curves: dict[int, tuple] = {}  # pair index -> _group_curves's answer
    done = 0  # pairs of ``order`` computed
    start = 0  # next row
    while start < rows.shape[0]:
        cap = search.best * (1 + SLACK) if math.isfinite(search.best) else math.inf
        t_max = cap / n_mb if batch else cap
        ahead = done
        undo: list[tuple[tuple, tuple | None]] = []
        for i in range(done, len(order)):
            sid, g = table.pairs[order[i]]
            shape = table.shapes[sid]
            ckey = _curve_key(shape, ys[g], lay, mode, problem)
            undo.append((ckey, cache.get(ckey)))
            curves[order[i]] = _group_curves(problem, chain, cand, lay, ys[g], shape, first_room[i], first_hi[i],
                                             t_max, mode, cache, memo)
        done = len(order)
        kept = [curves[pair][0].within(hi, t_max) for pair, hi in zip(key_pair, key_hi)]
        exact = np.array([curves[pair][1] for pair in key_pair], dtype=np.bool_)
        want_low = mode == EXACT and batch
        row, value, chosen, low, dps = group_dp_rows(
            *_flat_points(kept), row_keys, exact[row_keys].all(axis=1), start, L, inner,
            float(n_mb), float(v), cap, search.best, batch, want_low)
        search.stats["group_dps"] = search.stats.get("group_dps", 0) + int(dps)
        if want_low:
            search.lower = min(search.lower, float(low))
        if row < 0:
            return
        conf = table.configs[table.live[rows[row]]]
        points = [kept[u] for u in row_keys[row].tolist()]
        search.best = float(value)
        search.plan = build_plan(problem, chain, cand, lay, conf.chunks, conf.shapes, ys, points,
                                 [int(x) for x in chosen], mode, memo)
        # the curves of pairs first met after this row: computed again at the new t_max
        back = next((i for i in range(ahead, done) if first_row[i] > row), done)
        _restore(cache, undo[back - ahead:])
        for i in range(back, done):
            del curves[order[i]]
        done = back
        start = int(row) + 1


def _flat_points(kept: list[_Points]) -> tuple[np.ndarray, ...]:
    """The points of every key, flat for :func:`~piper.dp.group_kernels.group_dp_rows`: key u's
    at ptr[u] .. ptr[u + 1] - 1 of counts, values, tau and tau bounds."""
    ptr = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum([pts.c.shape[0] for pts in kept], out=ptr[1:])
    return (ptr, *(np.concatenate([getattr(pts, f) for pts in kept]) for f in ("c", "k", "tau", "low")))


def _restore(cache: dict, undo: list[tuple[tuple, tuple | None]]) -> None:
    """Put back the entries ``undo`` recorded (key, entry before; None: absent), last first."""
    for key, before in reversed(undo):
        if before is None:
            cache.pop(key, None)
        else:
            cache[key] = before


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
        choice = group_choice(items.off, items.cost, items.mem, items.n_fixed, mids, problem.memory_cap, mode)
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


#: relative margin below which a layout's memory floor must reach the best value before the layout
#: is skipped: many times the float error of the floor's few operations (the floor is a bound in
#: exact arithmetic; the search's own values carry their summation's rounding)
FLOOR_MARGIN = 1e-7


def _least_cost_at(cost: np.ndarray, mem: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """Per budget b (bytes): the least average cost (time per sample) of any mix of the options
    (cost, mem) with average memory at most b: the linear relaxation of a layer's choice, as the
    least over the options that fit and over every two options i, j with mem_i <= b < mem_j mixed
    to average memory b (an optimum of the relaxation mixes at most two). +inf where none fits.
    ``mem`` may hold several rows (one per y): then one row of answers per row."""
    if mem.ndim == 1:
        return _least_cost_at(cost, mem[None, :], budgets)[0]
    b = budgets[None, None, None, :]
    m_i, m_j = mem[:, :, None, None], mem[:, None, :, None]
    fits = mem[:, :, None] <= budgets[None, None, :]
    single = np.where(fits, cost[None, :, None], np.inf).min(axis=1, initial=np.inf)
    between = (m_i <= b) & (b < m_j)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = (m_j - b) / (m_j - m_i)  # of option i in the mix (used only where mem_i <= b < mem_j)
        mixed = share * cost[None, :, None, None] + (1.0 - share) * cost[None, None, :, None]
    pairs = np.where(between, mixed, np.inf).min(axis=(1, 2), initial=np.inf)
    return np.minimum(single, pairs)


def _group_floors(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, ys: list,
                  memo: dict) -> list[np.ndarray]:
    """Per y of ``ys``, per count c = 0 .. inner of identical layers: a lower bound on the TPS share
    (time per sample) of a group with y microbatches in flight that holds c identical layers,
    whatever else it holds: c times the least average cost of c identical layers without cuts in
    memory M (each layer's least-memory relaxation, :func:`_least_cost_at`; a cut or an end layer
    only adds cost and memory), then the least over every larger count (so that the floor does
    not decrease with c). +inf where c such layers do not fit. Kept in ``memo`` per y; the y not
    there yet computed together."""
    missing = list(dict.fromkeys((y, type(y)) for y in ys if ("floor", y, type(y)) not in memo))
    if missing:
        rows = [_kind_arrays(problem, chain, cand, lay, y, (-1, False, False), memo)[0] for y, _ in missing]
        cost, mems = rows[0][0], np.stack([arr[2] for arr in rows])
        counts = np.arange(1, chain.inner + 1, dtype=np.float64)
        # a little more memory than M: the search checks its float sums against M
        budgets = problem.memory_per_device * (1.0 + 1e-9) / counts
        floors = np.zeros((len(missing), chain.inner + 1))
        if np.isfinite(cost).all() and np.isfinite(mems).all():  # else no floor (zeros): never wrong
            floors[:, 1:] = counts * _least_cost_at(cost, mems, budgets)
        floors = np.minimum.accumulate(floors[:, ::-1], axis=1)[:, ::-1]
        for (y, kind), floor in zip(missing, floors):
            memo["floor", y, kind] = np.ascontiguousarray(floor)
    return [memo["floor", y, type(y)] for y in ys]


def _memory_floor(problem: Problem, chain: IdenticalChain, cand: Candidates, lay: Layout, w_sum: float,
                  batch: bool, memo: dict) -> float:
    """A lower bound on the value of every plan of the layout (its objective's units), from memory:
    the largest group's TPS is at least the least T such that the groups' floors
    (:func:`_group_floors`) let them hold the inner layers between them at most T each, and the
    batch time at least N T + max(0, W - d T) / v for any T at most the largest TPS (W: the least
    compute ``w_sum``; the layout bound's formula, non-decreasing in T since N >= d). The DP's
    tau-bound objective (the search's lower bound) is bounded the same way. +inf when no counts
    fit."""
    n_mb, inner = problem.microbatches, chain.inner
    floors = np.array(_group_floors(problem, chain, cand, lay, [lay.y(g, n_mb) for g in range(lay.groups)], memo))
    values = np.unique(floors)
    values = values[np.isfinite(values)]
    # per candidate T: the most identical layers the groups hold at most T each (each floor does
    # not decrease with the count: the count of its entries <= T, less one for count 0)
    held = sum(np.searchsorted(f, values, side="right") for f in floors) - lay.groups
    enough = np.flatnonzero(held >= inner)
    if enough.shape[0] == 0:
        return math.inf
    lo = int(enough[0])
    t_floor = float(values[lo])
    return n_mb * t_floor + max(0.0, w_sum - lay.d * t_floor) / lay.v if batch else t_floor


def solve_groups(problem: Problem, chain: IdenticalChain, cand: Candidates, kinds: tuple[int, ...], batch: bool,
                 mode: int, ub: float = math.inf, deadline: float | None = None) -> Outcome:
    """The best uniform plan with v in ``kinds`` (1: 1F1B, >= 2: interleaved) below ``ub`` (a known
    plan's value; inf: none), for the TPS (``batch`` False) or the batch time.  ``value`` is the
    search's own number for the plan and ``lower`` a bound on every plan with v in ``kinds``."""
    t0 = solve_clock()
    search = _Search(best=ub)
    cache: dict = {}
    memos: dict = {}
    rooms: dict = {}
    lays = layouts(problem, cand, chain.order, kinds, batch)
    tried = floored = 0
    least_work: dict[int, float] = {}
    for lay in lays:
        if lay.lower >= search.best:
            search.lower = min(search.lower, lay.lower)
            break
        if past(deadline):
            search.complete = False
            break
        if mode == EXACT and math.isfinite(search.best):
            # skip a layout whose every plan is at least the best value: it would change nothing
            # (no plan below the best, and its tau-bound DPs would not lower the bound below it)
            if lay.t not in least_work:
                least_work[lay.t] = _least_work(problem, cand, chain.order, lay.t)[0]
            memo = memos.setdefault((lay.t, lay.d, lay.bw_edge, lay.bw_resync), {})
            if _memory_floor(problem, chain, cand, lay, least_work[lay.t], batch, memo) * (1 - FLOOR_MARGIN) \
                    >= search.best:
                floored += 1
                continue
        _solve_layout(problem, chain, cand, lay, mode, batch, search, cache, memos, rooms)
        tried += 1
    stats = {"layouts": len(lays), "layouts_tried": tried, "layouts_floored": floored, "groups_s": solve_clock() - t0,
             "group_dps": search.stats.get("group_dps", 0)}
    if mode != EXACT or not search.complete:
        lower = 0.0 if search.plan is not None or not search.complete or math.isfinite(ub) else math.inf
        if mode != EXACT and search.complete and search.plan is None and math.isinf(ub):
            lower = math.inf  # the greedy knapsack's "no choice fits" is a proof
        return Outcome(search.plan, search.best if search.plan is not None else math.inf, lower, search.complete,
                       stats)
    lower = min(search.lower, search.best)
    return Outcome(search.plan, search.best if search.plan is not None else math.inf, lower, True, stats)
