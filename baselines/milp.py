r"""Exact MILP for Piper's partitioning problem (PuLP; CBC by default, HiGHS selectable).

``solve_milp(problem, options)``; ``options.params["backend"]`` is ``"cbc"`` (default) or
``"highs"``. ``write_lp`` / ``write_mps`` write the model for other solvers.

The model, its rows (A)-(K), (X), (E'), (U), the warm-start cutoff, the split over option
sequences and the solver settings are written once, in ``docs/formulations.md`` (§2 the
MILP, §4 warm starts and the split, §6 statuses and guards, §7 numerics: the stated
tolerance :func:`claim_tolerance` and the second proof :func:`_verify_optimum` of every
optimal claim, §8 version 2 and uniform plans). Coefficients and domain reductions come
from :mod:`baselines._model_data`. Measurements of the model's speed are in
``experiments/EXACT_MODELS.md``.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pulp

from piper.options import Options
from piper.evaluate import evaluate
from piper.problem import Problem
from piper.result import Result, SolverError, Status

from ._cbc import CbcSettings, cbc_log_numbers, quiet_pulp, run_cbc
from ._highs import HighsContext, HighsSolver
from ._model_data import (Choice, ModelData, WarmStart, build_model_data, combine_results, guarded_result,
                          node_parts)
from ._split import (SequenceAnswer, checked_sequences, sequence_y, solve_sequences, solve_sequences_ray,
                     split_backend, split_mode)

__all__ = ["solve_milp", "build_milp", "write_lp", "write_mps", "MilpModel"]

BACKENDS = ("cbc", "highs")
#: with a warm start, the model only looks for plans at least this much (relative) better
CUTOFF_REL = 1e-6
#: the solvers' feasibility tolerances as set here (absolute, in the model's units: times
#: divided by τ, memory by M): rows may be violated and binaries may be fractional by
#: this much in a solution the solver accepts (CBC's ``primalTolerance`` and
#: ``integerTolerance``, HiGHS's ``primal_feasibility_tolerance`` and
#: ``mip_feasibility_tolerance``); :func:`claim_tolerance` turns them into time.
PRIMAL_TOL = 1e-7
INTEGER_TOL = 1e-7
#: CBC's cutoff increment (model units): a new plan must beat the incumbent by this much,
#: and nodes whose bound is within it of the incumbent are pruned. CBC's default, 1e-5,
#: pruned the optimum on docs/formulations.md §7's reproducer (plans 1.3e-6 relative
#: apart, T about 0.25 τ): it is set far below the gap.
CBC_INCREMENT = 1e-12
#: an "optimal" claim is re-proved by a second solve strictly below it, with another seed
#: and another CBC / HiGHS configuration, at most this many times (each refuted claim is
#: replaced by the better plan the second solve found) before the result is "feasible"
VERIFY_ROUNDS = 3
#: CBC options of a verification solve (a refutation: no heuristics, no cuts, probing)
VERIFY_CBC_OPTIONS = ("heur off", "cuts off", "probing forceOn")


def claim_tolerance(data: ModelData, gap_abs: float) -> float:
    """How far (problem time units) the model's T may be from the evaluator's TPS of the
    plan read back, and a proven bound from the true optimum, given the solvers'
    tolerances (docs/formulations.md §7).

    A stage's row (I) holds its layers' κ and the r of its cut edges, each r bounded by
    a row (H) of γ and Γ terms. With binaries within INTEGER_TOL of 0/1 and rows within
    PRIMAL_TOL, the row's value differs from the plan's stage time by at most
    INTEGER_TOL · C + PRIMAL_TOL · (m + 1), C = Σ_v max κ + Σ_e 2 (max γin + max γout)
    (every coefficient that can appear in one stage's rows); the gap and CBC's increment
    add to it. Times τ, in problem units.
    """
    c_sum = 0.0
    for cs in data.choices.values():
        c_sum += max((c.kappa for c in cs), default=0.0)
    for j in range(len(data.edges)):
        u, v = data.edges[j]
        gin = max((c.gin.get(j, 0.0) for c in data.choices.get(v, [])), default=0.0)
        gout = max((c.gout.get(j, 0.0) for c in data.choices.get(u, [])), default=0.0)
        c_sum += 2.0 * (gin + gout)
    model_units = INTEGER_TOL * c_sum + PRIMAL_TOL * (len(data.edges) + 1) + gap_abs + CBC_INCREMENT
    return model_units * data.tau


class MilpModel:
    """The PuLP problem and its variables for one instance (see the module docstring)."""

    def __init__(self, data: ModelData, cutoff: float | None = None, *, tmpc_symmetry: bool = True) -> None:
        """``cutoff`` (in units of τ): only plans with T <= cutoff are wanted (module
        docstring); ``tmpc_symmetry``: add the rows (X)."""
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
        self.T = pulp.LpVariable("T", lowBound=0, upBound=cutoff)
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
            for i in range(1, d.max_slot[v] + 1):
                allowed = set(d.slot_opts[i])
                for c in d.choices[v]:
                    if c.opt in allowed and (self.cutoff is None or c.kappa <= self.cutoff):
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
            prob += lsum(inv[(v, i)] for i in range(1, d.max_slot[v] + 1)) == 1, f"A_{pos[v]}"
        # (B) and (C)
        for i in range(1, L + 1):
            for o in d.slot_opts[i]:
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
            prev = None
            for i in range(1, L):
                if i >= d.max_slot[v]:
                    cum[(v, i)] = 1
                    continue
                var = pulp.LpVariable(f"cum_{pos[v]}_{i}", lowBound=0, upBound=1)
                prob += var == (inv[(v, i)] if prev is None else prev + inv[(v, i)]), f"Dcum_{pos[v]}_{i}"
                cum[(v, i)] = prev = var
        for j, (a, b) in enumerate(d.edges):
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
        for j, (a, b) in enumerate(d.edges):
            for i in range(1, L + 1):
                terms = []
                # in-side: charged to the head b's slot when a is elsewhere (i >= 2 only)
                if i >= 2:
                    pos_terms, neg_terms = [], []
                    for o in d.slot_opts[i]:
                        lst = xs_vio.get((b, i, o), [])
                        if not lst:
                            continue
                        gmax = max(c.gin[j] for c, _ in lst)
                        if gmax <= 0:
                            continue
                        pos_terms += [(c.gin[j], var) for c, var in lst if c.gin[j] > 0]
                        neg_terms += [(gmax, var) for _, var in xs_vio.get((a, i, o), [])]
                    if pos_terms:
                        terms.append((pos_terms, neg_terms, "in"))
                pos_terms, neg_terms = [], []
                for o in d.slot_opts[i]:
                    lst = xs_vio.get((a, i, o), [])
                    if not lst:
                        continue
                    gmax = max(c.gout[j] for c, _ in lst)
                    if gmax <= 0:
                        continue
                    pos_terms += [(c.gout[j], var) for c, var in lst if c.gout[j] > 0]
                    neg_terms += [(gmax, var) for _, var in xs_vio.get((b, i, o), [])]
                if pos_terms:
                    terms.append((pos_terms, neg_terms, "out"))
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
        for i in range(1, L + 1):
            prob += T >= lsum(c.kappa * var for _, c, var in xs_i.get(i, [])) + lsum(r_i.get(i, [])), f"I_{i}"

        # (J)
        prob += S * T >= lsum(d.opts[c.opt].d * c.kappa * var for (v, i, c), var in x.items()), "J_batch"
        prob += k * T >= lsum(d.opts[c.opt].t * d.opts[c.opt].d * c.kappa * var for (v, i, c), var in x.items()), "J_devices"
        xs_v: dict[int, list[tuple[Choice, pulp.LpVariable]]] = {}
        for (v, i, c), var in x.items():
            xs_v.setdefault(v, []).append((c, var))
        for v in nodes:
            prob += T >= lsum(c.kappa * var for c, var in xs_v.get(v, [])), f"J_node_{pos[v]}"
        # (K) with a cutoff: a slot's layers under option o fit in cutoff·z[i,o]
        if self.cutoff is not None:
            for (i, o) in d.y_max:
                terms = [(c, var) for v in nodes for c, var in xs_vio.get((v, i, o), [])]
                if terms:
                    prob += lsum(c.kappa * var for c, var in terms) <= self.cutoff * z[(i, o)], f"K_{i}_{o}"

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
        self.T.setInitialValue(worst)

    def fix_sequence(self, seq: tuple[int, ...]) -> None:
        """Fix slot i to option seq[i-1] with its y (:func:`baselines._split.sequence_y`)
        and the slots after the sequence unused, through the bounds of u."""
        ys = sequence_y(self.data, seq)
        for (i, o, y), var in self.u.items():
            on = i <= len(seq) and seq[i - 1] == o and ys[i] == y
            var.lowBound = var.upBound = 1 if on else 0

    # ------------------------------------------------------------------ reading
    def read_plan(self):
        assign: dict[int, tuple[int, Choice]] = {}
        for (v, i, c), var in self.x.items():
            val = var.value()
            if val is not None and val > 0.5:
                if v in assign:
                    raise SolverError(f"MILP solution puts layer {v} in two places: model bug")
                assign[v] = (i, c)
        if len(assign) != len(self.data.choices):
            return None
        return self.data.plan_from_slots(assign)

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


def build_milp(problem: Problem, options: Options | None = None, *, part: str = "inside") -> MilpModel:
    """The MILP for ``problem`` (raises SolverError if no plan can exist at all). When
    G < k it is one ``part`` of two (module docstring: "inside", the default, or
    "spanning")."""
    options = options or Options()
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        raise SolverError(f"no model to write: the instance is infeasible ({data.infeasible_reason})")
    return MilpModel(data, tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)))


def write_lp(problem: Problem, options: Options | None, path: str | Path, *, part: str = "inside") -> Path:
    """Write the MILP in CPLEX LP format (times divided by τ, memory by M); when G < k, the
    model of one ``part`` (:func:`build_milp`)."""
    model = build_milp(problem, options, part=part)
    with quiet_pulp():
        model.prob.writeLP(str(path))
    return Path(path)


def write_mps(problem: Problem, options: Options | None, path: str | Path, *, part: str = "inside") -> Path:
    """Write the MILP in MPS format (times divided by τ, memory by M); when G < k, the
    model of one ``part`` (:func:`build_milp`)."""
    model = build_milp(problem, options, part=part)
    with quiet_pulp():
        model.prob.writeMPS(str(path))
    return Path(path)


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class Backend:
    """The solver of one :func:`solve_milp` call ("cbc" or "highs") and the HiGHS state
    that all its runs share (:class:`baselines._highs.HighsContext`)."""

    name: str
    highs: HighsContext = field(default_factory=HighsContext)


def _run_highs(model: MilpModel, solver: HighsSolver, log: str) -> str:
    """Solve ``model`` with ``solver`` (its values and status land in the model); returns
    HiGHS's log, read from ``log`` (the file of the solver's ``log_file`` option)."""
    model.prob.solve(solver)
    model.prob.solverModel.setOptionValue("log_file", "")  # close the log
    return Path(log).read_text(errors="replace")


def _solve_once(
    data: ModelData, options: Options, backend: Backend, warm: WarmStart | None, deadline: float | None,
    cutoff: float | None = None,
    presolve_off: bool = False,
    model: MilpModel | None = None,
) -> tuple[Status, Any, float | None, float, dict[str, Any]]:
    """Build and solve; returns (status, plan or None, objective, bound (problem units), stats).

    With ``cutoff`` (units of τ) only plans with T <= cutoff are sought (and ``warm``
    is not passed as a MIP start: it is above the cutoff by construction). ``model``:
    solve this one (built with the same ``cutoff``) instead of building it.
    """
    t0 = time.perf_counter()
    if model is None:
        model = MilpModel(data, cutoff, tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)))
    if cutoff is None and warm is not None:
        model.set_warm_start(warm)
    build_s = time.perf_counter() - t0
    if model.unplaceable:
        stats0 = {"backend": backend.name, "build_s": build_s, **model.size(), "tau": data.tau}
        stats0["cutoff_note"] = f"layer(s) {model.unplaceable[:5]} alone exceed the cutoff"
        return Status.INFEASIBLE, None, None, math.inf, stats0
    limit = None if deadline is None else max(0.5, deadline - time.perf_counter())
    threads = max(1, int(options.threads))
    stats: dict[str, Any] = {"backend": backend.name, "build_s": build_s, **model.size(), "tau": data.tau,
                             "symmetry_rows": model.symmetry_rows}
    params = dict(options.params)
    msg = bool(params.get("msg", options.progress))
    gap_abs = float(params.get("gap_abs", 1e-9))
    t1 = time.perf_counter()
    info: dict[str, float] = {}
    if backend.name == "cbc":
        settings = CbcSettings(
            threads=threads, gap_rel=0.0, gap_abs=gap_abs, warm_start=warm is not None and cutoff is None, msg=msg,
            options=(f"randomSeed {options.seed + 1}", f"randomCbcSeed {options.seed + 1}",
                     f"increment {CBC_INCREMENT:g}", f"primalTolerance {PRIMAL_TOL:g}",
                     f"integerTolerance {INTEGER_TOL:g}", *params.get("cbc_options", [])),
        )
        with tempfile.TemporaryDirectory(prefix="piper-cbc-") as tmp:
            run = run_cbc(model.prob, settings, deadline, tmp)
        if run.overran:
            stats.setdefault("guards", []).append(
                f"CBC was still running {settings.overrun_s:g} s after its time limit (the root LP, "
                "coin-or/Cbc#514) and was stopped")
        info = cbc_log_numbers(run.log)
    else:
        with tempfile.TemporaryDirectory(prefix="piper-highs-") as tmp:
            log = os.path.join(tmp, "highs.log")
            extra: dict[str, Any] = {"output_flag": True, "log_to_console": msg, "log_file": log}
            if presolve_off:
                extra["presolve"] = "off"
            solver = HighsSolver(
                context=backend.highs,
                msg=msg,
                timeLimit=limit,
                gapRel=0.0,
                gapAbs=gap_abs,
                threads=threads,
                warm=warm is not None and cutoff is None,
                deadline=deadline,
                random_seed=int(options.seed),
                mip_feasibility_tolerance=INTEGER_TOL,
                primal_feasibility_tolerance=PRIMAL_TOL,
                **extra,
            )
            text = _run_highs(model, solver, log)
            info = solver.info
        if "untransformed violations" in text and not presolve_off:
            # HiGHS 1.16 can drop a solution whose postsolve shows violations and then
            # certify a worse one as optimal (seen on tests/test_exact_models.py's tiny(95)
            # with an earlier model; the test now stands in for HiGHS): whatever it
            # claimed, solve again without presolve.
            status2, plan2, obj2, bound2, stats2 = _solve_once(
                data, options, backend, warm, deadline, cutoff, presolve_off=True, model=model
            )
            stats2.setdefault("guards", []).append(
                "HiGHS reported a solution with untransformed (postsolve) violations; re-solved with presolve off"
            )
            return status2, plan2, obj2, bound2, stats2
    stats["solve_s"] = time.perf_counter() - t1
    status_code, sol_status = model.prob.status, model.prob.sol_status
    stats["pulp_status"] = pulp.LpStatus.get(status_code, str(status_code))
    stats["pulp_sol_status"] = sol_status
    plan = None
    objective = None
    if status_code == pulp.LpStatusInfeasible or sol_status == pulp.LpSolutionInfeasible:
        return Status.INFEASIBLE, None, None, math.inf, stats
    if sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        plan = model.read_plan()
        tval = model.T.value()
        objective = None if tval is None else float(tval) * data.tau
    if plan is None and warm is not None and cutoff is None and "completed_objective" in info:
        # CBC finished its search with the MIP start as the best plan but reported the
        # final LP (integers fixed) infeasible and wrote no usable solution (seen with
        # CBC 2.10.3 on tests' repeated(9)): the search itself proves the warm start optimal
        value = max(data.stage_value(warm.assign, i)[0] for i in range(1, data.slots + 1))
        if value <= info["completed_objective"] + gap_abs + 1e-9 * max(1.0, value):
            stats["cbc_note"] = "search completed; no solution written: the warm start is its best plan"
            bound = min(warm.tps, (info["completed_objective"] - gap_abs) * data.tau)
            return Status.OPTIMAL, warm.plan, warm.tps, bound, stats
    if plan is None:
        status = Status.UNKNOWN
    elif sol_status == pulp.LpSolutionOptimal and status_code == pulp.LpStatusOptimal:
        status = Status.OPTIMAL
    else:
        status = Status.FEASIBLE
    if backend.name == "cbc" and status == Status.OPTIMAL and "proven" not in info and info:
        # PuLP maps CBC's "stopped on time" with a plan to Optimal in some versions
        status = Status.FEASIBLE
    # proven lower bound, in problem units
    if status == Status.OPTIMAL:
        bound_scaled = float(model.T.value() or 0.0) - gap_abs
        if backend.name == "highs" and "mip_dual_bound" in info and math.isfinite(info["mip_dual_bound"]):
            bound_scaled = min(bound_scaled + gap_abs, info["mip_dual_bound"])
    elif backend.name == "highs":
        b = info.get("mip_dual_bound", 0.0)
        bound_scaled = b if b is not None and math.isfinite(b) else 0.0
    else:
        # CBC stopped without a proof: the "Lower bound" line of its log is not a valid
        # bound (seen above the true optimum on a 16-layer GNMT slice, k=8, N=16, 2 s
        # limit: 16.4593 vs 16.4493 proven by the DP, HiGHS and CP-SAT), so nothing is
        # claimed; the logged value is kept for information only.
        if "bound" in info:
            stats["cbc_log_lower_bound"] = info["bound"] * data.tau
        bound_scaled = 0.0
    if status == Status.FEASIBLE and objective is not None:
        # an unproven incumbent's T may carry slack above its plan's stage times (T only
        # has to be >= every stage row): an upper bound, not a claim of the plan's TPS
        # (HiGHS once stopped with T = 34 for a plan worth 33.5)
        stats["incumbent_T"] = objective
        objective = None
    stats.update({k: v for k, v in info.items() if k in ("mip_node_count", "nodes")})
    return status, plan, objective, max(0.0, bound_scaled) * data.tau, stats


#: CBC options of the split's subproblems unless ``params["cbc_options"]`` is given: the
#: subproblems are refutations, where heuristics find nothing and most cut generators cost
#: more than they save, but probing at every node (fixing x by implications from the
#: fixed sequence) pays. Measured on the 16-layer branchy bench row at k=8 (287
#: sequences, one run each): at da718df with one single-threaded CBC, 115 s with
#: heuristics and cuts off, 50.6 s adding ``probing on``, 46.4 and 50.9 s adding
#: ``probing forceOn``, 49.4 s with ``forceOnStrong``, 63.0 s with forceOn and heuristics
#: on; at an earlier revision, 103 s with CBC's defaults, 91 s heuristics off, 89 s cuts
#: off, 74 s both off.
SPLIT_CBC_OPTIONS = ("heur off", "cuts off", "probing forceOn")


def _split_search(data: ModelData, options: Options, backend: Backend, warm: WarmStart, deadline: float | None,
                  cutoff: float) -> tuple[Status, Any, float | None, float, dict[str, Any]]:
    """The cutoff search below ``warm`` split over option sequences (:mod:`baselines._split`).

    One model per cutoff and worker (``params["split_workers"]``, default ``threads``: that
    many single-threaded solves at once); each sequence fixes its u bounds
    (:meth:`MilpModel.fix_sequence`) and is solved to the end. Infeasible: the sequence is ruled out. A plan: the sequence's
    best plan (the subproblem is minimised) becomes the incumbent, the cutoff moves below it
    and the model is rebuilt. The result reads like :func:`_solve_once`'s with the
    cutoff: INFEASIBLE when every sequence is ruled out and no plan was found below the
    warm start (``solve_milp`` then calls the warm start optimal), OPTIMAL with the best
    plan found when every sequence is done, else FEASIBLE / UNKNOWN.
    """
    t0 = time.perf_counter()
    if "cbc_options" not in options.params and backend.name == "cbc":
        options = replace(options, params={**options.params, "cbc_options": list(SPLIT_CBC_OPTIONS)})
    if "msg" not in options.params:  # the split's own progress lines replace the solver logs
        options = replace(options, params={**options.params, "msg": False})
    symmetry = bool(options.params.get("tmpc_symmetry", True))
    # one single-threaded solver per worker, each with its own copy of the model
    # (split_workers = 1: one solve at a time with options.threads threads, as in CP-SAT)
    workers = max(1, int(options.params.get("split_workers", options.threads)))
    sub_options = options if workers == 1 else replace(options, threads=1)
    done: set[tuple[int, ...]] = set()
    best_plan, best_obj, improved = None, None, 0
    counts: dict[str, int] = {}
    total = None
    split_on = split_backend(options.params)
    if split_on == "ray":
        return _split_on_ray(data, options, backend, deadline, cutoff, t0)
    while True:
        models = [MilpModel(data, cutoff, tmpc_symmetry=symmetry) for _ in range(workers)]
        model = models[0]
        seqs = [] if model.unplaceable else checked_sequences(data, cutoff, lambda c: c.kappa, options.params)
        total = len(seqs) if total is None else total

        def solve_one(worker: int, seq: tuple[int, ...]) -> tuple[str, Any]:
            if deadline is not None and deadline - time.perf_counter() <= 0.5:
                return "stop", (None, None)
            mdl = models[worker]
            mdl.fix_sequence(seq)
            status, plan, objective, _b, _s = _solve_once(data, sub_options, backend, None, deadline, cutoff, model=mdl)
            if status == Status.INFEASIBLE:
                return "refuted", (status, None)
            if status == Status.OPTIMAL and plan is not None:  # the sequence's best plan
                return "found", (status, (objective, plan))
            return "stop", (status, plan)  # time limit; a plan here is better but unproven

        def record(seq: tuple[int, ...], outcome: str, payload: Any) -> None:
            nonlocal best_plan
            status, extra = payload
            if status is not None:
                counts[status.value] = counts.get(status.value, 0) + 1
            if outcome in ("refuted", "found"):
                done.add(seq)  # found: nothing below the sequence's best plan in it
            elif extra is not None:
                best_plan = extra

        def line() -> str:
            return (f"milp split: {len(done)} sequences done ({len(seqs)} at the current cutoff), "
                    f"{time.perf_counter() - t0:.1f} s")

        found, timed_out = solve_sequences([s for s in seqs if s not in done], solve_one, record, workers,
                                           line if options.progress else None)
        if found:
            objective, plan = min((p[1] for p in found), key=lambda f: f[0])
            if best_obj is None or objective < best_obj:
                best_plan, best_obj = plan, objective
            improved += len(found)
            cutoff = best_obj / data.tau * (1.0 - CUTOFF_REL)
        if timed_out or not found:
            break
    stats: dict[str, Any] = {
        "backend": backend.name, **model.size(), "tau": data.tau, "symmetry_rows": model.symmetry_rows,
        "split": {"mode": "sequences", "sequences": total, "done": len(done), "improved": improved,
                  "subproblems": counts, "cbc_options": list(options.params.get("cbc_options", []))},
        "solve_s": time.perf_counter() - t0,
    }
    stats["split"]["workers"] = workers
    stats["split"]["backend"] = "threads"
    if timed_out:
        return (Status.FEASIBLE if best_plan is not None else Status.UNKNOWN), best_plan, None, 0.0, stats
    if best_plan is None:
        return Status.INFEASIBLE, None, None, math.inf, stats
    return Status.OPTIMAL, best_plan, best_obj, best_obj * (1.0 - CUTOFF_REL), stats


@dataclass(frozen=True)
class _RayContext:
    """What a Ray worker needs to rebuild the split's model (:func:`_ray_sequence`)."""

    key: str
    data: ModelData
    options: Options
    backend: str


#: the split's model in this Ray worker process: (context key, cutoff) -> (model, backend)
_RAY_MODELS: dict[tuple[str, float], tuple[MilpModel, Backend]] = {}


def _ray_sequence(ctx: _RayContext, seq: tuple[int, ...], cutoff: float, stale: Any,
                  remaining: float | None) -> SequenceAnswer:
    """One sequence of the split on a Ray worker (:func:`baselines._split.solve_sequences_ray`):
    the sequence's best plan below the shared ``cutoff`` (units of τ), as in the thread path.
    A MILP solve is not stopped when its cutoff goes stale (its answer still counts)."""
    if remaining is not None and remaining <= 0.5:
        return SequenceAnswer("stop", "not started")
    deadline = None if remaining is None else time.perf_counter() + remaining
    cached = _RAY_MODELS.get((ctx.key, cutoff))
    if cached is None:
        _RAY_MODELS.clear()
        cached = (MilpModel(ctx.data, cutoff, tmpc_symmetry=bool(ctx.options.params.get("tmpc_symmetry", True))),
                  Backend(ctx.backend))
        _RAY_MODELS[(ctx.key, cutoff)] = cached
    model, backend = cached
    if model.unplaceable:
        return SequenceAnswer("refuted", "unplaceable")
    model.fix_sequence(seq)
    status, plan, objective, _b, _s = _solve_once(ctx.data, ctx.options, backend, None, deadline, cutoff, model=model)
    if status == Status.INFEASIBLE:
        return SequenceAnswer("refuted", status.value)
    if status == Status.OPTIMAL and plan is not None:  # the sequence's best plan
        return SequenceAnswer("found", status.value, objective, plan, objective / ctx.data.tau * (1.0 - CUTOFF_REL))
    return SequenceAnswer("stop", status.value, objective, plan)  # time limit; a plan here is unproven


def _split_on_ray(data: ModelData, options: Options, backend: Backend, deadline: float | None, cutoff: float,
                  t0: float) -> tuple[Status, Any, float | None, float, dict[str, Any]]:
    """:func:`_split_search` with the sequences as Ray tasks (``params["split_backend"] =
    "ray"``, :func:`baselines._split.solve_sequences_ray`): one single-threaded solve per
    task, the cutoff shared; same result as the thread path."""
    model = MilpModel(data, cutoff, tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)))

    def sequences(at: float) -> list[tuple[int, ...]]:
        return [] if model.unplaceable else checked_sequences(data, at, lambda c: c.kappa, options.params)

    seqs = sequences(cutoff)
    ctx = _RayContext(uuid.uuid4().hex, data, replace(options, threads=1), backend.name)
    run = solve_sequences_ray(seqs, _ray_sequence, ctx, cutoff, sequences_at=sequences, deadline=deadline,
                              address=options.params.get("ray_address"),
                              progress="milp split" if options.progress else None)
    best_obj, best_plan = run.best if run.best is not None else (None, None)
    stats: dict[str, Any] = {
        "backend": backend.name, **model.size(), "tau": data.tau, "symmetry_rows": model.symmetry_rows,
        "split": {"mode": "sequences", "sequences": len(seqs), "done": len(run.refuted), "improved": run.improved,
                  "subproblems": run.codes, "cbc_options": list(options.params.get("cbc_options", [])),
                  "workers": "ray", "backend": "ray"},
        "solve_s": time.perf_counter() - t0,
    }
    if run.stopped:
        return (Status.FEASIBLE if best_plan is not None else Status.UNKNOWN), best_plan, None, 0.0, stats
    if best_plan is None:
        return Status.INFEASIBLE, None, None, math.inf, stats
    return Status.OPTIMAL, best_plan, best_obj, best_obj * (1.0 - CUTOFF_REL), stats  # type: ignore[operator]


def solve_milp(problem: Problem, options: Options | None = None) -> Result:
    """Solve ``problem`` exactly with the MILP of the module docstring.

    ``options.params``: ``backend`` ("cbc" | "highs"), ``msg`` (solver log on stdout),
    ``gap_abs`` (absolute gap in units of τ, default 1e-9), ``cutoff`` (default True: a
    warm start becomes a cutoff, see the module docstring), ``cbc_options`` (extra CBC
    command-line options, e.g. ["heuristicsOnOff off"]), ``tmpc_symmetry`` (default True:
    the rows (X)), ``split`` ("none" or "sequences": the cutoff search split over the
    stages' option sequences, :mod:`baselines._split`, with :data:`SPLIT_CBC_OPTIONS`
    unless ``cbc_options`` is given; needs a warm start), ``max_sequences`` (default
    20,000), ``split_workers`` (default ``threads``: single-threaded solves at once),
    ``split_backend`` ("threads", default, or "ray": the split's sequences as Ray tasks
    sharing the cutoff, :func:`baselines._split.solve_sequences_ray`), ``ray_address``
    (the Ray cluster; default ``RAY_ADDRESS``, else a local Ray instance).
    """
    options = options or Options()
    start = time.perf_counter()
    backend_name = str(options.params.get("backend", "cbc")).lower()
    if backend_name not in BACKENDS:
        raise SolverError(f"unknown MILP backend {backend_name!r}; use one of {', '.join(BACKENDS)}")
    name = "milp" if backend_name == "cbc" else "milp-highs"
    backend = Backend(backend_name)  # one per call: its runs share the HiGHS state
    deadline = None if options.time_limit_s is None else start + float(options.time_limit_s)
    parts = node_parts(problem)
    if len(parts) == 1:  # G >= k (every version-1 instance): one model, edges at B_in
        return _solve_part(problem, options, backend, name, parts[0], start, deadline, split_fallback=False)
    # G < k: plans inside one node (edges at B_in) and plans spanning nodes (edges at B),
    # one model each; the better plan wins, "optimal" only when both are proven
    results = {part: _solve_part(problem, options, backend, name, part, time.perf_counter(), deadline,
                                 split_fallback=True)
               for part in parts}
    return combine_results(problem, name, results, time_s=time.perf_counter() - start)


def _solve_part(problem: Problem, options: Options, backend: Backend, name: str, part: str, start: float,
                deadline: float | None, *, split_fallback: bool) -> Result:
    """:func:`solve_milp` on one part of the plan space (``_model_data.node_parts``).
    ``split_fallback``: a part the warm start is not in is solved unsplit (the split needs
    it) instead of refused."""
    data = build_model_data(problem, options, part=part)
    if data.infeasible_reason is not None:
        return guarded_result(
            data, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start, objective=None,
            bound=math.inf, tolerance=0.0, warm=None, stats={"variables": 0, "constraints": 0},
            message=data.infeasible_reason,
        )
    warm = None
    warm_msg = ""
    if options.warm_start is not None:
        warm = data.slots_from_plan(options.warm_start)
        warm_msg = "" if warm is not None else data.warm_message
    cutoff = None
    if warm is not None and options.params.get("cutoff", True):
        cutoff = warm.tps / data.tau * (1.0 - CUTOFF_REL)
    split = split_mode(options.params)
    if split == "sequences" and cutoff is None and split_fallback and options.params.get("cutoff", True):
        split = "none"
        warm_msg = warm_msg or "no warm start"
        warm_msg += f"; part {part!r} solved without the split (it needs a warm start in this part)"
    if split == "sequences" and cutoff is None:
        raise SolverError("params['split'] = 'sequences' splits a proof search below a warm start: "
                          "give a usable warm start (e.g. the DP's plan) and keep params['cutoff'] on"
                          + (f"; this warm start is not usable: {warm_msg}" if warm_msg else ""))
    with quiet_pulp():
        if split == "sequences":
            status, plan, objective, bound, stats = _split_search(data, options, backend, warm, deadline, cutoff)
        else:
            status, plan, objective, bound, stats = _solve_once(data, options, backend, warm, deadline, cutoff)
    if cutoff is not None:
        stats["cutoff"] = cutoff * data.tau
        if status == Status.INFEASIBLE:
            # no plan beats the warm start by more than CUTOFF_REL: it is optimal
            status, plan, objective, bound = Status.OPTIMAL, warm.plan, warm.tps, cutoff * data.tau
        elif status == Status.UNKNOWN:
            status, plan, objective = Status.FEASIBLE, warm.plan, warm.tps
            bound = min(bound, cutoff * data.tau)
    gap_abs = float(options.params.get("gap_abs", 1e-9))
    tol = claim_tolerance(data, gap_abs)
    if plan is not None and evaluate(problem, plan).oom:
        # accepted within the solver's feasibility tolerance, OOM for the evaluator:
        # tighten M a little and solve again (docs/problem.md, P3). That model is a
        # restriction, so its bound is no bound on this problem: the first solve's is kept
        first_bound = bound if status == Status.OPTIMAL else 0.0
        stats.setdefault("guards", []).append("plan OOM under the evaluator; re-solved with M*(1-1e-6)")
        data = build_model_data(problem, options, memory_factor=1.0 - 1e-6, part=part)
        warm = None if options.warm_start is None else data.slots_from_plan(options.warm_start)
        with quiet_pulp():
            status, plan, objective, _restricted_bound, stats2 = _solve_once(data, options, backend, None, deadline)
        stats2["guards"] = stats["guards"] + stats2.get("guards", [])
        stats = stats2
        bound = max(0.0, first_bound - tol)
    elif status == Status.OPTIMAL:
        bound = max(0.0, bound - tol)  # a proof holds within the solver's tolerances
    if status == Status.OPTIMAL and plan is not None and split != "sequences" and options.params.get("verify", True):
        with quiet_pulp():
            status, plan, objective, bound = _verify_optimum(data, options, backend, plan, objective, bound, tol,
                                                             deadline, stats)
    if warm_msg:
        stats["warm_start"] = warm_msg
    elif warm is not None:
        stats["warm_start"] = f"used (TPS {warm.tps!r})"
    # the claim's tolerance: the solvers' tolerances on both the plan's T and the bound,
    # plus the cutoff's CUTOFF_REL (a cutoff proof excludes plans below TPS·(1 - CUTOFF_REL))
    plan_tps = evaluate(problem, plan).tps if plan is not None else math.inf
    tolerance = 2.0 * tol + (CUTOFF_REL * plan_tps if math.isfinite(plan_tps) else 0.0)
    stats["tolerance"] = tolerance
    return guarded_result(
        data, name, status, plan, time_s=time.perf_counter() - start, objective=objective, bound=bound,
        tolerance=tolerance, warm=warm, stats=stats,
    )


def _verify_optimum(data: ModelData, options: Options, backend: Backend, plan: Any, objective: float | None,
                    bound: float, tol: float, deadline: float | None,
                    stats: dict[str, Any]) -> tuple[Status, Any, float | None, float]:
    """Re-prove an "optimal" claim: solve again strictly below the plan's evaluated TPS
    (the cutoff model of a warm start), with another seed and another configuration
    (:data:`VERIFY_CBC_OPTIONS`; HiGHS without presolve). Infeasible there confirms the
    claim, with the cutoff as the bound. A plan found there refutes it (CBC 2.10 certified
    a plan twice the optimum on docs/formulations.md §7's reproducer): the better plan
    is verified in turn, up to :data:`VERIFY_ROUNDS` times. A second solve that stops
    without an answer leaves the claim unconfirmed: "feasible".
    """
    records: list[str] = []
    stats["verify"] = records
    for round_ in range(1, VERIFY_ROUNDS + 1):
        tps = evaluate(data.problem, plan).tps
        warm = data.slots_from_plan(plan)
        if warm is None:
            records.append(f"round {round_}: the plan is not representable ({data.warm_message})")
            return Status.FEASIBLE, plan, objective, 0.0
        cutoff = warm.tps / data.tau * (1.0 - CUTOFF_REL)
        params = {**options.params, "msg": False}
        if backend.name == "cbc":
            params["cbc_options"] = list(VERIFY_CBC_OPTIONS)
        vopts = replace(options, seed=options.seed + 7919 * round_, params=params)
        st2, plan2, obj2, _b2, _s2 = _solve_once(data, vopts, backend, None, deadline, cutoff,
                                                 presolve_off=backend.name == "highs")
        if st2 == Status.INFEASIBLE:
            records.append(f"round {round_}: nothing below {tps!r} (second proof)")
            return Status.OPTIMAL, plan, objective, max(bound, cutoff * data.tau - tol)
        better = None if plan2 is None else evaluate(data.problem, plan2)
        if better is not None and not better.oom and better.tps < tps:
            stats.setdefault("guards", []).append(
                f"verify: the solver proved {tps!r} optimal, but a second solve below it found a plan "
                f"with TPS {better.tps!r}: the first proof was wrong"
            )
            records.append(f"round {round_}: refuted by a plan with TPS {better.tps!r}")
            plan, objective, bound = plan2, obj2, 0.0
            if st2 != Status.OPTIMAL:
                return Status.FEASIBLE, plan, objective, 0.0
            continue
        if st2 == Status.OPTIMAL:
            # the cutoff model's optimum is a plan no better than ours (it sits below the
            # cutoff only within the tolerances): its proven bound confirms the claim
            records.append(f"round {round_}: nothing below {tps!r} beyond the tolerance (second proof)")
            return Status.OPTIMAL, plan, objective, max(bound, _b2 - tol)
        records.append(f"round {round_}: the second proof stopped ({st2.value}); optimum unconfirmed")
        return Status.FEASIBLE, plan, objective, 0.0
    records.append(f"no confirmed proof after {VERIFY_ROUNDS} rounds")
    return Status.FEASIBLE, plan, objective, 0.0
