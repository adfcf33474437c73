"""Plan reconstruction: the stages behind a DP value."""

from __future__ import annotations

from ..plan import Plan, Stage
from ..problem import Problem
from ..result import SolverError
from .arrays import _Arrays
from .stage import _stage_choice
from .threshold import _Search, _test


def _reconstruct(problem: Problem, arr: _Arrays, search: _Search, idx: int, mode: int) -> tuple[Plan, float]:
    """The plan behind m(cands[idx]) (re-running that test to fill the choice tables)."""
    tb = search.tb
    T = float(search.cands[idx])
    _test(T, len(tb.ideals), tb.e_i, tb.e_j, tb.e_t, tb.e_d, tb.e_s0, tb.e_s1, tb.s_lo, tb.s_hi, tb.s_val,
          search.S, search.g, search.f_ent, search.best_s)
    ideals = tb.ideals
    words = ideals.words
    t_index = {int(t): i for i, t in enumerate(arr.ts)}
    stages: list[Stage] = []
    worst = 0.0
    cur = ideals.full
    s = int(search.best_s[cur, search.S])
    while cur != 0:
        e = int(search.f_ent[cur, s])
        if e < 0:
            raise SolverError(f"internal error: DP reconstruction lost its way at ideal {cur}, budget {s}")
        J, t, d = int(tb.e_j[e]), int(tb.e_t[e]), int(tb.e_d[e])
        y = -(-s // d)
        nodes, chosen, val = _stage_choice(
            words, cur, J, arr.n, t_index[t], d, y, arr.ds, problem.microbatches, arr.bw_edge,
            problem.memory_per_device, mode, arr.opt_start, arr.opt_cnt, arr.tp, arr.tw, arr.ta, arr.tb,
            arr.in_ptr, arr.in_src, arr.out_ptr, arr.out_dst, arr.inb_ptr, arr.inb, arr.outb_ptr, arr.outb, arr.rq, arr.pq, arr.c0, arr.rb, arr.sq)
        worst = max(worst, float(val))
        ids = tuple(problem.nodes[int(v)].id for v in nodes)
        names = {problem.nodes[int(v)].id: arr.labels[int(q)][2] for v, q in zip(nodes, chosen)}
        stages.append(Stage(ids, d, t, names))
        cur = J
        if cur != 0:
            s = int(search.best_s[cur, s - d])
    return Plan(tuple(stages)), worst
