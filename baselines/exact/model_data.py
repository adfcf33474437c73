"""Coefficients shared by the exact MILP (``baselines.milp``) and CP-SAT (``baselines.cpsat``) models.

Both models assign every layer to one of L *slots* (slot i, when used, is the
i-th pipeline stage), give every used slot one *option* o = (t_o, d_o), and
every layer one TMPC at its slot's t. This module computes, once per instance,
everything both models need, with the notation of ``docs/formulations.md`` §1:

* S = min(N, k); 𝒟 = allowed d (divisors of N, <= S); options 𝒪 = {(t, d): t·d <= k}.
* L = min(k, N, n) slots suffice (docs/problem.md F2: some optimal plan has only non-empty stages).
* Domain reductions, all implied by "used slots first, and every used slot non-empty":

  - slot i is used only if slots 1..i-1 are, each with d >= 1 and t >= 1, so an
    option at slot i needs d_o·t_o <= k - (i-1) and d_o <= S - (i-1);
  - D_i = Σ_{j>=i} d_j <= S - (i-1), so y_i = ⌈D_i/d_i⌉ <= Y[i,o] = ⌈(S-(i-1))/d_o⌉;
  - the slots before v's slot are non-empty and hold no descendant of v, so
    slot(v) <= n - |desc(v)| (for a chain, layer j can only sit in slots 1..j+1);
  - a TMPC with a + b > M never fits (y >= 1) and is dropped, and so is a TMPC that
    another TMPC of the same (v, t) dominates (no larger p, w, a, b or sync bytes).

* Per-term coefficients (times already divided by τ, see below), for a stage with
  option o and TMPC ℓ of v:

  - node term   κ(v,o,ℓ) = p_ℓ/d + f(d-1)·w_ℓ/(d·N·B_res(o)),
    B_res(o) = B_in if t_o·d_o <= G else B (version 2; f = 4, B_in = B by default)
  - in-edge e=(u,v), charged to v's stage when u is elsewhere:
    γin(e,o,ℓ) = 2(c_e + sfw_ℓ[u])/(d·B_edge)
  - out-edge e=(v,x), charged to v's stage when x is elsewhere:
    γout(e,o,ℓ) = 2(c_e + sbw_ℓ[x])/(d·B_edge)
  - memory a_ℓ and b_ℓ + s_ℓ/d (s: ``memoryUsageShardedB``, version 2)
  - expert parallelism (docs/problem.md §11): a choice exists only when rule 6 holds (e_ℓ·e_t,ℓ
    divides t_o·d_o); then κ gains f(r-1)·w_x,ℓ/(r·N·B_res(o)) and b gains s_x,ℓ/r, with
    r = t_o·d_o/(e_ℓ·e_t,ℓ)

  TPS_i = Σ_{v∈S_i} κ + Σ_{cut in-edges} γin + Σ_{cut out-edges} γout, exactly the
  evaluator's formula regrouped per term.

  With the iteration keys of docs/problem.md §10 (h, o, o_s) the resync term leaves κ:
  κ = p_ℓ/d + (o_ℓ + o_s,ℓ/d)/N (paid whatever else shares the stage) and
  rex(v,o,ℓ) = ρ - h_ℓ/N with ρ the resync part above (per sample, at B_res(o)), and
  TPS_i = Σ κ + Σ γ + max(0, Σ_{v∈S_i} rex): the evaluator's max(0, N·R_i/B - H_i)/N + O_i/N.
  Every cut that reads κ as a lower bound on a layer's share of a stage stays valid
  (max(0, ·) >= 0); the models add one exposure variable per slot (rows (E),
  docs/formulations.md §12). Without the keys rex = 0 and κ is the version-2 number bit
  for bit.

  The batch-time objective (``options.objective``, docs/formulations.md §9) also needs each
  stage's σ_i = P_i + X_i/B_edge (the evaluator's tau): per choice σ = p_ℓ and the edge
  charges 2(c_e + sync)/B_edge (γ without the division by d), :meth:`ModelData.stage_sigma`,
  :meth:`ModelData.model_value`.

* Version 2, the plan-level edge bandwidth B_edge (B_in when Σ t_i d_i <= G, else B) is
  not a per-option number, so the plan space is split in two *parts* (:func:`node_parts`),
  each one model: "inside" (plans with Σ t_i d_i <= min(k, G): the device budget of the
  model is min(k, G), B_edge = B_in) and, only when G < k, "spanning" (plans with
  Σ t_i d_i >= G + 1: budget k plus that row, B_edge = B). In each part every plan's
  model value is the evaluator's TPS; the optimum is the better of the two parts'
  (:func:`combine_results`). With G >= k (every version-1 instance) there is one part,
  "inside", with budget k and B_edge = B_in = B: the version-1 model, coefficient for
  coefficient.
* Uniform plans (``options.uniform``): every used slot takes slot 1's option (the models
  add z[i,o] <= z[1,o]); :meth:`ModelData.slots_from_plan` refuses a non-uniform warm start.

* Numerics: τ = the largest stage time of a single layer (d = 1, every edge cut,
  any TMPC), so every coefficient is in [0, 1] and the optimum in (0, n + 2m];
  memories are divided by M (so the limit is 1).

The module also maps a :class:`~piper.core.plan.Plan` to slot values (warm starts)
and slot values back to a plan. The guards that every exact model's answer goes
through (:func:`guarded_result`) are in ``baselines/exact/guards.py``, the plan-space parts
(:func:`node_parts`, :func:`combine_results`) in ``baselines/exact/parts.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from baselines.exact.parts import PARTS
from piper.core.errors import PlanError, SolverError
from piper.core.evaluate import Score, evaluate
from piper.core.options import BATCH_TIME, TPS, Candidates, Options, candidates
from piper.core.plan import Plan, Stage
from piper.core.problem import TMPC, Problem

__all__ = ["Option", "Choice", "ModelData", "build_model_data", "WarmStart", "is_uniform", "dominates"]


def is_uniform(options: Options) -> bool:
    """``options.uniform`` (False when the field does not exist yet)."""
    return bool(getattr(options, "uniform", False))


#: a model variable (CP-SAT or PuLP)
V = TypeVar("V")

#: the largest time coefficient (in units of tau, the largest single-device layer time) the exact
#: models accept: beyond it CP-SAT's 64-bit integers overflow and the MILP's 1e-9 tolerances mean nothing
MAX_TIME_SPAN = 1e12


@dataclass(frozen=True)
class Option:
    """A stage's (t, d)."""

    t: int
    d: int


@dataclass(frozen=True, eq=False)
class Choice:
    """One value of x[v, i, o, ℓ] (the slot i is not part of it): layer v, option o, TMPC ℓ."""

    node: int  # node id
    opt: int  # index into ModelData.options
    tmpc_index: int  # index of ℓ in the node's list at t_o (file order)
    tmpc: TMPC
    #: κ(v,o,ℓ)/τ
    kappa: float
    #: memory a/M and b/M
    mem_a: float
    mem_b: float
    #: edge index -> γin(e,o,ℓ)/τ for every in-edge e of v
    gin: dict[int, float]
    #: edge index -> γout(e,o,ℓ)/τ for every out-edge e of v
    gout: dict[int, float]
    #: the batch-time objective's stage time σ (docs/formulations.md §9): p_ℓ/τ, and per
    #: in-edge / out-edge the charge 2(c_e + sync)/(B_edge·τ) (γ without the division by d)
    sigma: float = 0.0
    sin: dict[int, float] = field(default_factory=dict)
    sout: dict[int, float] = field(default_factory=dict)
    #: docs/problem.md §10 (iteration keys; 0 without them): the choice's resync minus what its
    #: overlap hides, (ρ - h/N)/τ, ρ its resync per sample; a stage pays max(0, Σ rex) on top of
    #: Σ κ, and κ then holds only the part always paid, p/d + (o + o_s/d)/N (over τ)
    rex: float = 0.0


@dataclass
class ModelData:
    """Everything both exact models need about one instance (see the module docstring)."""

    problem: Problem
    options: Options
    cand: Candidates
    #: S = min(N, k)
    s_max: int
    #: L, the number of slots
    slots: int
    opts: list[Option]
    #: τ, seconds (profiler units) per model time unit
    tau: float
    #: node id -> its choices (over all options)
    choices: dict[int, list[Choice]]
    #: node id -> largest slot (1-based) it may occupy
    max_slot: dict[int, int]
    #: 1-based slot -> indices of the options allowed there
    slot_opts: dict[int, list[int]]
    #: (slot, option) -> Y[i,o], the largest possible y
    y_max: dict[tuple[int, int], int]
    #: None, or why no plan exists (found before building any model)
    infeasible_reason: str | None
    edges: list[tuple[int, int]] = field(default_factory=list)
    #: M is multiplied by this in the model (1, or slightly less on a re-solve)
    memory_factor: float = 1.0
    #: the part of the plan space (:func:`node_parts`): "inside" or "spanning"
    part: str = "inside"
    #: the device budget: Σ t_i d_i <= devices (min(k, G) inside, k spanning)
    devices: int = 0
    #: Σ t_i d_i >= min_devices (G + 1 when spanning, else 0: no row)
    min_devices: int = 0
    #: B_edge of this part (bytes/s)
    edge_bandwidth: float = 0.0
    #: every used slot takes slot 1's option (options.uniform)
    uniform: bool = False
    #: what the models minimize (``Options.objective``): "tps" or "batch-time"
    objective: str = TPS
    #: the instance has docs/problem.md §10 keys: every slot's TPS adds max(0, Σ rex) (its
    #: exposed resync), the models' rows (E) (docs/formulations.md §12)
    iteration: bool = False

    def __post_init__(self) -> None:
        self._slot_opt_sets = {i: set(v) for i, v in self.slot_opts.items()}

    @property
    def batch(self) -> bool:
        """True when the models minimize the batch time (docs/formulations.md §9)."""
        return self.objective == BATCH_TIME

    def plan_value(self, score: Score) -> float:
        """The evaluator's value of a plan under this objective (its TPS or batch time)."""
        return score.value(self.objective)

    def tps_cutoff(self, cutoff: float) -> float:
        """A cutoff on the objective (model units) as a cutoff on T, the largest stage time:
        N·T <= batch time (the fill and drain are >= 0), so T <= cutoff / N."""
        return cutoff / self.problem.microbatches if self.batch else cutoff

    # ------------------------------------------------------------------ plans
    def plan_from_slots(self, assign: dict[int, tuple[int, Choice]]) -> Plan:
        """node -> (slot, choice) to a Plan: used slots in order, empty slots skipped.

        Raises ValueError if two layers of one slot disagree on the option (a model bug).
        """
        by_slot: dict[int, list[tuple[int, Choice]]] = {}
        for v, (i, c) in assign.items():
            by_slot.setdefault(i, []).append((v, c))
        stages = []
        order = {nd.id: p for p, nd in enumerate(self.problem.nodes)}
        for i in sorted(by_slot):
            members = sorted(by_slot[i], key=lambda vc: order[vc[0]])
            opts = {c.opt for _, c in members}
            if len(opts) != 1:
                raise ValueError(f"slot {i} mixes options {sorted(opts)}: model bug")
            o = self.opts[opts.pop()]
            stages.append(
                Stage(
                    nodes=tuple(v for v, _ in members),
                    d=o.d,
                    t=o.t,
                    tmpcs={v: c.tmpc.id for v, c in members},
                )
            )
        return Plan(tuple(stages))

    def plan_from_choices(self, chosen: Iterable[tuple[int, int, Choice]], solver: str) -> Plan | None:
        """The plan of a solution's x variables set to 1 (``(v, i, choice)`` each), read
        back by ``solver`` ("MILP", "CP-SAT"): None when some layer has none; a layer
        set twice is a model bug (:class:`SolverError`)."""
        assign: dict[int, tuple[int, Choice]] = {}
        for v, i, c in chosen:
            if v in assign:
                raise SolverError(f"{solver} solution puts layer {v} in two places: model bug")
            assign[v] = (i, c)
        if len(assign) != len(self.choices):
            return None
        return self.plan_from_slots(assign)

    def static_bound(self) -> float:
        """A lower bound on the optimum (problem time units) that needs no search: the
        rows (J) of the MILP with every layer at its cheapest choice, communication left
        out. Every plan's slowest stage is at least as slow as any one of its layers, and
        its stage times times the stages' devices (Σ t d <= k), or data-parallel degrees
        (Σ d <= S), cover every layer's cheapest device-time (t d κ) or d κ::

            max( max_v min_c κ_c,  Σ_v min_c t_c d_c κ_c / k,  Σ_v min_c d_c κ_c / S )

        Exact solvers report it when their own bound is weaker (e.g. CBC stopped by the
        time limit claims none, and CP-SAT's proof search below a warm start has no LP).
        Under the batch-time objective it is N times that (batch time >= N·TPS).
        """
        if not self.choices or any(not cs for cs in self.choices.values()):
            return 0.0
        k = self.devices
        per_layer = max(min(c.kappa for c in cs) for cs in self.choices.values())
        work = sum(min(self.opts[c.opt].t * self.opts[c.opt].d * c.kappa for c in cs) for cs in self.choices.values())
        batch = sum(min(self.opts[c.opt].d * c.kappa for c in cs) for cs in self.choices.values())
        tps = max(per_layer, work / k, batch / self.s_max) * self.tau * (1.0 - 1e-9)
        # batch time >= N·TPS (its fill and drain term is >= 0)
        return tps * self.problem.microbatches if self.batch else tps

    def slots_from_plan(self, plan: Plan) -> "WarmStart | None":
        """A plan as slot values (for warm starts / hints), or None with a reason in
        ``self.warm_message`` when the plan is not representable in this model
        (structurally invalid, OOM, an option or TMPC excluded by the options...)."""
        self.warm_message = ""
        try:
            score = evaluate(self.problem, plan)
        except PlanError as exc:
            self.warm_message = f"warm start ignored: invalid plan ({exc})"
            return None
        if score.oom:
            self.warm_message = "warm start ignored: the plan is out of memory"
            return None
        if len(plan.stages) > self.slots:
            self.warm_message = f"warm start ignored: {len(plan.stages)} stages > {self.slots} slots"
            return None
        used_devices = sum(st.t * st.d for st in plan.stages)
        if not self.min_devices <= used_devices <= self.devices:
            self.warm_message = (f"warm start ignored: it uses {used_devices} devices, outside this model's part "
                                 f"{self.part!r} ({self.min_devices}..{self.devices})")
            return None
        if self.uniform and len({(st.t, st.d) for st in plan.stages}) > 1:
            self.warm_message = "warm start ignored: the plan is not uniform"
            return None
        opt_index = {(o.t, o.d): j for j, o in enumerate(self.opts)}
        assign: dict[int, tuple[int, Choice]] = {}
        slot_opt: dict[int, int] = {}
        slot_y: dict[int, int] = {}
        substituted = False
        for pos, st in enumerate(plan.stages):
            i = pos + 1
            o = opt_index.get((st.t, st.d))
            if o is None or o not in self._slot_opt_sets.get(i, set()):
                self.warm_message = f"warm start ignored: stage {i} (t={st.t}, d={st.d}) is not allowed here"
                return None
            slot_opt[i] = o
            slot_y[i] = score.stages[pos].y
            for v in st.nodes:
                found = None
                for c in self.choices[v]:
                    if c.opt == o and c.tmpc.id == st.tmpcs[v]:
                        found = c
                        break
                if found is None:  # a dominated TMPC: take its dominator (no worse anywhere)
                    wanted = self.problem.node_by_id[v].tmpc(st.t, st.tmpcs[v])
                    if wanted is not None and self.options.allows(wanted):
                        found = next((c for c in self.choices[v] if c.opt == o and dominates(c.tmpc, wanted)), None)
                        substituted = substituted or found is not None
                if found is None or i > self.max_slot[v]:
                    self.warm_message = f"warm start ignored: layer {v}'s choice in stage {i} is excluded"
                    return None
                assign[v] = (i, found)
        if substituted:
            plan = self.plan_from_slots(assign)
            score = evaluate(self.problem, plan)
        return WarmStart(plan=plan, tps=score.tps, assign=assign, slot_opt=slot_opt, slot_y=slot_y,
                         value=self.plan_value(score))

    # ------------------------------------------------------------------ symmetry
    def tmpc_classes(self) -> list[list[int]]:
        """Classes (node ids in ``problem.nodes`` order, >= 2 each) of layers whose TMPCs
        may be exchanged within a stage.

        u and v are in one class when they have the same choices up to node time (the
        same options and TMPC indices, with the same memory a and b), at least two TMPCs
        at some option, and neither one's communication depends on its TMPC (at every
        option, all its choices have the same γin and γout). The repeated layers of the
        paper's workloads (BERT's transformer layers, GNMT's LSTMs, ResNet's blocks) are
        such classes. Exchanging the TMPCs of two members that share a stage keeps the
        stage's memory and communication and changes its time only by their node terms:
        :meth:`tmpc_exclusions`.
        """
        classes: dict[tuple, list[int]] = {}
        for nd in self.problem.nodes:
            by_opt: dict[int, list[Choice]] = {}
            for c in self.choices[nd.id]:
                by_opt.setdefault(c.opt, []).append(c)
            if not any(len(lst) > 1 for lst in by_opt.values()):
                continue
            if any(c.gin != lst[0].gin or c.gout != lst[0].gout for lst in by_opt.values() for c in lst):
                continue
            # batch time: members also share w per TMPC, so that an exchange changes κ by
            # Δp/d and σ by Δp (docs/formulations.md §9): a faster κ is a faster σ too
            # (and the same expert resync per TMPC: e e_t and w_x, docs/problem.md §11)
            # with iteration keys (docs/problem.md §10) members also share w, h, o and o_s per TMPC,
            # so that an exchange changes κ by Δp/d and leaves the slot's Σ rex as it was
            key = tuple(sorted((c.opt, c.tmpc_index, c.mem_a, c.mem_b)
                               + ((c.tmpc.parameter_size, c.tmpc.expert_width, c.tmpc.expert_parameter_size)
                                  if self.batch or self.iteration else ())
                               + ((c.tmpc.resync_overlap_time, c.tmpc.step_time, c.tmpc.step_time_sharded)
                                  if self.iteration else ())
                               for c in self.choices[nd.id]))
            classes.setdefault(key, []).append(nd.id)
        return [members for members in classes.values() if len(members) > 1]

    def tmpc_exclusions(self) -> list[tuple[Choice, Choice]]:
        """Pairs (c_u, c_v) of choices, u before v and consecutive in a class of
        :meth:`tmpc_classes`, same option o, TMPC indices α != β, that need not share a
        slot: exchanging them, (u: β, v: α), gives the stage a smaller time
        (κ_u(β) + κ_v(α) < κ_u(α) + κ_v(β), by more than 1e-9 relative), or the same
        time because u and v have equal κ at α and at β, and α > β.

        Sound (an optimal plan satisfies every pair): in any plan, permute the TMPC
        indices among each class's members in each stage to minimise first the stage's
        time and then the indices in class order (lexicographically). Memory and
        communication stay (the multiset of indices is kept, the members share a, b and
        their edges do not depend on the TMPC), the time does not grow, and an excluded
        pair left in the result could be exchanged to a faster, or equally fast and
        lexicographically smaller, assignment. Only consecutive members are paired
        (measured with CP-SAT on BERT-32, k = 8, 8 GiB, N = 64: about 1,250 clauses prove
        the DP's plan in 4.0-4.1 s, all pairs' 19,932 clauses in 2.9 s; without the rule,
        no proof in 60 s).
        """
        out: list[tuple[Choice, Choice]] = []
        for members in self.tmpc_classes():
            for u, v in zip(members, members[1:]):
                cu = {(c.opt, c.tmpc_index): c for c in self.choices[u]}
                cv = {(c.opt, c.tmpc_index): c for c in self.choices[v]}
                for (o, al), ua in cu.items():
                    for (o2, be), vb in cv.items():
                        if o2 != o or al == be:
                            continue
                        ub, va = cu[(o, be)], cv[(o, al)]
                        now = ua.kappa + vb.kappa
                        swapped = ub.kappa + va.kappa
                        twins = ua.kappa == va.kappa and ub.kappa == vb.kappa
                        if self.batch:  # σ too: equal p (the tie-break then changes neither)
                            twins = twins and ua.sigma == va.sigma and ub.sigma == vb.sigma
                        if swapped - now < -1e-9 * max(1.0, now) or (twins and al > be):
                            out.append((ua, vb))
        return out

    def excluded_pairs(self, x: Mapping[tuple[int, int, Choice], V]) -> Iterator[tuple[V, V]]:
        """The model variables (x[u,i,c_u], x[v,i,c_v]) of every pair of
        :meth:`tmpc_exclusions` in every slot i where both exist (``x`` keyed by
        (node, slot, choice), as in both models): at most one of each pair is 1."""
        for cu, cv in self.tmpc_exclusions():
            for i in range(1, min(self.max_slot[cu.node], self.max_slot[cv.node]) + 1):
                xu, xv = x.get((cu.node, i, cu)), x.get((cv.node, i, cv))
                if xu is not None and xv is not None:
                    yield xu, xv

    def canonical(self, assign: dict[int, tuple[int, Choice]]) -> dict[int, tuple[int, Choice]]:
        """``assign`` with TMPCs exchanged until no pair of :meth:`tmpc_exclusions`
        shares a slot (for hints and MIP starts; no stage gets slower, memory and
        communication are unchanged)."""
        excl = self.tmpc_exclusions()
        if not excl:
            return assign
        out = dict(assign)
        by_node: dict[int, dict[tuple[int, int], Choice]] = {}
        for cu, cv in excl:
            for c in (cu, cv):
                by_node.setdefault(c.node, {(x.opt, x.tmpc_index): x for x in self.choices[c.node]})
        for _ in range(len(excl) * len(self.choices) + 1):  # each exchange lowers (time, lex)
            changed = False
            for cu, cv in excl:
                u, v = cu.node, cv.node
                if u in out and v in out and out[u][0] == out[v][0] and out[u][1] is cu and out[v][1] is cv:
                    i = out[u][0]
                    out[u] = (i, by_node[u][(cu.opt, cv.tmpc_index)])
                    out[v] = (i, by_node[v][(cv.opt, cu.tmpc_index)])
                    changed = True
            if not changed:
                return out
        raise AssertionError("TMPC exchanges did not settle: model bug")

    # ------------------------------------------------------------------ stats
    def _slot_total(self, assign: dict[int, tuple[int, Choice]], i: int,
                    terms: Callable[[Choice], tuple[float, dict[int, float], dict[int, float]]]
                    ) -> tuple[float, dict[int, float]]:
        """(slot i's own terms plus its edge charges, edge index -> charge): ``terms`` gives a
        choice's own value and its in- and out-edge charges (paid when the edge's tail, resp.
        head, is in another slot)."""
        total = 0.0
        r: dict[int, float] = {}
        for j, c in assign.values():
            if j != i:
                continue
            own, inn, out = terms(c)
            total += own
            for e, g in inn.items():
                if assign[self.edges[e][0]][0] != i:
                    r[e] = r.get(e, 0.0) + g
            for e, g in out.items():
                if assign[self.edges[e][1]][0] != i:
                    r[e] = r.get(e, 0.0) + g
        return total + sum(r.values()), r

    def stage_value(self, assign: dict[int, tuple[int, Choice]], i: int) -> tuple[float, dict[int, float]]:
        """(scaled TPS of slot i, edge index -> scaled cut cost charged to slot i); with
        iteration keys the slot's exposed resync max(0, Σ rex) is part of the TPS."""
        total, r = self._slot_total(assign, i, lambda c: (c.kappa, c.gin, c.gout))
        if self.iteration:
            total += self.exposed(assign, i)
        return total, r

    def exposed(self, assign: dict[int, tuple[int, Choice]], i: int) -> float:
        """Slot i's exposed resync max(0, Σ rex) (model units; docs/problem.md §10)."""
        return max(0.0, sum(c.rex for j, c in assign.values() if j == i))

    def exposed_bound(self) -> float:
        """An upper bound on any slot's exposed resync: Σ over layers of their largest rex (>= 0)."""
        return sum(max([0.0, *(c.rex for c in cs)]) for cs in self.choices.values())

    def stage_sigma(self, assign: dict[int, tuple[int, Choice]], i: int) -> tuple[float, dict[int, float]]:
        """(scaled σ of slot i, edge index -> scaled σ charge of slot i): σ_i = P_i + X_i/B_edge,
        the time one replica of the stage spends on one microbatch (the evaluator's tau)."""
        return self._slot_total(assign, i, lambda c: (c.sigma, c.sin, c.sout))

    def sigma_bound(self) -> float:
        """An upper bound on any stage's σ (model units): every layer's largest p and every
        edge's largest charges on both sides."""
        total = sum(max((c.sigma for c in cs), default=0.0) for cs in self.choices.values())
        for j, (a, b) in enumerate(self.edges):
            total += max((c.sin.get(j, 0.0) for c in self.choices.get(b, [])), default=0.0)
            total += max((c.sout.get(j, 0.0) for c in self.choices.get(a, [])), default=0.0)
        return total

    def model_value(self, assign: dict[int, tuple[int, Choice]]) -> float:
        """The objective of a slot assignment in model units (times / τ), as the models
        compute it: the largest stage time, or N·max_i TPS_i + Σ_i σ_i - max_i σ_i."""
        tps = max(self.stage_value(assign, i)[0] for i in range(1, self.slots + 1))
        if not self.batch:
            return tps
        sig = [self.stage_sigma(assign, i)[0] for i in range(1, self.slots + 1)]
        return self.problem.microbatches * tps + sum(sig) - max(sig)


@dataclass(frozen=True)
class WarmStart:
    """A plan expressed as slot values."""

    plan: Plan
    tps: float
    #: node -> (slot, choice)
    assign: dict[int, tuple[int, Choice]]
    #: slot -> option index (used slots only)
    slot_opt: dict[int, int]
    #: slot -> y
    slot_y: dict[int, int]
    #: the evaluator's value of ``plan`` under the models' objective (its TPS or batch time)
    value: float


def _descendant_counts(problem: Problem) -> dict[int, int]:
    desc: dict[int, set[int]] = {}
    for v in reversed(problem.topological_order):
        s: set[int] = set()
        for e in problem.out_edges[v]:
            s.add(e.v)
            s |= desc[e.v]
        desc[v] = s
    return {v: len(s) for v, s in desc.items()}


def dominates(a: TMPC, b: TMPC) -> bool:
    """a is at least as good as b in every term of the score and of memory."""
    return (
        a.time_per_sample <= b.time_per_sample
        and a.parameter_size <= b.parameter_size
        and a.memory_a <= b.memory_a
        and a.memory_b <= b.memory_b
        and a.memory_sharded <= b.memory_sharded
        # expert parallelism (docs/problem.md §11): the same e e_t (so the same (t, d) pass rule 6
        # and r is the same), no more expert weights or state
        and a.expert_width == b.expert_width
        and a.expert_parameter_size <= b.expert_parameter_size
        and a.memory_sharded_expert <= b.memory_sharded_expert
        and all(a.sync_fw[u] <= b.sync_fw[u] for u in b.sync_fw)
        and all(a.sync_bw[x] <= b.sync_bw[x] for x in b.sync_bw)
        # iteration keys (docs/problem.md §10): hides at least as much, no longer a step
        and a.resync_overlap_time >= b.resync_overlap_time
        and a.step_time <= b.step_time
        and a.step_time_sharded <= b.step_time_sharded
    )


def _undominated(lst: tuple[tuple[int, TMPC], ...]) -> tuple[tuple[int, TMPC], ...]:
    """Drop every TMPC that another one of the same (v, t) dominates (ties: the first in
    file order is kept). Replacing a dominated TMPC by its dominator changes no stage's
    time upwards and no memory upwards, so some optimal plan avoids dominated TMPCs."""
    keep = []
    for pos, (idx, c) in enumerate(lst):
        beaten = any(
            dominates(other, c) and (not dominates(c, other) or opos < pos)
            for opos, (_, other) in enumerate(lst)
            if opos != pos
        )
        if not beaten:
            keep.append((idx, c))
    return tuple(keep)


def build_model_data(problem: Problem, options: Options, *, memory_factor: float = 1.0,
                     part: str = "inside") -> ModelData:
    """Options, slots, pruned choices and scaled coefficients (module docstring).

    ``memory_factor`` < 1 shrinks M (used to re-solve when a floating-point model
    accepted a plan that the evaluator calls out of memory). ``part``: "inside" (plans
    with Σ t d <= min(k, G), edges at B_in) or "spanning" (Σ t d >= G + 1, edges at B;
    only meaningful when G < k), see :func:`node_parts`.
    """
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}")
    cand = candidates(problem, options)
    n_mb, bw = problem.microbatches, problem.bandwidth
    node_g, bw_in, factor = problem.node_size, problem.bandwidth_intra, problem.resync_factor
    if part == "inside":
        k, min_devices, bw_edge = min(problem.devices, node_g), 0, bw_in
    else:
        k, min_devices, bw_edge = problem.devices, node_g + 1, bw
    mem = problem.memory_cap * memory_factor
    s_max = min(n_mb, k)
    n = problem.n
    slots = max(1, min(k, n_mb, n))
    opts = [Option(t, d) for t in cand.ts for d in cand.ds if t * d <= k]
    edges = [(e.u, e.v) for e in problem.edges]
    eidx = {(e.u, e.v): j for j, e in enumerate(problem.edges)}

    # raw per-choice numbers (unscaled)
    raw: dict[int, list[tuple]] = {}
    tau = 0.0
    iteration = problem.has_iteration_keys
    for nd in problem.nodes:
        v = nd.id
        lst = []
        undominated = {t: _undominated(lst) for t, lst in cand.tmpcs[v].items()}
        for j, o in enumerate(opts):
            # resync inside a node (B_in) when the stage fits in one (version 2)
            bw_res = bw_in if o.t * o.d <= node_g else bw
            for idx, c in undominated.get(o.t, ()):
                # b + s/d, and the expert terms of docs/problem.md §11 (rule 6: no choice at all)
                mem_b = c.memory_b + c.memory_sharded / o.d
                resync_x = memory_x = 0.0
                if c.has_expert_terms:
                    terms = c.expert_terms(o.d, o.t, factor, n_mb)
                    if terms is None:
                        continue  # rule 6: e e_t does not divide t d
                    resync_x, memory_x = terms
                    mem_b += memory_x
                if c.memory_a + c.memory_b + c.memory_sharded / o.d + memory_x > mem:
                    continue  # never fits, whatever y >= 1
                kappa = c.time_per_sample / o.d + factor * (o.d - 1) * c.parameter_size / (o.d * n_mb * bw_res)
                if resync_x:
                    kappa += resync_x / bw_res
                rex = 0.0
                if iteration:  # docs/problem.md §10: κ keeps what is always paid, rex the rest
                    rho = factor * (o.d - 1) * c.parameter_size / (o.d * n_mb) + resync_x
                    kappa = c.time_per_sample / o.d + (c.step_time + c.step_time_sharded / o.d) / n_mb
                    rex = rho / bw_res - c.resync_overlap_time / n_mb
                gin = {
                    eidx[(e.u, v)]: 2.0 * (e.communication_cost + c.sync_fw[e.u]) / (o.d * bw_edge)
                    for e in problem.in_edges[v]
                }
                gout = {
                    eidx[(v, e.v)]: 2.0 * (e.communication_cost + c.sync_bw[e.v]) / (o.d * bw_edge)
                    for e in problem.out_edges[v]
                }
                if o.d == 1:
                    tau = max(tau, kappa + max(0.0, rex) + sum(gin.values()) + sum(gout.values()))
                # σ's edge charges (batch time): the same bytes at B_edge, not divided by d
                sig_in = {eidx[(e.u, v)]: 2.0 * (e.communication_cost + c.sync_fw[e.u]) / bw_edge
                          for e in problem.in_edges[v]}
                sig_out = {eidx[(v, e.v)]: 2.0 * (e.communication_cost + c.sync_bw[e.v]) / bw_edge
                           for e in problem.out_edges[v]}
                lst.append((j, idx, c, kappa, gin, gout, (sig_in, sig_out), mem_b, rex))
        raw[v] = lst
    if tau <= 0 or not math.isfinite(tau):
        # only d>1 options (impossible: d=1 always allowed) or all-zero times
        tau = max([entry[3] for lst in raw.values() for entry in lst] + [0.0]) or 1.0

    choices: dict[int, list[Choice]] = {}
    reason = cand.infeasible_reason
    for nd in problem.nodes:
        v = nd.id
        choices[v] = [
            Choice(
                node=v,
                opt=j,
                tmpc_index=idx,
                tmpc=c,
                kappa=kp / tau,
                mem_a=c.memory_a / mem,
                mem_b=mem_b / mem,
                gin={e: g / tau for e, g in gin.items()},
                gout={e: g / tau for e, g in go.items()},
                sigma=c.time_per_sample / tau,
                sin={e: g / tau for e, g in sig[0].items()},
                sout={e: g / tau for e, g in sig[1].items()},
                rex=rex / tau,
            )
            for (j, idx, c, kp, gin, go, sig, mem_b, rex) in raw[v]
        ]
        if not choices[v] and reason is None:
            reason = f"layer {nd.label} has no TMPC that fits in memory (a + b > M for every allowed TMPC)"

    span = max((max([c.kappa, abs(c.rex), *c.gin.values(), *c.gout.values()]) for lst in choices.values() for c in lst),
               default=0.0)
    if span > MAX_TIME_SPAN:
        raise SolverError(
            f"the exact models cannot represent this instance: a layer's time at some (t, d) is {span:.3g} times "
            f"the largest single-device layer time (more than {MAX_TIME_SPAN:g}; e.g. a data-parallel resync of "
            "huge weights over a slow link); their integers (CP-SAT) and tolerances (the MILP) do not span that range")
    ndesc = _descendant_counts(problem)
    max_slot = {v: max(1, min(slots, n - ndesc[v])) for v in choices}
    slot_opts: dict[int, list[int]] = {}
    y_max: dict[tuple[int, int], int] = {}
    for i in range(1, slots + 1):
        ok = [j for j, o in enumerate(opts) if o.t * o.d <= k - (i - 1) and o.d <= s_max - (i - 1)]
        slot_opts[i] = ok
        for j in ok:
            y_max[(i, j)] = -(-(s_max - (i - 1)) // opts[j].d)
    return ModelData(
        problem=problem,
        options=options,
        cand=cand,
        s_max=s_max,
        slots=slots,
        opts=opts,
        tau=tau,
        choices=choices,
        max_slot=max_slot,
        slot_opts=slot_opts,
        y_max=y_max,
        infeasible_reason=reason,
        edges=edges,
        memory_factor=memory_factor,
        part=part,
        devices=k,
        min_devices=min_devices,
        edge_bandwidth=bw_edge,
        uniform=is_uniform(options),
        objective=getattr(options, "objective", TPS),
        iteration=iteration,
    )
