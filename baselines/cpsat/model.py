"""The CP-SAT model (docs/formulations.md §3): :class:`CpsatModel` for one instance, with
the same slots, options and choices as the MILP (:mod:`baselines.exact.model_data`),
reification instead of big-M and y as a division; the integer scaling of times (tolerance
2ε) and of memory (:func:`memory_scaling`, docs/formulations.md §7); the cutoff rows of a
proof search below a warm start, hints, and the plan read back. :func:`build_model` builds
it with the model knobs of the options. Under the batch-time objective the model minimises
N·T + Σσ - max σ (:meth:`CpsatModel._batch_rows`, docs/formulations.md §9).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from functools import reduce
from typing import Any

from ortools.sat.python import cp_model

from baselines.cpsat.params import MAX_PRECISION_BITS
from baselines.exact.model_data import Choice, ModelData, WarmStart
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.plan import Plan
from piper.core.stopping import checkpoint


#: the largest scaled memory value or limit taken as exact: a row sums at most a few thousand of
#: them, times small counts, within CP-SAT's 64-bit integers (bytes of 9e18 and more raised a
#: TypeError in OR-Tools; the second certificate pass of 2026-12-05)
EXACT_MEMORY_MAX = 2**48


def memory_scaling(values: list[float], limit: float) -> tuple[list[int], int, bool]:
    """Integers for memory coefficients ``values`` and the limit (see module docstring).

    Exact when some power of ten 10^j (j <= 6) makes every value a whole number, tested in exact
    rational arithmetic (``Fraction``: a float is a binary fraction, so 0.25 is exact at j = 2 and 0.1
    never); the limit is then floored (Σ of whole numbers <= L exactly when <= floor(L)) and all are
    divided by the values' gcd. A tolerance there would round a value of 1e9 - 0.4 bytes to 1e9 and
    call the rounding exact: CP-SAT then proved "infeasible" where a plan fit (the certificate pass of
    2026-12-05). Otherwise, or when a scaled value or the limit exceeds :data:`EXACT_MEMORY_MAX`, the
    values are rounded up and the limit down (a restriction, exact False).

    Returns (scaled values, scaled limit, exact?).
    """
    for j in range(7):
        f = 10**j
        scaled = [Fraction(v) * f for v in values]
        if all(x.denominator == 1 for x in scaled):
            ints = [int(x) for x in scaled]
            g = reduce(math.gcd, ints, 0) or 1
            scaled_limit = math.floor(Fraction(limit) * f) // g
            if max([scaled_limit, *ints]) > EXACT_MEMORY_MAX:
                break  # beyond CP-SAT's 64-bit integers in a row's sum: the rounded scaling below
            return [i // g for i in ints], scaled_limit, True
    unit = limit / 2**30
    # a value above the limit fits in no row either way (the terms are not negative): capped at
    # 2^31 units so that 1e20 bytes against a 1e9 limit stays a 64-bit integer
    return [min(math.ceil(v / unit - 1e-12), 2**31) for v in values], 2**30, False


class CpsatModel:
    """The CP-SAT model of one instance (see the module docstring)."""

    def __init__(self, data: ModelData, *, precision_bits: int = 30, device_products: bool = True,
                 prefix_rows: bool = True, prefix_cut_edges: bool = True, tmpc_symmetry: bool = True) -> None:
        self.data = data
        self.tmpc_symmetry = tmpc_symmetry
        #: clauses of the TMPC exchange rule (ModelData.tmpc_exclusions)
        self.symmetry_clauses = 0
        self.device_products = device_products
        self.prefix_rows = prefix_rows
        self.prefix_cut_edges = prefix_cut_edges
        #: slot -> dev_i, and slot -> its device-time terms (w_v, in[v,i]) (bin-packing rows)
        self.dev: dict[int, cp_model.IntVar] = {}
        self.slot_work: dict[int, list[tuple[int, cp_model.IntVar]]] = {}
        self.m = cp_model.CpModel()
        self.x: dict[tuple[int, int, Choice], cp_model.IntVar] = {}
        n, m_edges = data.problem.n, len(data.edges)
        nx = sum(len(c) for c in data.choices.values()) * data.slots
        mass = max(data.s_max, data.devices) * (n + m_edges + 1) * (nx + 1)
        # coefficients in units of tau may exceed 1 (a d > 1 option's resync): the largest scales the mass
        span = max((max([c.kappa, abs(c.rex), *c.gin.values(), *c.gout.values()])
                    for lst in data.choices.values() for c in lst), default=1.0)
        mass *= max(1, math.ceil(span))
        if data.batch:  # the objective N·T + Σσ - max σ: N + L stage-sized terms
            mass *= data.problem.microbatches + data.slots + 1
        if not 8 <= precision_bits <= MAX_PRECISION_BITS:
            raise SolverError(f"params['precision_bits'] must lie in 8..{MAX_PRECISION_BITS}, got {precision_bits} "
                              "(above it OR-Tools 9.15's presolve gave wrong certificates: docs/formulations.md §3.3)")
        p = precision_bits
        while p > 8 and mass * 2**p > 2**60:
            p -= 1
        if mass * 2**p > 2**62:
            raise SolverError(f"the CP-SAT model's integers would overflow (devices x terms x largest time = {mass:.3g} "
                              "units of tau); use the MILP or the DP on this instance")
        self.precision_bits = p
        self.unit = 2**p  # model units per τ
        #: |T_int·τ/2^P - TPS| <= epsilon for every plan (problem time units); under the
        #: batch-time objective, |obj_int·τ/2^P - batch time| <= epsilon: N times the TPS's,
        #: plus Σ_i |σ_i error| <= (n + 2m) half units (each layer in one stage, each edge
        #: charged to at most two; Σσ - max σ moves by at most Σ_i |error_i|)
        #: (with the iteration keys each layer rounds two terms, κ and rex: max(0, ·) moves by
        #: at most the sum of its terms' errors)
        rounded = (2 * n if data.iteration else n) + m_edges
        self.epsilon = rounded * data.tau / 2 ** (p + 1)
        if data.batch:
            self.epsilon = (data.problem.microbatches * self.epsilon
                            + (n + 2 * m_edges) * data.tau / 2 ** (p + 1))
        #: the objective variable: T, or the batch time's (:meth:`_batch_rows`)
        self.obj: cp_model.IntVar
        self.sig: dict[int, cp_model.IntVar] = {}
        self.rho: dict[tuple[int, int], cp_model.IntVar] = {}
        self.h: dict[int, cp_model.IntVar] = {}
        self.w: dict[int, cp_model.IntVar] = {}
        #: slot -> (e_i, its exposed resync; s_i = Σ rex x, or None) (iteration keys only)
        self.e: dict[int, tuple[cp_model.IntVar, cp_model.IntVar | None]] = {}
        #: (edge, slot) -> the rows of r[e,i]: (terms, the other end)
        self.r_rows: dict[tuple[int, int], list] = {}
        self._build()

    def q(self, c: float) -> int:
        """A time coefficient (in units of τ) as a model integer."""
        return int(round(c * self.unit))

    def _build(self) -> None:
        d, m, q = self.data, self.m, self.q
        L, S = d.slots, d.s_max
        k, N = d.devices, d.problem.microbatches  # k: this part's device budget (min(k, G) inside)
        opts = d.opts
        nodes = [nd.id for nd in d.problem.nodes]
        pos = {v: p for p, v in enumerate(nodes)}

        # memory integers
        allc = [c for v in nodes for c in d.choices[v]]
        limit = d.problem.memory_cap * (d.memory_factor)
        # expert parallelism (docs/problem.md §11): r = t d / (e e_t) copies hold s_x / r each
        copies = {id(c): c.tmpc.expert_copies(opts[c.opt].d, opts[c.opt].t) or 1
                  for c in allc if c.tmpc.memory_sharded_expert}
        if any(c.tmpc.memory_sharded for c in allc) or copies:
            # version 2: b + s/d (+ s_x/r), all multiplied by the lcm of the d's (and r's) so
            # that byte counts stay integers (exact scaling)
            lcm = reduce(lambda a, b: a * b // math.gcd(a, b), {opts[c.opt].d for c in allc} | set(copies.values()), 1)
            mem_vals = ([c.tmpc.memory_a * lcm for c in allc]
                        + [c.tmpc.memory_b * lcm + c.tmpc.memory_sharded * (lcm // opts[c.opt].d)
                           + (c.tmpc.memory_sharded_expert * (lcm // copies[id(c)]) if id(c) in copies else 0.0)
                           for c in allc])
            limit *= lcm
        else:
            mem_vals = [c.tmpc.memory_a for c in allc] + [c.tmpc.memory_b for c in allc]
        ints, mint, exact = memory_scaling(mem_vals, limit)
        self.memory_exact = exact
        ma = {id(c): ints[j] for j, c in enumerate(allc)}
        mb = {id(c): ints[len(allc) + j] for j, c in enumerate(allc)}

        x = self.x
        xs_vio: dict[tuple[int, int, int], list[tuple[Choice, cp_model.IntVar]]] = {}
        for v in nodes:
            checkpoint("building the CP-SAT model (variables)")
            for i in range(1, d.max_slot[v] + 1):
                allowed = set(d.slot_opts[i])
                for c in d.choices[v]:
                    if c.opt in allowed:
                        var = m.NewBoolVar(f"x_{pos[v]}_{i}_{c.opt}_{c.tmpc_index}")
                        x[(v, i, c)] = var
                        xs_vio.setdefault((v, i, c.opt), []).append((c, var))
        z = {(i, o): m.NewBoolVar(f"z_{i}_{o}") for i in range(1, L + 1) for o in d.slot_opts[i]}
        used = {i: m.NewBoolVar(f"used_{i}") for i in range(1, L + 1)}
        inv: dict[tuple[int, int], cp_model.IntVar] = {}
        for v in nodes:
            for i in range(1, d.max_slot[v] + 1):
                inv[(v, i)] = m.NewBoolVar(f"in_{pos[v]}_{i}")
        self.z, self.used, self.inv = z, used, inv

        for v in nodes:
            checkpoint("building the CP-SAT model (assignment rows)")
            m.AddExactlyOne([inv[(v, i)] for i in range(1, d.max_slot[v] + 1)])
            for i in range(1, d.max_slot[v] + 1):
                m.Add(inv[(v, i)] == sum(var for o in d.slot_opts[i] for _, var in xs_vio.get((v, i, o), ())))
        for i in range(1, L + 1):
            for o in d.slot_opts[i]:
                checkpoint("building the CP-SAT model (slot rows)")
                members = []
                for v in nodes:
                    lst = xs_vio.get((v, i, o))
                    if lst:
                        m.Add(sum(var for _, var in lst) <= z[(i, o)])
                        members += [var for _, var in lst]
                m.Add(z[(i, o)] <= sum(members)) if members else m.Add(z[(i, o)] == 0)
            m.Add(used[i] == sum(z[(i, o)] for o in d.slot_opts[i]))
            if i < L:
                m.Add(used[i + 1] <= used[i])
        # le[v,i] = [slot(v) <= i] = Σ_{h<=i} in[v,h] (i < m_v; it is 1 from m_v on)
        le: dict[tuple[int, int], cp_model.IntVar] = {}
        for v in nodes:
            checkpoint("building the CP-SAT model (order rows)")
            for i in range(1, d.max_slot[v]):
                le[(v, i)] = m.NewBoolVar(f"le_{pos[v]}_{i}")
                m.Add(le[(v, i)] == sum(inv[(v, h)] for h in range(1, i + 1)))
        self.le = le
        # precedence: slot(a) <= slot(b) for (a, b) in E, i.e. le[b,i] => le[a,i]
        # (m_a < m_b: a's descendants include b's and b)
        for a, b in d.edges:
            for i in range(1, d.max_slot[a]):
                m.AddImplication(le[(b, i)], le[(a, i)])
        # TMPC exchange rule: two layers of a class that share a slot never take an
        # excluded pair of TMPCs (ModelData.tmpc_exclusions)
        if self.tmpc_symmetry:
            for xu, xv in d.excluded_pairs(x):
                m.AddBoolOr([xu.Not(), xv.Not()])
                self.symmetry_clauses += 1
        # resources
        m.Add(sum(opts[o].t * opts[o].d * var for (i, o), var in z.items()) <= k)
        m.Add(sum(opts[o].d * var for (i, o), var in z.items()) <= N)
        if d.min_devices > 0:  # the "spanning" part: plans across nodes only (version 2)
            m.Add(sum(opts[o].t * opts[o].d * var for (i, o), var in z.items()) >= d.min_devices)
        if d.uniform:  # uniform plans: every used slot takes slot 1's option
            for (i, o), var in z.items():
                if i >= 2:
                    m.AddImplication(var, z[(1, o)])
        # y = ceil(D / d)
        dd, Dv, yv, yb = {}, {}, {}, {}
        for i in range(1, L + 1):
            dd[i] = m.NewIntVar(1, S, f"dd_{i}")
            m.Add(dd[i] == sum(opts[o].d * z[(i, o)] for o in d.slot_opts[i]) + 1 - used[i])
        for i in range(1, L + 1):
            Dv[i] = m.NewIntVar(0, S, f"D_{i}")
            m.Add(Dv[i] == sum(opts[o].d * z[(j, o)] for j in range(i, L + 1) for o in d.slot_opts[j]))
            ymax = S - (i - 1)
            yv[i] = m.NewIntVar(0, ymax, f"y_{i}")
            num = m.NewIntVar(0, 2 * S, f"num_{i}")
            m.Add(num == Dv[i] + dd[i] - 1)
            m.AddDivisionEquality(yv[i], num, dd[i])
            for y in range(1, ymax + 1):
                yb[(i, y)] = m.NewBoolVar(f"yb_{i}_{y}")
            m.Add(sum(yb[(i, y)] for y in range(1, ymax + 1)) == used[i])
            m.Add(yv[i] == sum(y * yb[(i, y)] for y in range(1, ymax + 1)))
        self.dd, self.D, self.y, self.yb = dd, Dv, yv, yb
        # memory, reified on the exact y
        self.mem_rows = 0
        for i in range(1, L + 1):
            members = [(c, var) for (v, h, c), var in x.items() if h == i]
            per_node: dict[int, list[Choice]] = {}
            for c, _ in members:
                per_node.setdefault(c.node, []).append(c)
            for y in range(1, S - i + 2):
                checkpoint("building the CP-SAT model (memory rows)")
                worst = sum(max(ma[id(c)] * y + mb[id(c)] for c in cs) for cs in per_node.values())
                if worst <= mint:
                    continue
                m.Add(sum((ma[id(c)] * y + mb[id(c)]) * var for c, var in members) <= mint).OnlyEnforceIf(yb[(i, y)])
                self.mem_rows += 1
        # cut edges
        r: dict[tuple[int, int], cp_model.IntVar] = {}
        edge_top: dict[int, int] = {}
        for j in range(len(d.edges)):
            checkpoint("building the CP-SAT model (cut-edge rows)")
            for i in range(1, L + 1):
                rows = self._edge_rows(xs_vio, j, i, lambda c: c.gin, lambda c: c.gout)
                if not rows:
                    continue
                r[(j, i)] = self._charge_var(rows, j, i, edge_top, inv, f"r_{j}_{i}")
                self.r_rows[(j, i)] = rows
        self.r = r
        # objective
        # no stage is slower than all layers' slowest terms plus every edge's largest charge
        t_ub = sum(max((q(c.kappa) for c in d.choices[v]), default=0) for v in nodes) + sum(edge_top.values())
        if d.iteration:
            self._exposure_rows()
            t_ub += self.e_ub
        self.t_ub = t_ub
        T = self.T = m.NewIntVar(0, max(1, t_ub), "T")
        r_i: dict[int, list[cp_model.IntVar]] = {}
        for (j, i), rv in r.items():
            r_i.setdefault(i, []).append(rv)
        for i in range(1, L + 1):
            checkpoint("building the CP-SAT model (stage rows)")
            m.Add(T >= sum(q(c.kappa) * var for (v, h, c), var in x.items() if h == i) + sum(r_i.get(i, []))
                  + self.exposure(i))
        m.Add(S * T >= sum(opts[c.opt].d * q(c.kappa) * var for (v, i, c), var in x.items()))
        m.Add(k * T >= sum(opts[c.opt].t * opts[c.opt].d * q(c.kappa) * var for (v, i, c), var in x.items()))
        xs_v: dict[int, list[tuple[Choice, cp_model.IntVar]]] = {}
        for (v, i, c), var in x.items():
            xs_v.setdefault(v, []).append((c, var))
        for v in nodes:
            checkpoint("building the CP-SAT model (layer rows)")
            m.Add(T >= sum(q(c.kappa) * var for c, var in xs_v.get(v, [])))
        if self.device_products:
            # bin-packing reasoning: slot i's devices dev_i = t_i·d_i satisfy
            # T·dev_i >= Σ_{v in slot i} min_c (t_c d_c κ_c), and dev_i only takes the
            # values t·d of its options, so a slot's work rounds its devices up
            wmin = self.wmin = {v: min((opts[c.opt].t * opts[c.opt].d * q(c.kappa) for c in d.choices[v]), default=0)
                                for v in nodes}
            for i in range(1, L + 1):
                values = sorted({0} | {opts[o].t * opts[o].d for o in d.slot_opts[i]})
                dev = self.dev[i] = m.NewIntVarFromDomain(cp_model.Domain.FromValues(values), f"dev_{i}")
                m.Add(dev == sum(opts[o].t * opts[o].d * z[(i, o)] for o in d.slot_opts[i]))
                work = [(wmin[v], inv[(v, i)]) for v in nodes if (v, i) in inv and wmin[v] > 0]
                if not work:
                    continue
                self.slot_work[i] = work
                prod = m.NewIntVar(0, max(1, t_ub) * values[-1], f"Tdev_{i}")
                m.AddMultiplicationEquality(prod, [T, dev])
                m.Add(prod >= sum(w * var for w, var in work))
        self.obj = T
        if d.batch:
            self._batch_rows(xs_vio, inv)
        m.Minimize(self.obj)

    def exposure(self, i: int) -> Any:
        """Slot i's exposed-resync variable e_i, or 0 (no iteration keys, or no rex > 0 there)."""
        return self.e[i][0] if i in self.e else 0

    def _exposure_rows(self) -> None:
        """Rows (E) (docs/formulations.md §12), iteration keys only: per slot i with some rex > 0,
        s_i = Σ q(rex) x[·,i,·] and e_i >= max(0, s_i) (e_i = max(0, s_i) exactly under the
        batch-time objective, where every stage time is exact); ``self.e_ub`` bounds every e_i."""
        d, m, q = self.data, self.m, self.q
        self.e_ub = sum(max([0, *(q(c.rex) for c in cs)]) for cs in d.choices.values())
        for i in range(1, d.slots + 1):
            terms = [(q(c.rex), var) for (v, h, c), var in self.x.items() if h == i and q(c.rex) != 0]
            if not any(g > 0 for g, _ in terms):
                continue
            ev = m.NewIntVar(0, max(1, self.e_ub), f"e_{i}")
            if d.batch:
                low = sum(g for g, _ in terms if g < 0)
                sv = m.NewIntVar(low, max(1, self.e_ub), f"s_{i}")
                m.Add(sv == sum(g * var for g, var in terms))
                m.AddMaxEquality(ev, [sv, 0])
                self.e[i] = (ev, sv)
            else:
                m.Add(ev >= sum(g * var for g, var in terms))
                self.e[i] = (ev, None)

    def _batch_rows(self, xs_vio: dict[tuple[int, int, int], list[tuple[Choice, cp_model.IntVar]]],
                    inv: dict[tuple[int, int], cp_model.IntVar]) -> None:
        """The batch-time objective (docs/formulations.md §9)::

            ρ[e,i] >= Σ σin(e,ℓ) x[v,i,o,ℓ]      OnlyEnforceIf(¬in[u,i])   (as r, with σ's charges)
            ρ[e,i] >= Σ σout(e,ℓ) x[u,i,o,ℓ]     OnlyEnforceIf(¬in[v,i])
            σ_i = Σ p_ℓ x[·,i,·,ℓ] + Σ_e ρ[e,i]
            ExactlyOne(h);   h_i ⇒ used_i;   h_i ⇒ σ_i >= σ_j  ∀ j != i   (h: a largest σ)
            w_i >= σ_i   OnlyEnforceIf(¬h_i)
            obj = N·T + Σ_i w_i;   minimise obj

        Every slot but the designated one pays its σ, so obj >= N·T + Σσ - max σ, with
        equality at the minimum (σ_i may exceed its stage's value only through ρ, which the
        minimum keeps at its lower bound: Σσ - max σ never decreases when one σ_i grows).
        A designation (rather than a max equality) keeps the objective's lower bound linear
        in the literals, which CP-SAT propagates.

        Under this objective every charge (r and ρ) is made exact (:meth:`_exact_charge`), T
        is the largest stage time (a max equality) and w_i is σ_i or 0 exactly, so the
        objective is a function of the Booleans: with slack in them the search improved a
        plan one unit at a time (a 4-layer instance took 20 s; now 0.1 s)."""
        d, m, q = self.data, self.m, self.q
        L, N = d.slots, d.problem.microbatches
        rho_i: dict[int, list[cp_model.IntVar]] = {}
        edge_top: dict[int, int] = {}
        for j, (a, b) in enumerate(d.edges):
            for i in range(1, L + 1):
                rows = self._edge_rows(xs_vio, j, i, lambda c: c.sin, lambda c: c.sout)
                if not rows:
                    continue
                rv = self.rho[(j, i)] = self._charge_var(rows, j, i, edge_top, inv, f"rho_{j}_{i}")
                rho_i.setdefault(i, []).append(rv)
                self._exact_charge(rv, rows, a, b, i, inv)
        for (j, i), rows in self.r_rows.items():
            self._exact_charge(self.r[(j, i)], rows, *d.edges[j], i, inv)
        # T is the largest stage time exactly
        stage = []
        for i in range(1, L + 1):
            sv = m.NewIntVar(0, max(1, self.t_ub), f"stage_{i}")
            m.Add(sv == sum(q(c.kappa) * var for (v, h, c), var in self.x.items() if h == i)
                  + sum(rv for (j, h), rv in self.r.items() if h == i) + self.exposure(i))
            stage.append(sv)
        m.AddMaxEquality(self.T, stage)
        sig_ub = max(1, sum(max((q(c.sigma) for c in cs), default=0) for cs in d.choices.values())
                     + sum(edge_top.values()))
        for i in range(1, L + 1):
            sv = self.sig[i] = m.NewIntVar(0, sig_ub, f"sig_{i}")
            m.Add(sv == sum(q(c.sigma) * var for (v, h, c), var in self.x.items() if h == i)
                  + sum(rho_i.get(i, [])))
        # the designated slot (h_i) is a largest σ and pays nothing; every other pays σ_i
        for i in range(1, L + 1):
            hv = self.h[i] = m.NewBoolVar(f"h_{i}")
            m.AddImplication(hv, self.used[i])
            wv = self.w[i] = m.NewIntVar(0, sig_ub, f"w_{i}")
            m.Add(wv == self.sig[i]).OnlyEnforceIf(hv.Not())
            m.Add(wv == 0).OnlyEnforceIf(hv)
        m.AddExactlyOne(list(self.h.values()))
        for i in range(1, L + 1):
            for j in range(1, L + 1):
                if i != j:
                    m.Add(self.sig[i] >= self.sig[j]).OnlyEnforceIf(self.h[i])
        self.obj = m.NewIntVar(0, N * max(1, self.t_ub) + L * sig_ub, "B")
        m.Add(self.obj == N * self.T + sum(self.w.values()))

    def _edge_rows(self, xs_vio: dict[tuple[int, int, int], list[tuple[Choice, cp_model.IntVar]]], j: int, i: int,
                   inn: Callable[[Choice], Any], out: Callable[[Choice], Any]) -> list:
        """The charge rows of edge j = (a, b) at slot i: (terms, other) pairs, the in-side
        (b's layers, i >= 2 only, when a is elsewhere) then the out-side (a's layers, when
        b is elsewhere); ``inn``/``out`` pick a choice's per-edge charges (γ or σ)."""
        d, q = self.data, self.q
        a, b = d.edges[j]
        rows = []
        if i >= 2:
            terms = [(q(inn(c)[j]), var) for o in d.slot_opts[i] for c, var in xs_vio.get((b, i, o), ())]
            terms = [(g, var) for g, var in terms if g > 0]
            if terms:
                rows.append((terms, a))
        terms = [(q(out(c)[j]), var) for o in d.slot_opts[i] for c, var in xs_vio.get((a, i, o), ())]
        terms = [(g, var) for g, var in terms if g > 0]
        if terms:
            rows.append((terms, b))
        return rows

    def _charge_var(self, rows: list, j: int, i: int, edge_top: dict[int, int],
                    inv: dict[tuple[int, int], cp_model.IntVar], name: str) -> cp_model.IntVar:
        """A new charge variable (0 .. its largest term, raising ``edge_top[j]`` to that) at
        least each of ``rows``' sums, a row enforced only while its other end is not in slot i."""
        m = self.m
        top = max(g for terms, _ in rows for g, _ in terms)
        edge_top[j] = max(edge_top.get(j, 0), top)
        rv = m.NewIntVar(0, top, name)
        for terms, other in rows:
            ct = m.Add(rv >= sum(g * var for g, var in terms))
            if (other, i) in inv:
                ct.OnlyEnforceIf(inv[(other, i)].Not())
        return rv

    def _exact_charge(self, rv: cp_model.IntVar, rows: list, a: int, b: int, i: int,
                      inv: dict[tuple[int, int], cp_model.IntVar]) -> None:
        """Make a cut-edge charge (r or ρ) of edge (a, b) in slot i exactly its value, not
        only at least it: at most the sum of its rows' terms (only the end in slot i has
        terms), and 0 when both ends sit in slot i."""
        m = self.m
        m.Add(rv <= sum(g * var for terms, _ in rows for g, var in terms))
        if (a, i) in inv and (b, i) in inv:
            m.Add(rv == 0).OnlyEnforceIf([inv[(a, i)], inv[(b, i)]])

    def add_cutoff(self, cutoff: int) -> None:
        """Only plans with T <= ``cutoff`` (model units): T's bound, plus rows that are
        redundant for integers but hand the cutoff to every slot (with T fixed, the
        bin-packing product becomes linear)::

            x[v,i,o,ℓ] = 0                               when κ(v,o,ℓ) > cutoff
            Σ_{v,ℓ} κ x[v,i,o,ℓ] <= cutoff · z[i,o]      ∀ i, o   (one option's capacity)
            Σ_v w_v in[v,i] <= cutoff · dev_i            ∀ i      (the slot's device-time)
            Σ_v w_v le[v,i] + Σ_{(u,v)∈E} gout_e (le[u,i] - le[v,i])
                                     <= cutoff · Σ_{j<=i} dev_j       ∀ i < L  (slots 1..i)
            Σ_v w_v (1 - le[v,i]) + Σ_{(u,v)∈E} gin_e (le[u,i] - le[v,i])
                                     <= cutoff · Σ_{j>i} dev_j        ∀ i < L  (slots i+1..L)

        with gout_e = min over u's choices of t d γout(e) (gin_e likewise over v's):
        le[u,i] - le[v,i] = 1 exactly when e crosses the boundary after slot i, and then
        u's stage (in slots 1..i) pays γout(e) on its t d devices and v's stage (after
        slot i) pays γin(e). Each stage's time is <= cutoff, so its devices times the
        cutoff cover its layers' and cut edges' device-time; the rows sum that over the
        slots on either side of a boundary (edges cut inside one side are left out, so
        they are valid lower bounds). They need the bin-packing rows' dev_i.

        ``params["prefix_rows"]`` (default on) adds the last two; ``params[
        "prefix_cut_edges"]`` (default on) their edge terms. The compute part alone is a
        sum of per-slot rows, but CP-SAT's search without LP does not add rows up: with
        it, placing a layer in slots 1..i (which places its ancestors there too) raises
        the devices those slots need at once; the edge terms charge every boundary its
        cheapest communication. Measured on ``experiments.bench_exact`` rows, DP plan as
        warm start, seeds 1-2 (seconds, with edge terms / compute terms only / no rows):
        24-layer branchy k=8 10.9 / 57.9-61.7 / 72.7-73.8; 16-layer branchy k=8
        2.2 / 4.1-4.2 / 4.8-4.9; 32-layer chain k=16 47.1 / 52.6 / 63 (180 s limit,
        earlier revision); the 24-layer chain k=16, 12- and 16-layer branchy k=16 within
        the noise (about ±15%).
        """
        m, q = self.m, self.q
        if self.data.batch:
            # the batch time's cutoff, and T's: N·T <= obj (the fill and drain are >= 0)
            m.Add(self.obj <= cutoff)
            cutoff = cutoff // self.data.problem.microbatches
        m.Add(self.T <= cutoff)
        per_io: dict[tuple[int, int], list[tuple[int, cp_model.IntVar]]] = {}
        for (v, i, c), var in self.x.items():
            kq = q(c.kappa)
            if kq > cutoff:
                m.Add(var == 0)
            else:
                per_io.setdefault((i, c.opt), []).append((kq, var))
        for (i, o), zv in self.z.items():
            terms = per_io.get((i, o), [])
            if terms and sum(kq for kq, _ in terms) > cutoff:
                m.Add(sum(kq * var for kq, var in terms) <= cutoff * zv)
        for i, work in self.slot_work.items():
            m.Add(sum(w * var for w, var in work) <= cutoff * self.dev[i])
        if self.prefix_rows and self.dev:
            # device-time of the layers (and crossing edges) on either side of the boundary
            # after slot i; le[v,i] is 1 for i >= m_v (v sits in slots 1..i then)
            d = self.data
            L, max_slot, le = d.slots, d.max_slot, self.le
            cut_edges = self.prefix_cut_edges
            opts = d.opts
            g_out, g_in = {}, {}
            for j, (a, b) in enumerate(d.edges if cut_edges else ()):
                g_out[j] = min((opts[c.opt].t * opts[c.opt].d * q(c.gout[j]) for c in d.choices[a]), default=0)
                g_in[j] = min((opts[c.opt].t * opts[c.opt].d * q(c.gin[j]) for c in d.choices[b]), default=0)

            def le_at(v: int, i: int):
                return le[(v, i)] if (v, i) in le else 1

            for i in range(1, L):
                lits = [(w, le[(v, i)]) for v, w in self.wmin.items() if w and (v, i) in le]
                fixed = sum(w for v, w in self.wmin.items() if max_slot[v] <= i)
                cut = [(j, le_at(a, i) - le_at(b, i)) for j, (a, b) in enumerate(d.edges)] if cut_edges else []
                m.Add(fixed + sum(w * lit for w, lit in lits) + sum(g_out[j] * e for j, e in cut if g_out[j])
                      <= cutoff * sum(self.dev[j] for j in range(1, i + 1)))
                m.Add(sum(w * lit.Not() for w, lit in lits) + sum(g_in[j] * e for j, e in cut if g_in[j])
                      <= cutoff * sum(self.dev[j] for j in range(i + 1, L + 1)))

    # ------------------------------------------------------------------ hints
    def _warm_charges(self, warm: WarmStart, i: int, inn: dict[int, float], out: dict[int, float],
                      charged: dict[tuple[int, int], cp_model.IntVar], rvals: dict[tuple[int, int], int]) -> None:
        """Add to ``rvals`` one layer's integer edge charges at slot i under the warm start:
        ``inn`` for in-edges whose tail is elsewhere, ``out`` for out-edges whose head is,
        each only where ``charged`` has its variable."""
        q, d = self.q, self.data
        for e, g in inn.items():
            if warm.assign[d.edges[e][0]][0] != i and (e, i) in charged:
                rvals[(e, i)] = rvals.get((e, i), 0) + q(g)
        for e, g in out.items():
            if warm.assign[d.edges[e][1]][0] != i and (e, i) in charged:
                rvals[(e, i)] = rvals.get((e, i), 0) + q(g)

    def stage_int(self, warm: WarmStart) -> tuple[int, dict[tuple[int, int], int]]:
        """The warm start's scaled objective and r values, computed like the model does."""
        q, d = self.q, self.data
        worst = 0
        rvals: dict[tuple[int, int], int] = {}
        for i in range(1, d.slots + 1):
            tot = 0
            for v, (h, c) in warm.assign.items():
                if h != i:
                    continue
                tot += q(c.kappa)
                self._warm_charges(warm, i, c.gin, c.gout, self.r, rvals)
            tot += sum(val for (e, h), val in rvals.items() if h == i)
            tot += max(0, self.exposed_sum(warm, i)) if i in self.e else 0
            worst = max(worst, tot)
        return worst, rvals

    def exposed_sum(self, warm: WarmStart, i: int) -> int:
        """s_i of the warm start: Σ q(rex) over slot i's layers (rows (E))."""
        return sum(self.q(c.rex) for h, c in warm.assign.values() if h == i)

    def objective_int(self, warm: WarmStart) -> int:
        """The warm start's objective as the model computes it (model units): its largest
        integer stage time, or N times that plus Σσ - max σ in integers."""
        worst, _ = self.stage_int(warm)
        if not self.data.batch:
            return worst
        sig = [tot for tot, _ in self.sigma_int(warm).values()]
        return self.data.problem.microbatches * worst + sum(sig) - max(sig)

    def sigma_int(self, warm: WarmStart) -> dict[int, tuple[int, dict[tuple[int, int], int]]]:
        """Slot -> (the warm start's integer σ_i, its ρ values), computed like the model does."""
        q, d = self.q, self.data
        out: dict[int, tuple[int, dict[tuple[int, int], int]]] = {}
        for i in range(1, d.slots + 1):
            tot = 0
            rvals: dict[tuple[int, int], int] = {}
            for h, c in warm.assign.values():
                if h != i:
                    continue
                tot += q(c.sigma)
                self._warm_charges(warm, i, c.sin, c.sout, self.rho, rvals)
            out[i] = (tot + sum(rvals.values()), rvals)
        return out

    def add_hint(self, warm: WarmStart) -> int:
        """Hint every decision variable with the warm start (its TMPCs exchanged to obey
        the exchange rule, which makes no stage slower); returns its scaled objective."""
        m, d = self.m, self.data
        if self.tmpc_symmetry:
            warm = replace(warm, assign=d.canonical(warm.assign))
        for (v, i, c), var in self.x.items():
            m.AddHint(var, 1 if warm.assign[v] == (i, c) else 0)
        for (v, i), var in self.inv.items():
            m.AddHint(var, 1 if warm.assign[v][0] == i else 0)
        for (v, i), var in self.le.items():
            m.AddHint(var, 1 if warm.assign[v][0] <= i else 0)
        for (i, o), var in self.z.items():
            m.AddHint(var, 1 if warm.slot_opt.get(i) == o else 0)
        for i, var in self.used.items():
            m.AddHint(var, 1 if i in warm.slot_opt else 0)
        for (i, y), var in self.yb.items():
            m.AddHint(var, 1 if warm.slot_y.get(i) == y else 0)
        suffix = 0
        for i in range(d.slots, 0, -1):
            di = d.opts[warm.slot_opt[i]].d if i in warm.slot_opt else 0
            suffix += di
            m.AddHint(self.D[i], suffix)
            m.AddHint(self.dd[i], di if di else 1)
            m.AddHint(self.y[i], warm.slot_y.get(i, 0))
        worst, rvals = self.stage_int(warm)
        for key, var in self.r.items():
            m.AddHint(var, rvals.get(key, 0))
        m.AddHint(self.T, worst)
        for i, (ev, sv) in self.e.items():
            total = self.exposed_sum(warm, i)
            m.AddHint(ev, max(0, total))
            if sv is not None:
                m.AddHint(sv, total)
        if d.batch:
            sig = self.sigma_int(warm)
            for i, (tot, rho) in sig.items():
                m.AddHint(self.sig[i], tot)
                for key, val in rho.items():
                    m.AddHint(self.rho[key], val)
            for key, var in self.rho.items():
                if key not in sig[key[1]][1]:
                    m.AddHint(var, 0)
            top = max(sig, key=lambda i: sig[i][0])
            for i, (tot, _) in sig.items():
                m.AddHint(self.h[i], 1 if i == top else 0)
                m.AddHint(self.w[i], 0 if i == top else tot)
            worst = self.objective_int(warm)
            m.AddHint(self.obj, worst)
        return worst

    # ------------------------------------------------------------------ reading
    def read_plan(self, solver: cp_model.CpSolver) -> Plan | None:
        """The plan of ``solver``'s solution (None if some layer has no slot)."""
        return self.data.plan_from_choices((key for key, var in self.x.items() if solver.BooleanValue(var)), "CP-SAT")

    def stats(self) -> dict[str, Any]:
        """The model's size, scaling and tolerance, as every result's stats report them."""
        return {
            **self.size(),
            "precision_bits": self.precision_bits,
            "tau": self.data.tau,
            "epsilon": self.epsilon,
            "tolerance": 2 * self.epsilon,
            "memory_exact": self.memory_exact,
            "symmetry_clauses": self.symmetry_clauses,
        }

    def size(self) -> dict[str, int]:
        proto = self.m.Proto()
        return {
            "variables": len(proto.variables),
            "constraints": len(proto.constraints),
            "booleans": len(self.x) + len(self.z) + len(self.used) + len(self.inv) + len(self.yb),
            "memory_rows": self.mem_rows,
            "slots": self.data.slots,
            "options": len(self.data.opts),
        }


def build_model(data: ModelData, options: Options) -> CpsatModel:
    """The CP-SAT model of ``data`` with the model knobs of ``options.params``."""
    return CpsatModel(
        data,
        precision_bits=int(options.params.get("precision_bits", 30)),
        device_products=bool(options.params.get("device_products", True)),
        prefix_rows=bool(options.params.get("prefix_rows", True)),
        prefix_cut_edges=bool(options.params.get("prefix_cut_edges", True)),
        tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)),
    )

