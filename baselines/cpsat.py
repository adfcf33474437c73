r"""Exact CP-SAT model for Piper's partitioning problem (OR-Tools).

``solve_cpsat(problem, options)``. Same slots, options and choices as the MILP
(:mod:`baselines._model_data`), with reification instead of big-M and y as a division.
The variables and constraints, the integer scaling of times (tolerance 2ε) and memory,
the proof portfolio of a search below a warm start, the guards against OR-Tools 9.15's
wrong-OPTIMAL bug (google/or-tools#5293: ``presolve_inclusion_work_limit = 0``), the
optional ``verify`` and the split over option sequences are written once in
``docs/formulations.md`` (§3 the CP-SAT model, §4 warm starts and the split, §6
statuses and guards, §7 numerics, §8 version 2 and uniform plans). Measurements are in
``experiments/EXACT_MODELS.md``.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import reduce
from typing import Any

from ortools.sat.python import cp_model

from piper.options import Options
from piper.problem import Problem
from piper.result import Result, SolverError, Status

from ._model_data import Choice, ModelData, WarmStart, build_model_data, combine_results, guarded_result, node_parts
from ._split import SequenceAnswer, checked_sequences, solve_sequences, solve_sequences_ray, split_backend, split_mode

__all__ = ["solve_cpsat", "CpsatModel", "solver_parameters", "memory_scaling"]

#: the parameter that avoids OR-Tools 9.15's wrong-OPTIMAL bug on this model
GUARD_PARAMETERS: dict[str, Any] = {"presolve_inclusion_work_limit": 0}

#: A proof search (strict cutoff below a warm start) requests only complete tree searches,
#: in this order: CP-SAT's pure CP/SAT search with clause learning first (it found the
#: infeasibility proofs in ``experiments.bench_exact``), then the LP-based ones (OR-Tools
#: 9.15 runs the first num_workers - 1 of them, see the module docstring).
PROOF_SUBSOLVERS: tuple[str, ...] = ("no_lp", "default_lp", "max_lp", "quick_restart_no_lp", "quick_restart",
                                     "reduced_costs", "pseudo_costs", "core")
#: ... and none of the first-solution and neighbourhood heuristics, which only look for
#: plans (there is usually none below an optimal warm start) and took CPU time from them
PROOF_PARAMETERS: dict[str, Any] = {"use_feasibility_jump": False, "use_lns": False, "use_feasibility_pump": False}


def memory_scaling(values: list[float], limit: float) -> tuple[list[int], int, bool]:
    """Integers for memory coefficients ``values`` and the limit (see module docstring).

    Returns (scaled values, scaled limit, exact?).
    """
    allv = values + [limit]
    for j in range(7):
        f = 10**j
        scaled = [v * f for v in allv]
        if all(abs(s - round(s)) <= 1e-9 * max(1.0, abs(s)) for s in scaled):
            ints = [int(round(s)) for s in scaled]
            g = reduce(math.gcd, ints) or 1
            ints = [i // g for i in ints]
            return ints[:-1], ints[-1], True
    unit = limit / 2**30
    return [math.ceil(v / unit - 1e-12) for v in values], 2**30, False


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
        p = precision_bits
        while p > 8 and mass * 2**p > 2**60:
            p -= 1
        self.precision_bits = p
        self.unit = 2**p  # model units per τ
        #: |T_int·τ/2^P - TPS| <= epsilon for every plan (problem time units)
        self.epsilon = (n + m_edges) * data.tau / 2 ** (p + 1)
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
        limit = d.problem.memory_per_device * (d.memory_factor)
        if any(c.tmpc.memory_sharded for c in allc):
            # version 2: b + s/d, all multiplied by the lcm of the d's so that byte counts
            # stay integers (exact scaling)
            lcm = reduce(lambda a, b: a * b // math.gcd(a, b), {opts[c.opt].d for c in allc}, 1)
            mem_vals = ([c.tmpc.memory_a * lcm for c in allc]
                        + [c.tmpc.memory_b * lcm + c.tmpc.memory_sharded * (lcm // opts[c.opt].d) for c in allc])
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
            m.AddExactlyOne([inv[(v, i)] for i in range(1, d.max_slot[v] + 1)])
            for i in range(1, d.max_slot[v] + 1):
                m.Add(inv[(v, i)] == sum(var for o in d.slot_opts[i] for _, var in xs_vio.get((v, i, o), ())))
        for i in range(1, L + 1):
            for o in d.slot_opts[i]:
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
                worst = sum(max(ma[id(c)] * y + mb[id(c)] for c in cs) for cs in per_node.values())
                if worst <= mint:
                    continue
                m.Add(sum((ma[id(c)] * y + mb[id(c)]) * var for c, var in members) <= mint).OnlyEnforceIf(yb[(i, y)])
                self.mem_rows += 1
        # cut edges
        r: dict[tuple[int, int], cp_model.IntVar] = {}
        edge_top: dict[int, int] = {}
        for j, (a, b) in enumerate(d.edges):
            for i in range(1, L + 1):
                rows = []
                if i >= 2:
                    terms = [(q(c.gin[j]), var) for o in d.slot_opts[i] for c, var in xs_vio.get((b, i, o), ())]
                    terms = [(g, var) for g, var in terms if g > 0]
                    if terms:
                        rows.append((terms, a))
                terms = [(q(c.gout[j]), var) for o in d.slot_opts[i] for c, var in xs_vio.get((a, i, o), ())]
                terms = [(g, var) for g, var in terms if g > 0]
                if terms:
                    rows.append((terms, b))
                if not rows:
                    continue
                top = max(g for terms, _ in rows for g, _ in terms)
                edge_top[j] = max(edge_top.get(j, 0), top)
                rv = r[(j, i)] = m.NewIntVar(0, top, f"r_{j}_{i}")
                for terms, other in rows:
                    ct = m.Add(rv >= sum(g * var for g, var in terms))
                    if (other, i) in inv:
                        ct.OnlyEnforceIf(inv[(other, i)].Not())
        self.r = r
        # objective
        # no stage is slower than all layers' slowest terms plus every edge's largest charge
        t_ub = sum(max((q(c.kappa) for c in d.choices[v]), default=0) for v in nodes) + sum(edge_top.values())
        self.t_ub = t_ub
        T = self.T = m.NewIntVar(0, max(1, t_ub), "T")
        r_i: dict[int, list[cp_model.IntVar]] = {}
        for (j, i), rv in r.items():
            r_i.setdefault(i, []).append(rv)
        for i in range(1, L + 1):
            m.Add(T >= sum(q(c.kappa) * var for (v, h, c), var in x.items() if h == i) + sum(r_i.get(i, [])))
        m.Add(S * T >= sum(opts[c.opt].d * q(c.kappa) * var for (v, i, c), var in x.items()))
        m.Add(k * T >= sum(opts[c.opt].t * opts[c.opt].d * q(c.kappa) * var for (v, i, c), var in x.items()))
        xs_v: dict[int, list[tuple[Choice, cp_model.IntVar]]] = {}
        for (v, i, c), var in x.items():
            xs_v.setdefault(v, []).append((c, var))
        for v in nodes:
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
        m.Minimize(T)

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
                for e, g in c.gin.items():
                    if warm.assign[d.edges[e][0]][0] != i and (e, i) in self.r:
                        rvals[(e, i)] = rvals.get((e, i), 0) + q(g)
                for e, g in c.gout.items():
                    if warm.assign[d.edges[e][1]][0] != i and (e, i) in self.r:
                        rvals[(e, i)] = rvals.get((e, i), 0) + q(g)
            tot += sum(val for (e, h), val in rvals.items() if h == i)
            worst = max(worst, tot)
        return worst, rvals

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
        return worst

    # ------------------------------------------------------------------ reading
    def read_plan(self, solver: cp_model.CpSolver):
        assign: dict[int, tuple[int, Choice]] = {}
        for (v, i, c), var in self.x.items():
            if solver.BooleanValue(var):
                if v in assign:
                    raise SolverError(f"CP-SAT solution puts layer {v} in two places: model bug")
                assign[v] = (i, c)
        if len(assign) != len(self.data.choices):
            return None
        return self.data.plan_from_slots(assign)

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


def solver_parameters(options: Options, time_limit: float | None, *, proof: bool = False) -> cp_model.CpSolver:
    """A CpSolver configured from ``options`` (threads, time limit, seed, guard).

    ``proof``: the model is a proof search below a warm start; unless
    ``params["proof_portfolio"]`` is False, the first ``num_workers`` of
    :data:`PROOF_SUBSOLVERS` are requested (OR-Tools runs fewer, see the module docstring)
    and the heuristics of :data:`PROOF_PARAMETERS` are off.
    """
    solver = cp_model.CpSolver()
    p = solver.parameters
    params = dict(options.params)
    p.num_workers = int(params.get("num_workers", max(1, int(options.threads))))
    if proof and params.get("proof_portfolio", True):
        for key, val in PROOF_PARAMETERS.items():
            setattr(p, key, val)
        if p.num_workers > 1:
            p.subsolvers.extend(PROOF_SUBSOLVERS[: p.num_workers])
    p.random_seed = int(options.seed)
    p.relative_gap_limit = 0.0
    p.absolute_gap_limit = 0.0
    p.log_search_progress = bool(params.get("msg", options.progress))
    if time_limit is not None:
        p.max_time_in_seconds = max(0.01, float(time_limit))
    for key, val in {**GUARD_PARAMETERS, **dict(params.get("cp_params", {}))}.items():
        if val is None:
            continue  # None = leave the OR-Tools default (the regression test's "no guard")
        try:
            if isinstance(val, (list, tuple)):
                field = getattr(p, key)
                field.clear()
                field.extend(val)
            else:
                setattr(p, key, val)
        except AttributeError:  # the guard's field too: ortools >= 9.14 has it
            raise SolverError(f"unknown CP-SAT parameter {key!r}") from None
        except (TypeError, ValueError):  # protobuf's message spans lines: name the type instead
            current = getattr(p, key)
            shown = list(current) if isinstance(val, (list, tuple)) else current
            raise SolverError(f"CP-SAT parameter {key!r} cannot be {val!r} (it is now {shown!r}, of type "
                              f"{type(shown).__name__})") from None
    return solver


_STATUS = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}


def solve_cpsat(problem: Problem, options: Options | None = None) -> Result:
    """Solve ``problem`` exactly (up to the documented 2ε) with CP-SAT.

    ``options.params``: ``num_workers`` (default ``options.threads``), ``msg`` (search
    log), ``precision_bits`` (P, default 30), ``verify`` (re-prove an optimum with
    presolve off), ``cp_params`` (extra CP-SAT parameters; a value None leaves the
    default, e.g. {"presolve_inclusion_work_limit": None} switches the guard off),
    ``strict_cutoff`` (default True: a warm start makes a proof search below it; False
    hints it), ``proof_portfolio`` (default True: a proof search runs
    :data:`PROOF_SUBSOLVERS` only), ``device_products`` (default True: the bin-packing rows),
    ``prefix_rows`` (default True: the prefix / suffix device-time rows of a proof search),
    ``prefix_cut_edges`` (default True: their crossing-edge terms), ``tmpc_symmetry``
    (default True: the TMPC exchange rule of repeated layers), ``split`` ("none" or
    "sequences": the proof search below the warm start split over the stages' option
    sequences, :mod:`baselines._split`; needs a warm start), ``max_sequences`` (default
    20,000: the split refuses instances with more sequences), ``split_workers`` (default
    ``threads``: that many single-worker searches of the split at once),
    ``split_backend`` ("threads", default, or "ray": the split's sequences as Ray tasks
    sharing the cutoff, :func:`baselines._split.solve_sequences_ray`), ``ray_address``
    (the Ray cluster; default ``RAY_ADDRESS``, else a local Ray instance).
    """
    options = options or Options()
    start = time.perf_counter()
    deadline = None if options.time_limit_s is None else start + float(options.time_limit_s)
    parts = node_parts(problem)
    if len(parts) == 1:  # G >= k (every version-1 instance): one model, edges at B_in
        return _solve_part(problem, options, parts[0], start, deadline, split_fallback=False)
    # G < k: plans inside one node (edges at B_in) and plans spanning nodes (edges at B),
    # one model each; the better plan wins, "optimal" only when both are proven
    results = {part: _solve_part(problem, options, part, time.perf_counter(), deadline, split_fallback=True)
               for part in parts}
    return combine_results(problem, "cpsat", results, time_s=time.perf_counter() - start)


def _build_model(data: ModelData, options: Options) -> CpsatModel:
    """The CP-SAT model of ``data`` with the model knobs of ``options.params``."""
    return CpsatModel(
        data,
        precision_bits=int(options.params.get("precision_bits", 30)),
        device_products=bool(options.params.get("device_products", True)),
        prefix_rows=bool(options.params.get("prefix_rows", True)),
        prefix_cut_edges=bool(options.params.get("prefix_cut_edges", True)),
        tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)),
    )


def _solve_part(problem: Problem, options: Options, part: str, start: float, deadline: float | None, *,
                split_fallback: bool) -> Result:
    """:func:`solve_cpsat` on one part of the plan space (``_model_data.node_parts``).
    ``split_fallback``: a part the warm start is not in is solved unsplit (the split needs
    it) instead of refused."""
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        return guarded_result(
            data, "cpsat", Status.INFEASIBLE, None, time_s=time.perf_counter() - start, objective=None,
            bound=math.inf, tolerance=0.0, warm=None, stats={"variables": 0, "constraints": 0},
            message=data.infeasible_reason,
        )
    def build() -> CpsatModel:
        return _build_model(data, options)

    split = split_mode(options.params)
    model = build()
    warm = None
    strict = False
    stats: dict[str, Any] = {}
    if options.warm_start is not None:
        warm = data.slots_from_plan(options.warm_start)
        if warm is None:
            stats["warm_start"] = data.warm_message
    if split == "sequences" and warm is None and split_fallback:
        split = "none"
        stats["split"] = f"part {part!r} solved without the split (it needs a warm start in this part)"
    if split == "sequences":
        if warm is None:
            raise SolverError("params['split'] = 'sequences' splits a proof search below a warm start: "
                              "give a usable warm start (e.g. the DP's plan)"
                              + (f"; this one is not: {data.warm_message}" if options.warm_start is not None else ""))
        status, plan, objective, bound, eps, stats = _split_search(data, options, warm, deadline, model, build, start)
        status, bound = _restricted_memory(model, status, bound, stats)
        return guarded_result(
            data, "cpsat", status, plan, time_s=time.perf_counter() - start, objective=objective, bound=bound,
            tolerance=2 * eps, warm=warm, stats=stats,
        )
    if warm is not None:
        strict = bool(options.params.get("strict_cutoff", True))
        if strict:
            worst, _ = model.stage_int(warm)
            model.add_cutoff(worst - 1)  # only strictly better plans: a proof search
            stats["warm_start"] = f"strict cutoff below the warm start (TPS {warm.tps!r})"
        else:
            worst = model.add_hint(warm)
            model.m.Add(model.T <= worst)  # the hint stays feasible; worse plans are cut
            stats["warm_start"] = f"hinted (TPS {warm.tps!r})"
    build_s = time.perf_counter() - start
    remaining = None if deadline is None else max(0.01, deadline - time.perf_counter())
    solver = solver_parameters(options, remaining, proof=strict)
    code = solver.Solve(model.m)
    if code == cp_model.MODEL_INVALID:
        raise SolverError(f"CP-SAT rejected the model: {model.m.Validate()}")
    status = _STATUS.get(code, Status.UNKNOWN)
    unit = data.tau / model.unit
    eps = model.epsilon
    plan = objective = None
    bound = 0.0
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        plan = model.read_plan(solver)
        objective = solver.ObjectiveValue() * unit
        bound = max(0.0, solver.BestObjectiveBound() * unit - eps)
    elif status == Status.INFEASIBLE:
        bound = math.inf
    if strict:
        if status == Status.INFEASIBLE:  # no plan with T_int <= worst - 1: the warm start is optimal
            status, plan, objective, bound = Status.OPTIMAL, warm.plan, worst * unit, max(0.0, worst * unit - eps)
        elif status == Status.UNKNOWN:
            status, plan, objective = Status.FEASIBLE, warm.plan, worst * unit
            bound = max(0.0, min(solver.BestObjectiveBound(), worst) * unit - eps)
    stats.update(
        {
            **model.stats(),
            "build_s": build_s,
            "solve_s": solver.WallTime(),
            "num_workers": solver.parameters.num_workers,
            "requested_subsolvers": list(solver.parameters.subsolvers),
            "presolve_inclusion_work_limit": solver.parameters.presolve_inclusion_work_limit,
            "cp_status": solver.StatusName(code),
        }
    )
    if status == Status.OPTIMAL and options.params.get("verify"):
        status, plan, objective, bound = _verify(model, solver, options, deadline, status, plan, objective, bound, stats)
    status, bound = _restricted_memory(model, status, bound, stats)
    return guarded_result(
        data, "cpsat", status, plan, time_s=time.perf_counter() - start, objective=objective, bound=bound,
        tolerance=2 * eps, warm=warm, stats=stats,
    )


def _restricted_memory(model: CpsatModel, status: Status, bound: float, stats: dict[str, Any]) -> tuple[Status, float]:
    """When the memory numbers could not be scaled to integers exactly, the model rounds
    a and b up and M down (:func:`memory_scaling`): it is a restriction of the problem, so
    its proofs are no proofs of the problem's optimum or infeasibility. "optimal" becomes
    "feasible" (the plan fits: the evaluator checks it) with no bound from the search, and
    "infeasible" becomes "unknown" (docs/formulations.md §6)."""
    if model.memory_exact or status not in (Status.OPTIMAL, Status.INFEASIBLE):
        return status, bound
    stats.setdefault("guards", []).append(
        "memory scaled inexactly (rounded conservatively): the model is a restriction, its proof is not one "
        "for the problem")
    return (Status.FEASIBLE, 0.0) if status == Status.OPTIMAL else (Status.UNKNOWN, 0.0)


def _solve_sequence(model: CpsatModel, sub: Options, msg: bool, seq: tuple[int, ...], worst: int,
                    remaining: float | None, stale: Callable[[], bool] | None = None) -> SequenceAnswer:
    """One sequence of the split: a copy of ``model`` (its cutoff ``worst - 1`` added) with
    z[i, o_i] = 1 for its slots and the next slot unused, solved as a proof search. With
    ``stale``, a watcher stops the search once it returns True (a better plan was found
    elsewhere: the answer is then "stale")."""
    if remaining is not None and remaining <= 0.01:
        return SequenceAnswer("stop", "not started")
    data = model.data
    m = model.m.Clone()
    for i, o in enumerate(seq, 1):
        m.Add(m.GetBoolVarFromProtoIndex(model.z[(i, o)].Index()) == 1)
    if len(seq) < data.slots:
        m.Add(m.GetBoolVarFromProtoIndex(model.used[len(seq) + 1].Index()) == 0)
    solver = solver_parameters(sub, remaining, proof=True)
    # the split's progress lines replace CP-SAT's log (one per subproblem) unless asked
    solver.parameters.log_search_progress = msg
    done, went_stale = threading.Event(), threading.Event()
    if stale is not None:
        def watch() -> None:
            while not done.wait(0.25):
                if stale():
                    went_stale.set()
                    solver.StopSearch()
                    return

        threading.Thread(target=watch, daemon=True).start()
    try:
        code = solver.Solve(m)
    finally:
        done.set()
    name = solver.StatusName(code)
    if code == cp_model.INFEASIBLE:
        return SequenceAnswer("refuted", name)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SequenceAnswer("stale" if went_stale.is_set() else "stop", name)
    assign = {v: (i, c) for (v, i, c), var in model.x.items()
              if solver.BooleanValue(m.GetBoolVarFromProtoIndex(var.Index()))}
    plan_found = data.slots_from_plan(data.plan_from_slots(assign))
    value = None if plan_found is None else model.stage_int(plan_found)[0]
    if value is None or value >= worst:
        raise SolverError(f"CP-SAT found a plan at or above the cutoff in sequence {seq}: model bug")
    return SequenceAnswer("found", name, value, plan_found, value - 1)


@dataclass(frozen=True)
class _RayContext:
    """What a Ray worker needs to rebuild the model of the split (:func:`_ray_sequence`)."""

    key: str
    data: ModelData
    sub: Options
    msg: bool


#: the model of the split in this Ray worker process: (context key, cutoff) -> model
_RAY_MODELS: dict[tuple[str, int], CpsatModel] = {}


def _ray_sequence(ctx: _RayContext, seq: tuple[int, ...], cutoff: float, stale: Callable[[], bool],
                  remaining: float | None) -> SequenceAnswer:
    """One sequence on a Ray worker (:func:`baselines._split.solve_sequences_ray`), below
    the shared cutoff (T <= ``cutoff``); the model is built once per worker and cutoff."""
    cut = int(cutoff)
    model = _RAY_MODELS.get((ctx.key, cut))
    if model is None:
        _RAY_MODELS.clear()
        model = _build_model(ctx.data, ctx.sub)
        model.add_cutoff(cut)
        _RAY_MODELS[(ctx.key, cut)] = model
    return _solve_sequence(model, ctx.sub, ctx.msg, seq, cut + 1, remaining, stale)


def _split_search(data: ModelData, options: Options, warm: WarmStart, deadline: float | None, model: CpsatModel,
                  build, start: float):
    """The proof search below ``warm`` split over option sequences (:mod:`baselines._split`).

    Each sequence is a copy of the model with z[i, o_i] = 1 for its slots and the next
    slot unused, solved as a proof search (:func:`_solve_sequence`). A refuted
    (infeasible) copy rules the sequence out; a copy that finds a plan below the cutoff
    makes it the incumbent, the cutoff moves below it (the model is rebuilt) and the same
    sequence is searched again. Every sequence refuted: the incumbent is optimal. On
    threads (default) or, with ``params["split_backend"] = "ray"``, as Ray tasks
    (:func:`baselines._split.solve_sequences_ray`). Returns (status, plan, objective,
    bound, ε, stats) in problem units.
    """
    unit = data.tau / model.unit
    eps = model.epsilon
    best, (worst, _) = warm, model.stage_int(warm)
    model.add_cutoff(worst - 1)
    refuted: set[tuple[int, ...]] = set()
    improved = 0
    code_counts: dict[str, int] = {}
    msg = bool(options.params.get("msg", False))

    def sequences(cutoff: float) -> list[tuple[int, ...]]:
        return checked_sequences(data, cutoff, lambda c: model.q(c.kappa), options.params)

    seqs = sequences(worst - 1)
    total = len(seqs)
    build_s = time.perf_counter() - start
    # that many single-worker CP-SAT searches at once (split_workers = 1: one at a time,
    # each with options.threads workers)
    workers = max(1, int(options.params.get("split_workers", options.threads)))
    sub = options if workers == 1 else replace(options, threads=1, params={**options.params, "num_workers": 1})
    backend = split_backend(options.params)
    if backend == "ray":
        ctx = _RayContext(uuid.uuid4().hex, data, replace(options, threads=1, params={**options.params, "num_workers": 1}),
                          msg)
        run = solve_sequences_ray(seqs, _ray_sequence, ctx, worst - 1, sequences_at=sequences, deadline=deadline,
                                  address=options.params.get("ray_address"),
                                  progress="cpsat split" if options.progress else None)
        refuted, code_counts, improved, timed_out = run.refuted, run.codes, run.improved, run.stopped
        if run.best is not None:
            worst, best = run.best  # type: ignore[assignment]
        seqs = sequences(worst - 1)
        workers = -1
    while backend == "threads":
        current = model

        def solve_one(_worker: int, seq: tuple[int, ...]) -> tuple[str, object]:
            remaining = None if deadline is None else deadline - time.perf_counter()
            answer = _solve_sequence(current, sub, msg, seq, worst, remaining)
            return answer.outcome, (answer.code, None if answer.value is None else (answer.value, answer.plan))

        def record(seq: tuple[int, ...], outcome: str, payload: Any) -> None:
            code_counts[payload[0]] = code_counts.get(payload[0], 0) + 1
            if outcome == "refuted":
                refuted.add(seq)

        def line() -> str:
            return (f"cpsat split: {len(refuted)} sequences refuted ({len(seqs)} at the current cutoff), "
                    f"{time.perf_counter() - start:.1f} s")

        found, timed_out = solve_sequences([s for s in seqs if s not in refuted], solve_one, record, workers,
                                           line if options.progress else None)
        if found:
            value, plan_found = min((p[1] for p in found), key=lambda f: f[0])  # type: ignore[index]
            best, worst, improved = plan_found, value, improved + len(found)
            model = build()
            model.add_cutoff(worst - 1)
            seqs = sequences(worst - 1)  # a subset of the old list (the cutoff only went down)
        if timed_out or not found:
            break
    stats: dict[str, Any] = {
        **model.stats(),
        "build_s": build_s,
        "num_workers": int(options.params.get("num_workers", max(1, int(options.threads)))),
        "warm_start": f"split proof search below the warm start (TPS {warm.tps!r})",
        "split": {"mode": "sequences", "sequences": total, "remaining_at_cutoff": len(seqs),
                  "refuted": len(refuted), "improved": improved, "cp_status": code_counts,
                  "workers": workers if backend == "threads" else "ray", "backend": backend},
    }
    objective = worst * unit
    if not timed_out:
        return Status.OPTIMAL, best.plan, objective, max(0.0, objective - eps), eps, stats
    return Status.FEASIBLE, best.plan, objective, 0.0, eps, stats


def _verify(model: CpsatModel, solver: cp_model.CpSolver, options: Options, deadline: float | None,
            status: Status, plan, objective, bound, stats: dict[str, Any]):
    """Second opinion on an OPTIMAL claim: is there a plan with T <= T_opt - 1 (presolve off)?"""
    t_opt = int(round(solver.ObjectiveValue()))
    unit = model.data.tau / model.unit
    check = model.m.Clone()
    check.ClearObjective()
    t_var = check.GetIntVarFromProtoIndex(model.T.Index())
    check.Add(t_var <= t_opt - 1)
    remaining = None if deadline is None else max(0.01, deadline - time.perf_counter())
    s2 = solver_parameters(options, remaining, proof=True)  # a proof search too: below T_opt
    s2.parameters.cp_model_presolve = False
    code = s2.Solve(check)
    stats["verify"] = s2.StatusName(code)
    if code == cp_model.INFEASIBLE:
        return status, plan, objective, bound
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        stats.setdefault("guards", []).append(
            f"verify: CP-SAT claimed optimum {t_opt} but a plan with T = {s2.Value(t_var)} "
            "exists: solver bug; returning the better plan as feasible"
        )
        assign: dict[int, tuple[int, Choice]] = {}
        for (v, i, c), var in model.x.items():
            if s2.BooleanValue(check.GetBoolVarFromProtoIndex(var.Index())):
                assign[v] = (i, c)
        better = model.data.plan_from_slots(assign)
        return Status.FEASIBLE, better, s2.Value(t_var) * unit, 0.0
    stats.setdefault("guards", []).append("verify: the second opinion ran out of time; optimum unconfirmed")
    return Status.FEASIBLE, plan, objective, bound
