"""The MILP's model (docs/formulations.md §2): :class:`MilpModel`, the PuLP problem and its
variables for one instance (rows (A)-(K), (X), (E'), (U), and (E) with the iteration keys of
docs/problem.md §10 (docs/formulations.md §12); under the batch-time objective
also (Hσ), (Iσ), (M), (Σ) of docs/formulations.md §9), with its warm start, the bounds
that fix one option sequence of the split and the plan read back; :func:`build_model`
builds it with the model knobs of the options; :func:`build_milp`, :func:`write_lp` and
:func:`write_mps` write it for other solvers. With a warm start the model is
built below a cutoff (docs/formulations.md §4.2, :data:`CUTOFF_REL`); when G < k it is one
part of two ("inside" or "spanning", docs/formulations.md §8). Coefficients and domain
reductions come from :mod:`baselines.exact.model_data`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pulp

from baselines.exact.model_data import Choice, ModelData, WarmStart, build_model_data
from baselines.exact.sequences import sequence_y
from baselines.milp.cbc import quiet_pulp
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.core.stopping import checkpoint

#: with a warm start, the model only looks for plans at least this much (relative) better
CUTOFF_REL = 1e-6


def _edge_terms(charge: Callable[..., tuple[list, list]], i: int, j: int, a: int, b: int,
               inn: Callable[[Choice], dict[int, float]],
               out: Callable[[Choice], dict[int, float]]) -> list[tuple[list, list, str]]:
    """The rows (H) of edge j = (a, b) at slot i as (pos_terms, neg_terms, side): the
    in-side, charged to the head b's slot when a is elsewhere (i >= 2 only), then the
    out-side; ``inn``/``out`` pick a choice's per-edge charges (γ or σ)."""
    terms = []
    if i >= 2:
        pos_terms, neg_terms = charge(i, j, b, a, inn)
        if pos_terms:
            terms.append((pos_terms, neg_terms, "in"))
    pos_terms, neg_terms = charge(i, j, a, b, out)
    if pos_terms:
        terms.append((pos_terms, neg_terms, "out"))
    return terms


class MilpModel:
    """The PuLP problem and its variables for one instance (see the module docstring)."""

    def __init__(self, data: ModelData, cutoff: float | None = None, *, tmpc_symmetry: bool = True) -> None:
        """``cutoff`` (in units of τ): only plans whose objective (T, or the batch time
        N·T + Σσ - max σ) is <= cutoff are wanted (module docstring); ``tmpc_symmetry``:
        add the rows (X)."""
        with quiet_pulp():
            self._init(data, cutoff, tmpc_symmetry)

    def _init(self, data: ModelData, cutoff: float | None, tmpc_symmetry: bool = True) -> None:
        self.data = data
        self.cutoff = cutoff
        self.tmpc_symmetry = tmpc_symmetry
        #: rows (X) added
        self.symmetry_rows = 0
        self.prob = pulp.LpProblem("piper", pulp.LpMinimize)
        self.x: dict[tuple[int, int, Choice], pulp.LpVariable] = {}
        self.u: dict[tuple[int, int, int], pulp.LpVariable] = {}
        self.r: dict[tuple[int, int], pulp.LpVariable] = {}
        #: slot -> e_i, its exposed resync (iteration keys only, rows (E))
        self.e: dict[int, pulp.LpVariable] = {}
        #: the cutoff on T (the batch time's is N times it, docs/formulations.md §9)
        self.tps_cut = None if cutoff is None else data.tps_cutoff(cutoff)
        self.T = pulp.LpVariable("T", lowBound=0, upBound=self.tps_cut)
        #: the objective variable: T, or the batch time's (rows (Σ), :meth:`_batch_rows`)
        self.obj = self.T
        #: batch time: slot -> σ_i, (edge, slot) -> its σ charge, slot -> designated flag
        #: h_i and its share m_i of max σ
        self.sig: dict[int, pulp.LpVariable] = {}
        self.rho: dict[tuple[int, int], pulp.LpVariable] = {}
        self.h: dict[int, pulp.LpVariable] = {}
        self.mm: dict[int, pulp.LpVariable] = {}
        self._build()

    # ------------------------------------------------------------------ model
    def _build(self) -> None:
        d, prob = self.data, self.prob
        L, S = d.slots, d.s_max
        k, N = d.devices, d.problem.microbatches  # k: this part's device budget (min(k, G) inside)
        opts = d.opts
        nodes = [nd.id for nd in d.problem.nodes]
        pos = {v: p for p, v in enumerate(nodes)}
        lsum = pulp.lpSum

        # variables
        x = self.x
        for v in nodes:
            checkpoint("building the MILP (variables)")
            for i in range(1, d.max_slot[v] + 1):
                allowed = set(d.slot_opts[i])
                for c in d.choices[v]:
                    if c.opt in allowed and (self.tps_cut is None or c.kappa <= self.tps_cut):
                        x[(v, i, c)] = pulp.LpVariable(f"x_{pos[v]}_{i}_{c.opt}_{c.tmpc_index}", cat="Binary")
        placed = {v for (v, _, _) in x}
        self.unplaceable = [v for v in nodes if v not in placed]
        if self.unplaceable:
            return  # no plan under the cutoff: nothing to build
        u = self.u
        for (i, o), ymax in d.y_max.items():
            for y in range(1, ymax + 1):
                u[(i, o, y)] = pulp.LpVariable(f"u_{i}_{o}_{y}", cat="Binary")
        T = self.T

        # index helpers
        xs_vio: dict[tuple[int, int, int], list[tuple[Choice, pulp.LpVariable]]] = {}
        for (v, i, c), var in x.items():
            xs_vio.setdefault((v, i, c.opt), []).append((c, var))
        xs_i: dict[int, list[tuple[int, Choice, pulp.LpVariable]]] = {}
        for (v, i, c), var in x.items():
            xs_i.setdefault(i, []).append((v, c, var))
        z = {(i, o): lsum(u[(i, o, y)] for y in range(1, d.y_max[(i, o)] + 1)) for (i, o) in d.y_max}
        used = {i: lsum(z[(i, o)] for o in d.slot_opts[i]) for i in range(1, L + 1)}
        inv = {
            (v, i): lsum(var for o in d.slot_opts[i] for _, var in xs_vio.get((v, i, o), ()))
            for v in nodes
            for i in range(1, L + 1)
        }
        dsum = {i: lsum(opts[o].d * z[(i, o)] for o in d.slot_opts[i]) for i in range(1, L + 1)}
        self.z, self.used, self.inv = z, used, inv

        prob += T  # objective

        # (A)
        for v in nodes:
            checkpoint("building the MILP (rows A)")
            prob += lsum(inv[(v, i)] for i in range(1, d.max_slot[v] + 1)) == 1, f"A_{pos[v]}"
        # (B) and (C)
        for i in range(1, L + 1):
            for o in d.slot_opts[i]:
                checkpoint("building the MILP (rows B, C)")
                members = [var for v in nodes for _, var in xs_vio.get((v, i, o), ())]
                for v in nodes:
                    lst = xs_vio.get((v, i, o))
                    if lst:
                        prob += lsum(var for _, var in lst) <= z[(i, o)], f"B_{pos[v]}_{i}_{o}"
                prob += z[(i, o)] <= lsum(members), f"Cne_{i}_{o}"
            prob += used[i] <= 1, f"Bused_{i}"
            if i < L:
                prob += used[i + 1] <= used[i], f"Cord_{i}"
        # (X) the TMPC exchange rule of repeated layers
        if self.tmpc_symmetry:
            for xu, xv in d.excluded_pairs(x):
                self.symmetry_rows += 1
                prob += xu + xv <= 1, f"X_{self.symmetry_rows}"
        # (D), through cum[v,i] = Σ_{h<=i} in[v,h] (continuous; = 1 from v's last
        # possible slot on): the same LP with O(n·L·|x|) instead of O(m·L²·|x|) nonzeros
        cum: dict[tuple[int, int], Any] = {}
        for v in nodes:
            checkpoint("building the MILP (rows D)")
            prev = None
            for i in range(1, L):
                if i >= d.max_slot[v]:
                    cum[(v, i)] = 1
                    continue
                var = pulp.LpVariable(f"cum_{pos[v]}_{i}", lowBound=0, upBound=1)
                prob += var == (inv[(v, i)] if prev is None else prev + inv[(v, i)]), f"Dcum_{pos[v]}_{i}"
                cum[(v, i)] = prev = var
        for j, (a, b) in enumerate(d.edges):
            checkpoint("building the MILP (rows D)")
            for i in range(1, L):
                ca, cb = cum[(a, i)], cum[(b, i)]
                if isinstance(ca, int):
                    continue  # cum[b,i] <= 1 holds anyway
                prob += cb <= ca, f"D_{j}_{i}"
        # (E)
        prob += lsum(opts[o].t * opts[o].d * z[(i, o)] for (i, o) in z) <= k, "E_devices"
        prob += lsum(opts[o].d * z[(i, o)] for (i, o) in z) <= N, "E_microbatches"
        if d.min_devices > 0:  # the "spanning" part: plans across nodes only (version 2)
            prob += lsum(opts[o].t * opts[o].d * z[(i, o)] for (i, o) in z) >= d.min_devices, "E_span"
        # (U) uniform plans: every used slot takes slot 1's option
        if d.uniform:
            for (i, o) in z:
                if i >= 2:
                    prob += z[(i, o)] <= z[(1, o)], f"U_{i}_{o}"
        # (F)
        for i in range(1, L + 1):
            D_i = lsum(dsum[j] for j in range(i, L + 1))
            hi = lsum(opts[o].d * y * u[(i, o, y)] for o in d.slot_opts[i] for y in range(1, d.y_max[(i, o)] + 1))
            lo = lsum(
                (opts[o].d * (y - 1) + 1) * u[(i, o, y)]
                for o in d.slot_opts[i]
                for y in range(1, d.y_max[(i, o)] + 1)
            )
            prob += D_i <= hi, f"Fhi_{i}"
            prob += D_i >= lo, f"Flo_{i}"
        # (G)
        for (i, o), ymax in d.y_max.items():
            checkpoint("building the MILP (rows G)")
            per_node = [(v, xs_vio.get((v, i, o), [])) for v in nodes]
            per_node = [(v, lst) for v, lst in per_node if lst]
            if not per_node:
                continue
            for y in range(1, ymax + 1):
                worst = sum(max(c.mem_a * y + c.mem_b for c, _ in lst) for _, lst in per_node)
                bm = worst - 1.0
                if bm <= 0:
                    continue
                lhs = lsum((c.mem_a * y + c.mem_b) * var for _, lst in per_node for c, var in lst)
                ge = lsum(u[(i, o, yy)] for yy in range(y, ymax + 1))
                if y == 1:
                    prob += lhs <= z[(i, o)], f"G_{i}_{o}_{y}"
                else:
                    prob += lhs <= z[(i, o)] + bm * (z[(i, o)] - ge), f"G_{i}_{o}_{y}"
        # (H)
        r = self.r
        Terms = list[tuple[float, pulp.LpVariable]]

        def charge(i: int, j: int, payer: int, other: int,
                   side: Callable[[Choice], dict[int, float]]) -> tuple[Terms, Terms]:
            """The terms of slot i's row (H) for edge j charged to ``payer``'s stage when
            ``other`` is elsewhere, γ = ``side(choice)[j]``: (+γ x of payer, -max γ x of other)."""
            pos_terms: Terms = []
            neg_terms: Terms = []
            for o in d.slot_opts[i]:
                lst = xs_vio.get((payer, i, o), [])
                if not lst:
                    continue
                gmax = max(side(c)[j] for c, _ in lst)
                if gmax <= 0:
                    continue
                pos_terms += [(side(c)[j], var) for c, var in lst if side(c)[j] > 0]
                neg_terms += [(gmax, var) for _, var in xs_vio.get((other, i, o), [])]
            return pos_terms, neg_terms

        for j, (a, b) in enumerate(d.edges):
            checkpoint("building the MILP (rows H)")
            for i in range(1, L + 1):
                terms = _edge_terms(charge, i, j, a, b, lambda c: c.gin, lambda c: c.gout)
                if not terms:
                    continue
                rv = r[(j, i)] = pulp.LpVariable(f"r_{j}_{i}", lowBound=0)
                for pos_terms, neg_terms, side in terms:
                    prob += (
                        rv >= lsum(g * var for g, var in pos_terms) - lsum(g * var for g, var in neg_terms),
                        f"H{side}_{j}_{i}",
                    )
        # (I)
        r_i: dict[int, list[pulp.LpVariable]] = {}
        for (j, h), rv in r.items():
            r_i.setdefault(h, []).append(rv)
        # (E) iteration keys (docs/problem.md §10): slot i's exposed resync e_i >= max(0, Σ rex x)
        if d.iteration:
            for i in range(1, L + 1):
                terms = [(c.rex, var) for _, c, var in xs_i.get(i, []) if c.rex != 0.0]
                if any(g > 0 for g, _ in terms):
                    ev = self.e[i] = pulp.LpVariable(f"e_{i}", lowBound=0)
                    prob += ev >= lsum(g * var for g, var in terms), f"E_{i}"
        for i in range(1, L + 1):
            prob += (T >= lsum(c.kappa * var for _, c, var in xs_i.get(i, [])) + lsum(r_i.get(i, []))
                     + (self.e[i] if i in self.e else 0), f"I_{i}")

        # (J)
        checkpoint("building the MILP (rows J)")
        prob += S * T >= lsum(d.opts[c.opt].d * c.kappa * var for (v, i, c), var in x.items()), "J_batch"
        prob += k * T >= lsum(d.opts[c.opt].t * d.opts[c.opt].d * c.kappa * var for (v, i, c), var in x.items()), "J_devices"
        xs_v: dict[int, list[tuple[Choice, pulp.LpVariable]]] = {}
        for (v, i, c), var in x.items():
            xs_v.setdefault(v, []).append((c, var))
        for v in nodes:
            checkpoint("building the MILP (rows J)")
            prob += T >= lsum(c.kappa * var for c, var in xs_v.get(v, [])), f"J_node_{pos[v]}"
        # (K) with a cutoff: a slot's layers under option o fit in cutoff·z[i,o]
        if self.tps_cut is not None:
            for (i, o) in d.y_max:
                terms = [(c, var) for v in nodes for c, var in xs_vio.get((v, i, o), [])]
                if terms:
                    prob += lsum(c.kappa * var for c, var in terms) <= self.tps_cut * z[(i, o)], f"K_{i}_{o}"
        if d.batch:
            self._batch_rows(xs_i, charge)

    def _batch_rows(self, xs_i: dict[int, list[tuple[int, Choice, pulp.LpVariable]]],
                    charge: Callable[..., tuple[list, list]]) -> None:
        """The batch-time objective (docs/formulations.md §9), rows (Hσ), (Iσ), (M), (Σ)::

            ρ[e,i] >= the rows (H) with σ's edge charges (γ·d: bytes at B_edge)
            σ_i >= Σ p_ℓ/τ x[v,i,o,ℓ] + Σ_e ρ[e,i]                       ∀ i
            m_i <= σ_i;   m_i <= U·h_i;   Σ_i h_i <= 1                   ∀ i
            B >= N·T + Σ_i σ_i - Σ_i m_i;   minimise B (<= the cutoff)

        Σ_i m_i is at most the σ of one designated slot, so B >= N·T + Σσ - max σ for
        every choice of it, with equality for the largest: the minimum is the batch time.
        U bounds every stage's σ (all layers' largest p and every edge's largest charges)."""
        d, prob, lsum = self.data, self.prob, pulp.lpSum
        L, N = d.slots, d.problem.microbatches
        u_sig = d.sigma_bound()
        for j in range(len(d.edges)):
            a, b = d.edges[j]
            for i in range(1, L + 1):
                terms = _edge_terms(charge, i, j, a, b, lambda c: c.sin, lambda c: c.sout)
                if not terms:
                    continue
                rv = self.rho[(j, i)] = pulp.LpVariable(f"rho_{j}_{i}", lowBound=0)
                for pos_terms, neg_terms, side in terms:
                    prob += (rv >= lsum(g * var for g, var in pos_terms) - lsum(g * var for g, var in neg_terms),
                             f"Hsig{side}_{j}_{i}")
        rho_i: dict[int, list[pulp.LpVariable]] = {}
        for (j, h), rv in self.rho.items():
            rho_i.setdefault(h, []).append(rv)
        for i in range(1, L + 1):
            sv = self.sig[i] = pulp.LpVariable(f"sig_{i}", lowBound=0)
            prob += sv >= lsum(c.sigma * var for _, c, var in xs_i.get(i, [])) + lsum(rho_i.get(i, [])), f"Isig_{i}"
            hv = self.h[i] = pulp.LpVariable(f"h_{i}", cat="Binary")
            mv = self.mm[i] = pulp.LpVariable(f"m_{i}", lowBound=0)
            prob += mv <= sv, f"Msig_{i}"
            prob += mv <= u_sig * hv, f"Mflag_{i}"
        prob += lsum(self.h.values()) <= 1, "Mone"
        self.obj = pulp.LpVariable("B", lowBound=0, upBound=self.cutoff)
        prob += (self.obj >= N * self.T + lsum(self.sig.values()) - lsum(self.mm.values()), "Sigma_batch")
        prob.setObjective(self.obj)

    # ------------------------------------------------------------------ warm start
    def set_warm_start(self, warm: WarmStart) -> None:
        """Give every variable its value in ``warm`` (CBC mipstart / HiGHS setSolution),
        its TMPCs exchanged to satisfy (X) (no stage gets slower)."""
        d = self.data
        if self.tmpc_symmetry:
            warm = replace(warm, assign=d.canonical(warm.assign))
        for key, var in self.x.items():
            v, i, c = key
            var.setInitialValue(1 if warm.assign[v] == (i, c) else 0)
        for (i, o, y), var in self.u.items():
            var.setInitialValue(1 if warm.slot_opt.get(i) == o and warm.slot_y.get(i) == y else 0)
        worst = 0.0
        for i in range(1, d.slots + 1):
            val, rcost = d.stage_value(warm.assign, i)
            worst = max(worst, val)
            for (j, h), var in self.r.items():
                if h == i:
                    var.setInitialValue(rcost.get(j, 0.0))
            if i in self.e:
                self.e[i].setInitialValue(d.exposed(warm.assign, i))
        self.T.setInitialValue(worst)
        if d.batch:
            sig = {i: d.stage_sigma(warm.assign, i) for i in range(1, d.slots + 1)}
            top = max(sig, key=lambda i: sig[i][0])  # the designated (largest) slot
            for i, (val, rcost) in sig.items():
                self.sig[i].setInitialValue(val)
                self.h[i].setInitialValue(1 if i == top else 0)
                self.mm[i].setInitialValue(val if i == top else 0.0)
            for (j, h), var in self.rho.items():
                var.setInitialValue(sig[h][1].get(j, 0.0))
            self.obj.setInitialValue(d.model_value(warm.assign))

    def fix_sequence(self, seq: tuple[int, ...]) -> None:
        """Fix slot i to option seq[i-1] with its y (:func:`baselines.exact.sequences.sequence_y`)
        and the slots after the sequence unused, through the bounds of u."""
        ys = sequence_y(self.data, seq)
        for (i, o, y), var in self.u.items():
            on = i <= len(seq) and seq[i - 1] == o and ys[i] == y
            var.lowBound = var.upBound = 1 if on else 0

    # ------------------------------------------------------------------ reading
    def read_plan(self) -> Plan | None:
        """The plan of the solution in the variables (None if some layer has no slot)."""
        return self.data.plan_from_choices(
            (key for key, var in self.x.items() if (val := var.value()) is not None and val > 0.5), "MILP")

    def size(self) -> dict[str, int]:
        with quiet_pulp():
            nnz = sum(len(c) for c in self.prob.constraints.values())
        return {
            "variables": len(self.prob.variables()),
            "binaries": len(self.x) + len(self.u),
            "constraints": len(self.prob.constraints),
            "nonzeros": nnz,
            "slots": self.data.slots,
            "options": len(self.data.opts),
        }


def build_model(data: ModelData, options: Options, cutoff: float | None = None) -> MilpModel:
    """The MILP of ``data`` with the model knobs of ``options.params`` (``tmpc_symmetry``),
    below ``cutoff`` (units of τ) if given."""
    return MilpModel(data, cutoff, tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)))


def build_milp(problem: Problem, options: Options | None = None, *, part: str = "inside") -> MilpModel:
    """The MILP for ``problem`` (raises SolverError if no plan can exist at all). When
    G < k it is one ``part`` of two (module docstring: "inside", the default, or
    "spanning")."""
    options = options or Options()
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        raise SolverError(f"no model to write: the instance is infeasible ({data.infeasible_reason})")
    return build_model(data, options)


def write_lp(problem: Problem, options: Options | None, path: str | Path, *, part: str = "inside") -> Path:
    """Write the MILP in CPLEX LP format (times divided by τ, memory by M); when G < k, the
    model of one ``part`` (:func:`build_milp`)."""
    return _write(build_milp(problem, options, part=part), pulp.LpProblem.writeLP, path)


def write_mps(problem: Problem, options: Options | None, path: str | Path, *, part: str = "inside") -> Path:
    """Write the MILP in MPS format (times divided by τ, memory by M); when G < k, the
    model of one ``part`` (:func:`build_milp`)."""
    return _write(build_milp(problem, options, part=part), pulp.LpProblem.writeMPS, path)


def _write(model: MilpModel, writer: Callable[[pulp.LpProblem, str], Any], path: str | Path) -> Path:
    """``writer(model.prob, path)`` (PuLP's writeLP or writeMPS), PuLP's warnings off."""
    with quiet_pulp():
        writer(model.prob, str(path))
    return Path(path)
