"""The aggregated CP-SAT model of one part of the plan space (docs/formulations.md §11.3).

Slots j = 1..J are the stages counted from the back (slot 1 is the last stage), so that a
uniform part has y_j = j exactly. Per slot: ``used``, the option ``z`` (t, d), integer counts
``n`` of the inner layers on each inner choice, and for each end node a one-hot placement
``x`` over (slot, choice). The inner layers fill a contiguous run of slots (``inb``, with
``top`` and ``bot`` its first and last slot); cut edges are charged per slot by reified rows
(a chain stage has at most one cut edge in and one out); the first and last inner layer of a
slot (``fi``, ``la``) are chosen explicitly only when the inner TMPCs' sync bytes differ.
Times are integers in a unit u (the objective's precision, tolerance stated by
:meth:`AggregateModel.epsilon`), memory is exact (rationals scaled to integers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from baselines.aggregate.chain import Chain
from baselines.aggregate.data import Choice, Space
from piper.core.options import BATCH_TIME

__all__ = ["MEMORY_GRID_BITS", "Y_ROWS_MAX", "AggregateModel", "SlotValue", "memory_integers"]

#: free parts: one memory row per value of y (else a product A y) when S = min(N, k) is at most this
Y_ROWS_MAX = 64
#: memory that cannot be scaled to exact integers of at most 2^53 is rounded onto a grid of
#: M / 2^this: the coefficients down, the limit exactly 2^this, so that every plan within the
#: limit stays within it in integers (a relaxation: bounds and refutations stay proofs; a plan
#: the model accepts may be out of memory by less than a grid step per term, which the
#: evaluator then finds, and that part is left unproven)
MEMORY_GRID_BITS = 40


def memory_integers(values: list[Fraction], limit: Fraction, headroom: int = 1) -> tuple[list[int], int, bool]:
    """Integers for the memory coefficients ``values`` and the limit: exact (times the common
    denominator, divided by the gcd) when the limit times ``headroom`` stays below 2^62 and
    the limit below 2^53; else rounded down onto a grid (``exact`` False; still a relaxation,
    :data:`MEMORY_GRID_BITS`). Returns (ints, limit, exact)."""
    allv = [*values, limit]
    den = 1
    for x in allv:
        den = den * x.denominator // math.gcd(den, x.denominator)
    ints = [int(x * den) for x in allv]
    g = 0
    for i in ints:
        g = math.gcd(g, i)
    g = g or 1
    ints = [i // g for i in ints]
    if ints[-1] < 2**53 and ints[-1] * headroom < 2**62:
        return ints[:-1], ints[-1], True
    unit = limit / 2**MEMORY_GRID_BITS
    return [math.floor(x / unit) for x in values], 2**MEMORY_GRID_BITS, False


@dataclass(frozen=True)
class SlotValue:
    """One used slot of a solution: its option, the end nodes it holds (chain position ->
    choice), its inner layers (choice index -> count) and the choices of its first and last
    inner layer (None: any order)."""

    option: int
    ends: dict[int, Choice]
    counts: dict[int, int]
    first: int | None
    last: int | None


class AggregateModel:
    """The CP-SAT model of one :class:`Space` (module docstring).

    ``unit``: time units per integer; ``cutoff``: the objective (integer) may not exceed it
    (None: no cutoff). The stage rows hold N TPS_j for the batch-time objective (so its
    rounding is not multiplied by N) and TPS_j for tps.
    """

    def __init__(self, n_mb: int, limit: float, chain: Chain, space: Space, inner: list[Choice],
                 ends: dict[int, list[Choice]], objective: str, unit: float, cutoff: int | None) -> None:
        self.chain, self.space, self.inner, self.end_choices = chain, space, inner, ends
        self.objective, self.unit, self.n_mb = objective, unit, n_mb
        self.batch = objective == BATCH_TIME
        self.sigma = n_mb if self.batch else 1
        m = self.model = cp_model.CpModel()
        J = space.slots
        self.J = J
        slots = range(1, J + 1)
        n_in = chain.n_inner
        d_of = [d for _, d in space.options]
        bw = space.bw_edge

        def q(x: float) -> int:
            return round(x / unit)

        def tps_edge(c: Choice, cost: float, sync: float) -> int:
            return q(self.sigma * 2.0 * (cost + sync) / (d_of[c.option] * bw))

        def tau_edge(cost: float, sync: float) -> int:
            return q(2.0 * (cost + sync) / bw)

        self.k_int = {id(c): q(self.sigma * c.kappa) for c in [*inner, *(c for lst in ends.values() for c in lst)]}
        self.p_int = {id(c): q(c.p) for c in [*inner, *(c for lst in ends.values() for c in lst)]}
        #: docs/formulations.md §12: each choice's rex in integers (0 without the iteration keys)
        self.rex_int = {id(c): q(self.sigma * c.rex) for c in [*inner, *(c for lst in ends.values() for c in lst)]}
        t_cap = cutoff  # obj >= T for both objectives

        # ---- memory coefficients (exact integers when possible) ----
        every = [*inner, *(c for lst in ends.values() for c in lst)]
        if not space.free:
            # y_j known per slot: one linear row per slot (choices of another option never used there)
            vals = [c.mem_a * space.slot_y(j) + c.mem_b for j in slots for c in every]
            ints, m_int, exact = memory_integers(vals, Fraction(limit), headroom=len(every) + 1)
            it = iter(ints)
            mem_coef = {(j, id(c)): next(it) for j in slots for c in every}
        else:
            self.s_max = max(1, min(n_mb, space.dev_hi))  # y <= D_j <= S
            vals = [x for c in every for x in (c.mem_a, c.mem_b)]
            ints, m_int, exact = memory_integers(vals, Fraction(limit), headroom=2 * self.s_max + 1)
            it = iter(ints)
            mem_ab = {id(c): (next(it), next(it)) for c in every}
        self.memory_exact = exact

        # ---- slots and options ----
        used = {j: m.NewBoolVar(f"used{j}") for j in slots}
        m.Add(used[1] == 1)
        for j in slots:
            if j < J:
                m.AddImplication(used[j + 1], used[j])
        z = {}
        for j in slots:
            fixed = space.slot_option(j)
            if fixed is not None:
                for oi in range(len(space.options)):
                    z[j, oi] = used[j] if oi == fixed else 0
            else:
                for oi in range(len(space.options)):
                    z[j, oi] = m.NewBoolVar(f"z{j}_{oi}")
                m.Add(sum(z[j, oi] for oi in range(len(space.options))) == used[j])
        L = sum(used.values())
        if not space.free:
            least, most = space.stage_range()  # a sequence's devices and N were checked when made
            m.Add(L >= least)
            m.Add(L <= most)
        else:
            devices = sum(space.options[oi][0] * space.options[oi][1] * z[j, oi] for j in slots
                          for oi in range(len(space.options)))
            m.Add(devices >= space.dev_lo)
            m.Add(devices <= space.dev_hi)
            m.Add(sum(d_of[oi] * z[j, oi] for j in slots for oi in range(len(space.options))) <= n_mb)

        def cap(c: Choice, j: int, count_max: int) -> int:
            """Most layers on choice c in slot j (memory, and the cutoff on the stage time)."""
            top = count_max
            if isinstance(z[j, c.option], int) and z[j, c.option] == 0:
                return 0
            if not space.free:
                coef = mem_coef[j, id(c)]
            else:
                coef = sum(mem_ab[id(c)])
            if coef > 0:
                top = min(top, m_int // coef)
            if t_cap is not None and self.k_int[id(c)] > 0:
                top = min(top, t_cap // self.k_int[id(c)])
            return max(0, top)

        # ---- inner layers: counts ----
        n = {}
        cnt = {}
        inb = {}
        for j in slots:
            terms = []
            for ci, c in enumerate(inner):
                ub = cap(c, j, n_in)
                if ub <= 0:
                    continue
                var = m.NewIntVar(0, ub, f"n{j}_{ci}")
                if not space.single:
                    m.Add(var == 0).OnlyEnforceIf(z[j, c.option].Not())
                n[j, ci] = var
                terms.append(var)
            cnt[j] = sum(terms) if terms else 0
            inb[j] = m.NewBoolVar(f"inb{j}")
            if terms:
                m.Add(cnt[j] >= 1).OnlyEnforceIf(inb[j])
                m.Add(cnt[j] == 0).OnlyEnforceIf(inb[j].Not())
            else:
                m.Add(inb[j] == 0)
        m.Add(sum(cnt[j] for j in slots) == n_in)
        top, bot = {}, {}
        for j in slots:
            top[j] = m.NewBoolVar(f"top{j}")
            bot[j] = m.NewBoolVar(f"bot{j}")
            above = inb[j + 1] if j < J else None
            below = inb[j - 1] if j > 1 else None
            for flag, other in ((top[j], above), (bot[j], below)):
                m.AddImplication(flag, inb[j])
                if other is None:
                    m.Add(flag == inb[j])
                else:
                    m.AddImplication(flag, other.Not())
                    m.AddBoolOr([flag, inb[j].Not(), other])
        m.Add(sum(top.values()) == 1)
        m.Add(sum(bot.values()) == 1)

        # first / last inner layer of a slot, when the sync bytes depend on the TMPC
        vary = any(len({(c.fw, c.bw) for c in inner if c.option == oi}) > 1 for oi in range(len(space.options)))
        self.vary = vary
        fi, la = {}, {}
        if vary:
            for j in slots:
                single = m.NewBoolVar(f"single{j}")
                if isinstance(cnt[j], int):
                    m.Add(single == 0)
                else:
                    m.Add(cnt[j] <= 1).OnlyEnforceIf(single)
                    m.Add(cnt[j] >= 2).OnlyEnforceIf([single.Not(), inb[j]])
                for ci in range(len(inner)):
                    if (j, ci) in n:
                        fi[j, ci] = m.NewBoolVar(f"fi{j}_{ci}")
                        la[j, ci] = m.NewBoolVar(f"la{j}_{ci}")
                        m.Add(n[j, ci] >= fi[j, ci])
                        m.Add(n[j, ci] >= la[j, ci])
                        m.Add(n[j, ci] >= fi[j, ci] + la[j, ci] - single)
                m.Add(sum(fi[j, ci] for ci in range(len(inner)) if (j, ci) in fi) == inb[j])
                m.Add(sum(la[j, ci] for ci in range(len(inner)) if (j, ci) in la) == inb[j])

        # ---- end nodes: placement and choice ----
        x = {}
        inn = {}
        pos = {}
        for e, lst in ends.items():
            for j in slots:
                here = []
                for ci, c in enumerate(lst):
                    if cap(c, j, 1) < 1:
                        continue
                    var = m.NewBoolVar(f"x{e}_{j}_{ci}")
                    m.AddImplication(var, z[j, c.option])
                    x[e, j, ci] = var
                    here.append(var)
                inn[e, j] = sum(here) if here else 0
            m.Add(sum(inn[e, j] for j in slots) == 1)
            pos[e] = sum(j * inn[e, j] for j in slots)

        def is_in(e: int, j: int):
            v = inn[e, j]
            if isinstance(v, int):
                return v
            b = m.NewBoolVar(f"in{e}_{j}")
            m.Add(v == b)
            inn[e, j] = b
            return b

        for e in ends:
            for j in slots:
                is_in(e, j)

        # ---- order along the chain ----
        h, r, nn = chain.head, chain.tail, chain.n
        for e in range(h - 1):
            m.Add(pos[e] >= pos[e + 1])
        for e in range(nn - r, nn - 1):
            m.Add(pos[e] >= pos[e + 1])
        if h:
            for j in slots:
                m.Add(pos[h - 1] >= j).OnlyEnforceIf(inb[j])
            m.Add(pos[0] == L)
        else:
            m.Add(sum(j * top[j] for j in slots) == L)
        if r:
            for j in slots:
                m.Add(pos[nn - r] <= j).OnlyEnforceIf(inb[j])
            m.Add(inn[nn - 1, 1] == 1)
        else:
            m.Add(inb[1] == 1)
        for j in slots:
            held = [inb[j], *(inn[e, j] for e in ends if not isinstance(inn[e, j], int))]
            m.AddBoolOr(held).OnlyEnforceIf(used[j])

        # ---- cut edges, charged per slot ----
        tps_parts = {j: [] for j in slots}
        tau_parts = {j: [] for j in slots}
        #: (is tau, slot) -> the (literals, terms) of each charge, to recompute tight values
        charges: dict[tuple[bool, int], list] = {(b, j): [] for b in (False, True) for j in slots}
        self._charges = charges

        def charge(j: int, enforce: list, tps_terms: list[tuple[int, object]], tau_terms: list[tuple[int, object]]) -> None:
            """Slot j pays sum coef * var when every literal of ``enforce`` holds (vars one-hot)."""
            if any(isinstance(lit, int) and lit == 0 for lit in enforce):
                return
            lits = [lit for lit in enforce if not isinstance(lit, int)]
            for terms, parts in ((tps_terms, tps_parts), (tau_terms, tau_parts)):
                if parts is tau_parts and not self.batch:
                    continue
                terms = [(c, v) for c, v in terms if c > 0 and not (isinstance(v, int) and v == 0)]
                if not terms:
                    continue
                top_c = max(c for c, _ in terms)
                rv = m.NewIntVar(0, top_c, "r")
                m.Add(rv >= sum(c * v for c, v in terms)).OnlyEnforceIf(lits)
                parts[j].append((rv, top_c))
                charges[parts is tau_parts, j].append((lits, terms))

        cost = chain.edge_costs

        def end_terms(e: int, j: int, edge_cost: float, side: str) -> tuple[list, list]:
            tps_t, tau_t = [], []
            for ci, c in enumerate(ends[e]):
                if (e, j, ci) in x:
                    sync = c.bw if side == "bw" else c.fw
                    tps_t.append((tps_edge(c, edge_cost, sync), x[e, j, ci]))
                    tau_t.append((tau_edge(edge_cost, sync), x[e, j, ci]))
            return tps_t, tau_t

        def inner_terms(j: int, edge_cost: float, side: str) -> tuple[list, list]:
            tps_t, tau_t = [], []
            if vary:
                pick = fi if side == "fw" else la
                for ci, c in enumerate(inner):
                    if (j, ci) in pick:
                        sync = c.fw if side == "fw" else c.bw
                        tps_t.append((tps_edge(c, edge_cost, sync), pick[j, ci]))
                        tau_t.append((tau_edge(edge_cost, sync), pick[j, ci]))
            else:
                for oi in range(len(space.options)):
                    rep = next((c for c in inner if c.option == oi), None)
                    if rep is None:
                        continue
                    sync = rep.fw if side == "fw" else rep.bw
                    tps_t.append((tps_edge(rep, edge_cost, sync), z[j, oi]))
                    tau_t.append((tau_edge(edge_cost, sync), z[j, oi]))
            return tps_t, tau_t

        for j in slots:
            # edges between two end nodes
            for e in [*range(h - 1), *range(nn - r, nn - 1)]:
                w = e + 1
                tt, ta = end_terms(e, j, cost[e], "bw")
                charge(j, [_not(inn[w, j])], tt, ta)
                tt, ta = end_terms(w, j, cost[e], "fw")
                charge(j, [_not(inn[e, j])], tt, ta)
            # head -> first inner layer
            if h:
                tt, ta = end_terms(h - 1, j, cost[h - 1], "bw")
                charge(j, [top[j].Not()], tt, ta)
                tt, ta = inner_terms(j, cost[h - 1], "fw")
                charge(j, [top[j], _not(inn[h - 1, j])], tt, ta)
            # between inner layers
            if n_in >= 2:
                c_inner = cost[h]
                tt, ta = inner_terms(j, c_inner, "fw")
                charge(j, [inb[j], top[j].Not()], tt, ta)
                tt, ta = inner_terms(j, c_inner, "bw")
                charge(j, [inb[j], bot[j].Not()], tt, ta)
            # last inner layer -> tail
            if r:
                tf = nn - r
                tt, ta = inner_terms(j, cost[tf - 1], "bw")
                charge(j, [bot[j], _not(inn[tf, j])], tt, ta)
                tt, ta = end_terms(tf, j, cost[tf - 1], "fw")
                charge(j, [bot[j].Not()], tt, ta)

        # ---- memory ----
        for j in slots:
            if not space.free:
                row = [mem_coef[j, id(inner[ci])] * var for (jj, ci), var in n.items() if jj == j]
                row += [mem_coef[j, id(ends[e][ci])] * var for (e, jj, ci), var in x.items() if jj == j]
                if row:
                    m.Add(sum(row) <= m_int)
            else:
                a_row = [mem_ab[id(inner[ci])][0] * var for (jj, ci), var in n.items() if jj == j]
                a_row += [mem_ab[id(ends[e][ci])][0] * var for (e, jj, ci), var in x.items() if jj == j]
                b_row = [mem_ab[id(inner[ci])][1] * var for (jj, ci), var in n.items() if jj == j]
                b_row += [mem_ab[id(ends[e][ci])][1] * var for (e, jj, ci), var in x.items() if jj == j]
                if not a_row:
                    continue
                y = self._free_y(j, z, d_of, slots)
                if self.s_max <= Y_ROWS_MAX:
                    # one row per value of y, enforced by its indicator (small S)
                    yb = [m.NewBoolVar(f"y{j}_{v}") for v in range(1, self.s_max + 1)]
                    m.AddExactlyOne(yb)
                    m.Add(y == sum(v * b for v, b in zip(range(1, self.s_max + 1), yb)))
                    for v, b in zip(range(1, self.s_max + 1), yb):
                        m.Add(sum(a_row) * v + sum(b_row) <= m_int).OnlyEnforceIf(b)
                else:
                    a_var = m.NewIntVar(0, m_int, f"A{j}")
                    m.Add(a_var == sum(a_row))
                    prod = m.NewIntVar(0, m_int, f"Ay{j}")
                    m.AddMultiplicationEquality(prod, [a_var, y])
                    m.Add(prod + sum(b_row) <= m_int)

        # ---- stage times and the objective ----
        t_ub = 0
        tau_ub = 0
        tau_charge_max = 0
        self._node_terms: dict[tuple[bool, int], list] = {}
        for j in slots:
            row = [self.k_int[id(inner[ci])] * var for (jj, ci), var in n.items() if jj == j]
            row += [self.k_int[id(ends[e][ci])] * var for (e, jj, ci), var in x.items() if jj == j]
            self._node_terms[False, j] = list(zip(
                [self.k_int[id(inner[ci])] for (jj, ci) in n if jj == j]
                + [self.k_int[id(ends[e][ci])] for (e, jj, ci) in x if jj == j],
                [var for (jj, ci), var in n.items() if jj == j] + [var for (e, jj, ci), var in x.items() if jj == j]))
            if self.batch:
                self._node_terms[True, j] = list(zip(
                    [self.p_int[id(inner[ci])] for (jj, ci) in n if jj == j]
                    + [self.p_int[id(ends[e][ci])] for (e, jj, ci) in x if jj == j],
                    [var for (jj, ci), var in n.items() if jj == j]
                    + [var for (e, jj, ci), var in x.items() if jj == j]))
            row += [rv for rv, _ in tps_parts[j]]
            e_top = 0
            if chain.iteration:  # the slot's exposed resync max(0, Σ rex), exact (docs/formulations.md §12)
                exposure = self._exposure(j, n, x, inner, ends, n_in)
                if exposure is not None:
                    ev, e_top = exposure
                    row.append(ev)
                    self._node_terms[False, j].append((1, ev))
            t_ub = max(t_ub, n_in * max([self.k_int[id(c)] for c in inner] or [0])
                       + sum(max([self.k_int[id(c)] for c in lst] or [0]) for lst in ends.values())
                       + sum(top_c for _, top_c in tps_parts[j]) + e_top)
            tps_parts[j] = row
            if self.batch:
                trow = [self.p_int[id(inner[ci])] * var for (jj, ci), var in n.items() if jj == j]
                trow += [self.p_int[id(ends[e][ci])] * var for (e, jj, ci), var in x.items() if jj == j]
                tau_ub = max(tau_ub, n_in * max([self.p_int[id(c)] for c in inner] or [0])
                             + sum(max([self.p_int[id(c)] for c in lst] or [0]) for lst in ends.values())
                             + sum(top_c for _, top_c in tau_parts[j]))
                tau_charge_max = max([tau_charge_max, *(top_c for _, top_c in tau_parts[j])])
                tau_parts[j] = trow + [rv for rv, _ in tau_parts[j]]
        if cutoff is not None:
            t_ub = min(t_ub, cutoff)
        self.t_ub = max(0, t_ub)
        T = m.NewIntVar(0, self.t_ub, "T")
        for j in slots:
            if tps_parts[j]:
                m.Add(T >= sum(tps_parts[j]))
        self.T = T
        # redundant: no slot holds more inner layers than T allows at the fastest choice
        k_min = min([self.k_int[id(c)] for c in inner] or [0])
        if k_min > 0:
            for j in slots:
                if not isinstance(cnt[j], int):
                    m.Add(k_min * cnt[j] <= T)
        if self.batch:
            taus = []
            for j in slots:
                tv = m.NewIntVar(0, tau_ub, f"tau{j}")
                m.Add(tv == (sum(tau_parts[j]) if tau_parts[j] else 0))
                taus.append(tv)
            maxtau = m.NewIntVar(0, tau_ub, "maxtau")
            m.AddMaxEquality(maxtau, taus)
            # every layer's compute is in some tau: sum tau >= sum of the least p
            p_least = n_in * min([self.p_int[id(c)] for c in inner] or [0]) + sum(
                min([self.p_int[id(c)] for c in lst] or [0]) for lst in ends.values())
            stau = m.NewIntVar(max(0, p_least - chain.n), tau_ub * J, "sumtau")
            m.Add(stau == sum(taus))
            # redundant: a max tau <= b T + c (d_j TPS_j >= tau_j, sharpened by the resync share
            # for one option), so the LP and the propagation see that "- max tau" cannot cancel T
            a, b, c = self._tau_cut(T, tau_ub, every, 2 * tau_charge_max, d_of)
            m.Add(a * maxtau <= b * T + c)
            obj_ub = cutoff if cutoff is not None else self.t_ub + tau_ub * J
            o = m.NewIntVar(0, obj_ub, "objective")
            m.Add(o == T + stau - maxtau)
            # the same, combined into one row on the objective (propagation bounds T by it)
            if a * obj_ub < 2**62 and a * tau_ub * J < 2**62:
                m.Add(a * o >= (a - b) * T + a * stau - c)
            obj = o
            self.taus, self.maxtau = taus, maxtau
        else:
            obj = T
        if cutoff is not None:
            m.Add(obj <= cutoff)
        m.Minimize(obj)
        self.used, self.z, self.n, self.x, self.inn, self.fi, self.la = used, z, n, x, inn, fi, la

    def _exposure(self, j: int, n: dict, x: dict, inner: list[Choice], ends: dict[int, list[Choice]],
                  n_in: int) -> tuple[cp_model.IntVar, int] | None:
        """Slot j's exposed resync e_j = max(0, Σ rex n + Σ rex x) (integers) and its upper bound, or
        None when no choice there has rex > 0 (the slot exposes nothing)."""
        m, rex = self.model, self.rex_int
        terms = [(rex[id(inner[ci])], var) for (jj, ci), var in n.items() if jj == j]
        terms += [(rex[id(ends[e][ci])], var) for (e, jj, ci), var in x.items() if jj == j]
        terms = [(g, var) for g, var in terms if g != 0]
        if not any(g > 0 for g, _ in terms):
            return None
        hi = n_in * max([0, *(rex[id(c)] for c in inner)]) + sum(max([0, *(rex[id(c)] for c in lst)])
                                                                 for lst in ends.values())
        lo = n_in * min([0, *(rex[id(c)] for c in inner)]) + sum(min([0, *(rex[id(c)] for c in lst)])
                                                                 for lst in ends.values())
        s = m.NewIntVar(lo, hi, f"s{j}")
        m.Add(s == sum(g * var for g, var in terms))
        ev = m.NewIntVar(0, hi, f"e{j}")
        m.AddMaxEquality(ev, [s, 0])
        return ev, hi

    def _tau_cut(self, T, tau_ub: int, every: list[Choice], edges_int: int, d_of: list[int]) -> tuple[int, int, int]:
        """(a, b, c) with a max tau <= b T + c valid for the integer encoding of every plan of the
        part (T holds N TPS). Always: tau_j <= d_j TPS_j <= d_max TPS, so N max tau <= d_max T +
        rounding. For one option (t, d) it is sharpened: d TPS_j = tau_j + d rho_j (rho_j: the
        stage's resync time per sample) and rho_j >= lambda (tau_j - E_j), lambda the least
        resync-to-compute ratio of any choice and E_j the cut edges' share of tau_j; so
        (1 + d lambda) tau_j <= d TPS_j + d lambda E_j. lambda is rounded down (which only
        weakens the row); a = N 2^k + floor(N d lambda 2^k), b = d 2^k."""
        n_mb, n = self.n_mb, self.chain.n
        # rounding of one row, in units (with the iteration keys a stage row rounds kappa and rex per node)
        e1 = ((2 * n if self.chain.iteration else n) + 2) / 2
        d_max = max(d_of)
        weak = (n_mb, d_max, math.ceil((n_mb + d_max) * e1) + 1)
        if not self.space.single:
            return weak
        d = d_of[0]
        lam = max(0.0, min([(c.kappa - c.p / d) / c.p for c in every if c.p > 0], default=0.0))
        for k in (8, 4, 0):
            scale = 2**k
            extra = math.floor(n_mb * d * lam * scale * (1 - 1e-9))
            if extra <= 0:
                return weak
            lam_used = extra / (scale * n_mb * d)
            a = n_mb * scale + extra
            rhs = scale * (d * e1 + n_mb * d * lam_used * edges_int + n_mb * (1 + d * lam_used) * e1)
            if a * tau_ub * max(1, self.J) < 2**62 and d * scale * self.t_ub < 2**62:
                return a, d * scale, math.ceil(rhs) + 1
        return weak

    def _free_y(self, j: int, z: dict, d_of: list[int], slots: range):
        """y_j with d_j y_j >= D_j, D_j the sum of d over slots 1..j (from the back): only this
        side is needed, memory being non-decreasing in y (docs/problem.md F1), so the least
        such y, ceil(D_j / d_j), is the one a solution may as well take."""
        m = self.model
        if not hasattr(self, "y"):
            self.y = {}
        if j not in self.y:
            y = m.NewIntVar(1, self.s_max, f"y{j}")
            suffix = sum(d_of[oi] * z[i, oi] for i in slots if i <= j for oi in range(len(d_of)))
            for oi, d in enumerate(d_of):
                m.Add(d * y >= suffix).OnlyEnforceIf(z[j, oi])
            self.y[j] = y
        return self.y[j]


    def epsilon(self) -> float:
        """:meth:`epsilon_for` this model."""
        return self.epsilon_for(self.chain, self.space, self.objective, self.unit)

    @staticmethod
    def epsilon_for(chain: Chain, space: Space, objective: str, unit: float) -> float:
        """How far the model's objective (times ``unit``) may be from the true value of the plan
        it encodes, in the objective's units: each row sums at most n_j + 2 rounded terms (n_j
        nodes, two cut edges), each off by at most unit/2. TPS: (n + 2) u / 2. Batch time: the
        N TPS row, the max tau and the sum of the L <= J taus: (3 n + 4 + 2 J) u / 2. With the
        iteration keys (``chain.iteration``) a stage row rounds two terms per node (kappa and rex;
        max(0, ·) moves by at most its terms' errors): n more in the TPS row."""
        n = chain.n
        extra = n if chain.iteration else 0
        if objective != BATCH_TIME:
            return (n + extra + 2) * unit / 2
        return (3 * n + extra + 4 + 2 * space.slots) * unit / 2

    def tight_objective(self, solver: cp_model.CpSolver) -> int:
        """The objective of the solution's plan with every slack taken up (T the largest row,
        each charge exactly its coefficient when its literals hold): the model's own number for
        that plan, which a solution stopped early may exceed."""
        def value(v) -> int:
            return v if isinstance(v, int) else solver.Value(v)

        def row(is_tau: bool, j: int) -> int:
            total = sum(c * value(v) for c, v in self._node_terms.get((is_tau, j), ()))
            for lits, terms in self._charges[is_tau, j]:
                if all(solver.BooleanValue(lit) for lit in lits):
                    total += sum(c * value(v) for c, v in terms)
            return total

        slots = range(1, self.J + 1)
        top = max(row(False, j) for j in slots)
        if not self.batch:
            return top
        taus = [row(True, j) for j in slots]
        return top + sum(taus) - max(taus)

    def read(self, solver: cp_model.CpSolver) -> list[SlotValue]:
        """The used slots of the solution, first stage (highest slot) first."""
        out = []
        for j in range(self.J, 0, -1):
            if not solver.Value(self.used[j]):
                continue
            option = next(oi for oi in range(len(self.space.options))
                          if not isinstance(self.z[j, oi], int) and solver.Value(self.z[j, oi]))
            ends = {e: self.end_choices[e][ci] for (e, jj, ci), var in self.x.items()
                    if jj == j and solver.Value(var)}
            counts = {ci: solver.Value(var) for (jj, ci), var in self.n.items() if jj == j and solver.Value(var)}
            first = next((ci for (jj, ci), var in self.fi.items() if jj == j and solver.Value(var)), None)
            last = next((ci for (jj, ci), var in self.la.items() if jj == j and solver.Value(var)), None)
            out.append(SlotValue(option, ends, counts, first, last))
        return out

def _not(lit):
    """The negation of a literal, or of a constant 0/1."""
    if isinstance(lit, int):
        return 1 - lit
    return lit.Not()
