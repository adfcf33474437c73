"""The planner behind ``python -m piper plan``: the best plan for a model on a cluster, searched
over the context-parallel size and the micro-batch size, for the plan a framework runs and for
Piper's free plan.

For every micro-batch size b (sequences per micro-batch; :data:`MICRO_BATCHES` that divide
the global batch, or the one the user fixed) the front end builds the workload of that b (its
costs depend on b) and the registered solver solves it twice: with ``Options.uniform`` (one
(d, t) in every stage: what Megatron-LM, DeepSpeed and torchtitan run) and without (Piper's
free plan). The best of each over all b wins, by the objective asked for (the batch time by
default: docs/problem.md §9). Every b solves the same global batch, so the numbers compare.
The search is exact when every solve it made is (status "optimal"): the best over a finite
set of exactly solved cases.

The context-parallel size c is searched the same way: one workload per (c, b)
(docs/problem.md §11: c is a property of the workload), over :func:`context_parallel_choices`:
c = 1, and for sequences of at least :data:`~piper.frontend.context.MIN_SEARCH_SEQ` tokens the
powers of two c >= 2 that Megatron-Core accepts (s a multiple of 2c, fused attention, some
tensor-parallel degree t with t x c <= the devices, whose heads split c ways when a layer runs the
all-to-all scheme: :mod:`piper.frontend.context`) and that leave each device at least
:data:`~piper.frontend.context.MIN_TOKENS_PER_DEVICE` tokens (s / c), up to ``max_cp``; a fixed c
replaces the list. A search over a subset of c is exact over that subset only.

Mixture-of-experts models: one workload per expert-parallel size e as well
(``TrainingSetup.expert_parallel``; e among the powers of two dividing the experts, up to 64 and
the devices, e_t = 1), so that every plan runs one expert layout, as Megatron-LM does.

Pruning the uniform searches (``prune``: ``python -m piper plan --uniform``, with a solver that
takes the ``upper_bound`` knob: Piper's DP; batch time or interleaved plans): the (c, e, b)
workloads are solved best-first, by the DP's own lower bound on their uniform plans
(:func:`uniform_lower_bound`, the least bound of its layouts), each below the best uniform plan
found so far. A workload that holds no better plan ends "unknown" with the knob as its bound:
the DP's proof that it cannot hold the winner (:attr:`Candidate.pruned`), so the search stays
exact. A workload solved under a cutoff that ends within :data:`TIE` (relative) of the best
value is solved again without it, so that the winner, its plan and its value are exactly those
of the unpruned search (ties go to the first (c, e, b) in the unpruned order). With the free
search the uniform searches run unpruned: the free searches are ordered by every uniform plan's
value.

The iteration (``iteration_keys``, :func:`takes_iteration_keys`): with a solver that honours the
keys of docs/problem.md §10 and §10.1 (every shipped one) the search's workloads carry the optimizer
step and, when the setup overlaps the data-parallel resync (``--overlap-grad-reduce`` /
``--overlap-param-gather``), its overlap, each plan's over its own schedule's window
(``resyncOverlapWindow`` "schedule": one micro-batch for 1F1B, ((v - 1) p + 1) / v for an interleaved
plan, :mod:`piper.frontend.overlap`), so every solve minimizes the iteration time ``score`` prices
(:func:`with_optimizer_step_s` gives the same number). Until 2026-12-04 the search used 1F1B's window
for every plan and undervalued interleaved ones. With per-layer recomputation a layer's TMPCs share the
least h (:func:`~piper.frontend.workload.build_workload`), an upper bound; without the keys the
workloads carry neither the step nor the overlap; :mod:`piper.frontend.window_check` bounds what those
searches may overvalue, for ``plan``'s status.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from piper.core.errors import FrontendError, PlanError
from piper.core.evaluate import Score, evaluate
from piper.core.options import BATCH_TIME, Options
from piper.core.plan import Plan
from piper.core.problem import ITERATION_FEATURES, WINDOW_FEATURES, WINDOW_MICROBATCH, WINDOW_SCHEDULE, Problem
from piper.core.result import Result, Status, make_result
from piper.frontend import context
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.moe_costs import expert_layouts, runner_up_moe_hardware
from piper.frontend.schedule_check import ScheduleCheck, check_schedule
from piper.frontend.workload import (
    TrainingSetup,
    build_workload,
    offered_degrees,
    tensor_parallel_degrees,
)
from piper.io.workload import load_problem
from piper.solvers.registry import SolverInfo

__all__ = ["MICRO_BATCHES", "ONE_RECOMPUTE_SETTING", "SEARCH_GC_THRESHOLDS", "TIE", "Candidate", "PlanSearch", "context_parallel_choices",
           "as_scored", "even_split_alternative", "fewer_collections", "micro_batch_choices", "other_moe_form_s", "search_plans", "search_setup", "takes_iteration_keys", "time_share_s",
           "uniform_lower_bound", "with_optimizer_step_s"]

#: the recomputation workloads of a search for plans the frameworks run: none, selective or full
#: recomputation of every transformer layer (``search_plans(recomputes=...)``)
ONE_RECOMPUTE_SETTING: tuple[tuple[str, ...], ...] = (("none",), ("selective",), ("full",))

#: the micro-batch sizes searched when the user fixes none (sequences per micro-batch)
MICRO_BATCHES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Candidate:
    """One solve of the search: a micro-batch size, uniform or free, and its result."""

    micro_batch: int
    uniform: bool
    #: the workload solved and its problem; None (both) when the search's time limit was spent before
    #: it built them (the result is then "unknown" without a plan)
    problem: Problem | None
    workload: dict | None
    result: Result
    #: the workload's context-parallel size c
    context_parallel: int = 1
    #: the MoE layers' expert-parallel size e (1 for a dense model)
    expert_parallel: int = 1
    #: the recomputation kinds the workload offers its transformer layers (None: every kind, each
    #: layer choosing; ``("full",)``: full recomputation of every layer, one setting as the frameworks have)
    recompute: tuple[str, ...] | None = None
    #: the ``upper_bound`` the solve ran under (the best value found before it, in the objective's
    #: units); None: it ran without one
    cutoff: float | None = None
    #: with the schedule check (``search_plans(check_schedules=True)``): the solve's interleaved plan
    #: that failed it (``result`` is then the same workload solved again with 1F1B only); None: none
    rejected: Result | None = None
    #: that plan's check (:class:`piper.frontend.schedule_check.ScheduleCheck`)
    rejected_check: ScheduleCheck | None = None
    #: the degree keys t the workload offers (None: every degree allowed)
    degrees: tuple[int, ...] | None = None
    #: the workload's ``TrainingSetup.cp_comm_type`` (None: the per-layer default,
    #: :func:`piper.frontend.context.layer_comm_type`)
    cp_comm_type: str | None = None
    #: the workload's ``TrainingSetup.cp_a2a_size`` (the all-to-all groups' size C1 of "a2a+p2p"; else None)
    cp_a2a_size: int | None = None
    #: what the workload's selective recomputation recomputes (``TrainingSetup.recompute_modules``), when
    #: the search tried several lists (``search_plans(module_sets=...)``); None: the setup's own
    recompute_modules: tuple[str, ...] | None = None

    def setup_for(self, setup: TrainingSetup) -> TrainingSetup:
        """``setup`` with this candidate's recompute modules (the setup's own when it has none): what
        its workload was built from, for pricing its plan again."""
        return setup if self.recompute_modules is None else replace(setup, recompute_modules=self.recompute_modules)

    @property
    def pruned(self) -> bool:
        """The solve ran under a cutoff and proved that no plan of its workload beats it: status
        "unknown", no plan, bound at least the cutoff (the DP's certificate)."""
        return self.cutoff is not None and proves_none_below(self.result, self.cutoff)

    @property
    def value(self) -> float:
        """The result's plan under its objective (+inf without a plan)."""
        return self.result.value


@dataclass(frozen=True)
class PlanSearch:
    """Every solve made, and the best runnable (uniform) and free plans over the micro-batch sizes."""

    candidates: tuple[Candidate, ...]
    #: the best uniform plan (None: no b has one)
    runnable: Candidate | None
    #: the best free plan (None when not searched or no b has one)
    free: Candidate | None
    #: wall-clock seconds of the whole search
    time_s: float
    #: solves that ran under a cutoff (the DP's ``upper_bound``: the best value found before them),
    #: those solved again without it included
    cut_solves: int = 0
    #: workloads solved again without the cutoff (within :data:`TIE` of the best value: the winner's
    #: exact plan and value are those of the unpruned search)
    resolved: int = 0
    #: the workloads carried the optimizer step and the resync's overlap (module docstring)
    iteration_keys: bool = False

    @property
    def solves(self) -> int:
        """Solves made: one per candidate, plus those solved again without the cutoff."""
        return len(self.candidates) + self.resolved

    @property
    def pruned(self) -> int:
        """Solves that proved, under their cutoff, that their workload holds no better plan."""
        return sum(1 for c in self.candidates if c.pruned)

    def proven(self, c: Candidate) -> bool:
        """``c``'s workload holds no plan of its kind better than the search's winner of that kind:
        solved optimal or infeasible, solved "feasible" with a proven bound at least the winner's
        value, or cut off below the winner with the proof that it holds none (a free search proving
        a bound at least the winner counts without a cutoff too)."""
        if c.result.status in (Status.OPTIMAL, Status.INFEASIBLE):
            return True
        top = self.runnable if c.uniform else self.free
        if (c.result.status == Status.FEASIBLE and top is not None and c is not top and c.result.bound is not None
                and c.result.bound >= top.value * (1 - 1e-9)):
            return True
        return top is not None and proves_none_below(c.result, top.value) and (c.pruned or not c.uniform)

    @property
    def exact(self) -> bool:
        """Every solve was proven (:meth:`proven`): both winners are exact over the workloads searched."""
        return self.exact_over(True) and self.exact_over(False)

    def exact_over(self, uniform: bool) -> bool:
        """Every solve of one kind (uniform or free) was proven: that kind's winner is exact over the
        workloads searched (the free search's time limit does not touch the runnable plan's proof)."""
        return all(self.proven(c) for c in self.candidates if c.uniform == uniform)

    @property
    def rejected(self) -> tuple[Candidate, ...]:
        """The solves whose interleaved plan failed the schedule check (and was solved again with
        1F1B only), best rejected value first."""
        return tuple(sorted((c for c in self.candidates if c.rejected is not None),
                            key=lambda c: c.rejected.value))

    @property
    def gain(self) -> float | None:
        """How much faster the free plan is than the runnable one (runnable / free - 1), by the
        objective; None when either is missing."""
        if self.runnable is None or self.free is None or not math.isfinite(self.free.value) or self.free.value <= 0:
            return None
        return self.runnable.value / self.free.value - 1.0


def micro_batch_choices(global_batch: int, fixed: int | None) -> tuple[int, ...]:
    """The micro-batch sizes to search: ``fixed`` alone, else those of :data:`MICRO_BATCHES`
    that divide the global batch."""
    if fixed is not None:
        return (fixed,)
    return tuple(b for b in MICRO_BATCHES if global_batch % b == 0)


def context_parallel_choices(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, fixed: int | None,
                             max_cp: int | None = None) -> tuple[int, ...]:
    """The context-parallel sizes to search (module docstring): ``fixed`` alone, else 1 and, for
    long sequences, the powers of two Megatron-Core accepts, up to ``max_cp``."""
    if fixed is not None:
        return (fixed,)
    out = [1]
    s = cfg.seq_length
    if s < context.MIN_SEARCH_SEQ or not setup.flash_attention:
        return tuple(out)
    devices = setup.nodes * hw.devices_per_node
    smallest = min(tensor_parallel_degrees(cfg, hw))
    c = 2
    while s // c >= context.MIN_TOKENS_PER_DEVICE and smallest * c <= devices and (max_cp is None or c <= max_cp):
        # some degree offered (the all-to-all scheme also needs heads that split c ways)
        if s % (2 * c) == 0 and offered_degrees(cfg, hw, replace(setup, context_parallel=c)):
            out.append(c)
        c *= 2
    return tuple(out)


def proves_none_below(result: Result, value: float) -> bool:
    """``result`` is a search that found no plan and proved its bound at least ``value`` (to a
    relative 1e-9): its workload holds no plan better than ``value``."""
    return result.plan is None and result.status == Status.UNKNOWN and result.bound >= value * (1 - 1e-9)


def uniform_lower_bound(problem: Problem, options: Options) -> float | None:
    """A lower bound on the objective (``options.objective``, its units: seconds per iteration for
    the batch time) of every uniform plan of ``problem`` with v among ``options``' virtual stages:
    the least bound of Piper's DP over its uniform layouts (:func:`piper.dp.groups.layouts`: the
    least compute and resync of every layer at t, spread over L groups of d devices; memory and
    edges ignored), the bound the DP itself stops its layout search at. +inf when no layout
    exists or some layer has no allowed choice. A chain whose inner layers differ only in their
    numbers (GPT-OSS) is bounded on its relaxed identical chain (:func:`piper.dp.chain.relaxed_chain`,
    whose exact optimum also bounds the DP's interleaved search there). None when the graph is
    neither (the DP's search of its interleaved plans is then a heuristic whose bound is only the
    layouts', so a cutoff proves little: the planner solves it without one). Only orders the search:
    what prunes a workload is the DP's own proof under ``upper_bound``."""
    from piper.core.options import candidates
    from piper.dp.chain import identical_chain, relaxed_chain
    from piper.dp.groups import least_layout_bound

    cand = candidates(problem, options)
    if cand.infeasible_reason is not None:
        return math.inf
    chain = identical_chain(problem, cand)
    if chain is None:
        relaxed = relaxed_chain(problem, cand)
        if relaxed is None:
            return None
        problem, cand, chain = relaxed
    return least_layout_bound(problem, cand, chain.order, options.virtual_stage_choices(),
                              options.objective == BATCH_TIME)


#: the garbage collector's thresholds during a search (generation 0 allocations, then collections
#: of the younger generation per older one): a search allocates millions of short-lived objects
#: while the workloads it keeps (dozens of problems) make each full collection long; Python's
#: defaults (700, 10, 10) spent ~1.8 s of a 17 s DeepSeek-V3 search collecting, these ~0.5 s
#: (docs/results/dp-speed.md, DeepSeek-V3). Only how often the collector runs: no result changes.
SEARCH_GC_THRESHOLDS = (10_000, 20, 20)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the garbage collector less often (:data:`SEARCH_GC_THRESHOLDS`) inside the block; the
    thresholds before it are restored after it."""
    before = gc.get_threshold()
    gc.set_threshold(*SEARCH_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@fewer_collections()
def search_plans(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, info: SolverInfo, options: Options, *,
                 micro_batches: tuple[int, ...], free: bool = True,
                 progress: Callable[[str], None] | None = None,
                 context_parallels: tuple[int, ...] = (1,), degrees: tuple[int, ...] | None = None,
                 prune: bool = False, check_schedules: bool = False, started: float | None = None,
                 recomputes: tuple[tuple[str, ...] | None, ...] = (None,), per_degree: bool = False,
                 iteration_keys: bool = False, cp_comm_types: tuple[str | None, ...] | None = None,
                 module_sets: tuple[tuple[str, ...], ...] | None = None) -> PlanSearch:
    """Solve the model's workload for every context-parallel size c and micro-batch size b, uniform
    and (``free``) free; the time limit of ``options`` is for the whole search, shared out as it goes.

    The uniform plans are solved first, for every (c, b). The free searches then run in the order
    of the uniform plans' values; when the solver takes the ``upper_bound`` knob (Piper's DP), each
    after the first searches only for plans better than the best free plan found so far, and a
    search that proves none exists ("unknown" with a bound at least that plan's value) counts as
    exact: that (c, b) cannot hold the winner. With ``prune`` (``python -m piper plan``) and without
    the free search (``free`` False) the uniform searches are cut off the same way, best-first by
    :func:`uniform_lower_bound` (module docstring): the winner is the same, but the workloads that
    cannot hold it keep no plan (callers that use every workload's plan, such as
    ``experiments.validate``'s rescoring, leave ``prune`` off). ``degrees`` (optional) offers only those
    tensor-parallel degrees (:func:`build_workload`'s ``degrees``: its between-node resync
    bandwidth is then that of the largest one offered).

    ``check_schedules`` (``python -m piper plan``): every interleaved plan a solve returns is played
    out (:func:`~piper.frontend.schedule_check.check_schedule`) as soon as it is found; one that
    fails (v virtual stages) is kept as the candidate's ``rejected`` plan and its workload is solved
    again, under the same cutoff, with at most v - 1 virtual stages, and so on down to 1F1B (whose
    formulas the played-out order reproduces), so that every value the search compares and prunes by
    is one of a plan that passed. The search then stays exact over 1F1B plans (each answer is at
    least as good as its workload's best 1F1B plan); the rejected solves' bounds bound the rest
    (:attr:`PlanSearch.rejected`).

    ``started``: the ``time.perf_counter()`` moment the time limit counts from (a command's start,
    so that building the model counts too); default: this call's.

    ``recomputes``: one workload per entry, offering its transformer layers only those recomputation
    kinds (:func:`build_workload`'s ``recompute``; None: every kind, each layer choosing). With
    ``(("none",), ("selective",), ("full",))`` every plan has one recomputation setting for the whole
    model, as the frameworks do (docs/frontend.md, "What the frameworks can run").

    ``per_degree``: the uniform searches build one workload per degree t (``degrees=(t,)``), so that
    each prices its data-parallel resync between nodes at its own bandwidth (a workload offering
    every degree prices it at the largest one's: :func:`~piper.frontend.workload.resync_bandwidths`,
    pessimistic for t < 8); the free searches keep one workload of every degree (a free plan may
    mix degrees).

    ``iteration_keys``: the workloads carry the optimizer step and the setup's overlap of the resync
    (each plan's own window; module docstring); the solver must honour them
    (:func:`takes_iteration_keys`). Without: neither, whatever the setup asks.

    ``cp_comm_types``: the context-parallel schemes to search at c > 1, one workload each
    (``TrainingSetup.cp_comm_type`` values; None in it: the per-layer default; "a2a+p2p": one workload
    per all-to-all size C1 of :func:`~piper.frontend.context.hierarchical_a2a_sizes`); a scheme that
    leaves no degree at some c (the all-to-all's heads) is skipped there. Default: the setup's alone
    (its ``cp_comm_type`` and ``cp_a2a_size``).

    ``module_sets``: the lists of Megatron-Core modules selective recomputation may recompute
    (``TrainingSetup.recompute_modules`` values, checked by the caller): every workload whose
    recomputation offers "selective" (an entry of ``recomputes`` holding it, or None) is built once per
    list (:attr:`Candidate.recompute_modules`); the others once. The winner is then the best over every
    list, exact when every solve is proven, as over the other dimensions. Default: the setup's list."""
    start = time.perf_counter() if started is None else started
    if iteration_keys and not takes_iteration_keys(info, setup):
        raise ValueError(f"solver {info.name!r} with this setup does not take the iteration keys (docs/problem.md §10)")
    keyed = search_setup(setup, iteration_keys)
    if check_schedules and options.schedule == "interleaved":
        raise ValueError("check_schedules answers a failing workload with 1F1B: it needs schedule 'any', "
                         "not 'interleaved' (which only reports the check)")
    candidates: list[Candidate] = []
    # MoE models: one workload per expert-parallel size e (one expert layout per plan: issue 31)
    experts = ([e for e, _ in expert_layouts(cfg, 1, setup.nodes * hw.devices_per_node, False)]
               if cfg.moe is not None and setup.expert_parallel is None else [setup.expert_parallel or 1])
    if cfg.moe is not None and setup.token_dispatcher == "flex":
        # Megatron-Core's flex dispatcher asserts "Flex token dispatcher requires TPxEP > 1" (e_t = 1 here)
        experts = [e for e in experts if e > 1]
        if not experts:
            raise FrontendError("--token-dispatcher flex needs expert parallelism e > 1 (Megatron-Core's flex "
                                "dispatcher asserts TPxEP > 1), which these devices and experts do not allow")

    def scheme_setup(c: int, k: tuple[str | None, int | None]) -> TrainingSetup:
        return replace(setup, context_parallel=c, cp_comm_type=k[0], cp_a2a_size=k[1])

    def schemes(c: int) -> list[tuple[str | None, int | None]]:
        """The context-parallel schemes searched at c, as (``cp_comm_type``, ``cp_a2a_size``) (one at
        c = 1, where none runs)."""
        if c == 1 or cp_comm_types is None:
            return [(setup.cp_comm_type, setup.cp_a2a_size)]
        pairs = [(k, a) for k in cp_comm_types
                 for a in (context.hierarchical_a2a_sizes(cfg, c) if k == "a2a+p2p" else [None])]
        return [k for k in pairs if offered_degrees(cfg, hw, scheme_setup(c, k))]

    def degree_sets(c: int, k: tuple[str | None, int | None]) -> list[tuple[int, ...] | None]:
        if not per_degree:
            return [degrees]
        offered = degrees or tuple(offered_degrees(cfg, hw, scheme_setup(c, k)))
        return [(t,) for t in offered]

    def lists(r: tuple[str, ...] | None) -> tuple[tuple[str, ...] | None, ...]:
        """The recompute-module lists a workload offering the kinds ``r`` is built with (None: the setup's)."""
        return module_sets if module_sets and (r is None or "selective" in r) else (None,)

    keys = [(c, k, e, b, r, dg, ms) for c in context_parallels for k in schemes(c) for e in experts for b in micro_batches
            for r in recomputes for dg in degree_sets(c, k) for ms in lists(r)]
    free_keys = [(c, k, e, b, r, degrees, ms) for c in context_parallels for k in schemes(c) for e in experts
                 for b in micro_batches for r in recomputes for ms in lists(r)] if free else []
    total = len(keys) + len(free_keys)
    # a key's problem and workload; (None, None) when the time limit was spent before it was built
    problems: dict[tuple, tuple[Problem | None, dict | None]] = {}
    node_costs: dict[tuple, dict] = {}
    # the DP takes the upper_bound knob for the batch time and for interleaved-only searches; Piper's
    # 1F1B DP for the TPS refuses it (``plan --objective tps`` failed with that refusal until 2026-12)
    cutoffs = "upper_bound" in (info.params or {}) and (options.objective == BATCH_TIME
                                                         or options.schedule == "interleaved")
    solves = 0

    def budget(solves_left: int) -> float | None:
        """Seconds the next solve may use (:func:`time_share_s`); None without a time limit."""
        if options.time_limit_s is None:
            return None
        return time_share_s(options.time_limit_s - (time.perf_counter() - start), solves_left)

    def run(key: tuple, uniform: bool, cutoff: float | None) -> Candidate:
        nonlocal solves
        problem, workload = problems[key]
        left = budget(total - solves)
        params = {**options.params, **({"upper_bound": cutoff} if cutoff is not None else {})}
        if problem is None:
            res = make_result(problem, info.name, Status.UNKNOWN, None, time_s=0.0, objective_kind=options.objective,
                              message="time limit hit before this workload was built")
        elif left is not None and left <= 0:
            # no time left: the solver is not called (the DP's set-up alone took seconds per workload)
            res = make_result(problem, info.name, Status.UNKNOWN, None, time_s=0.0, objective_kind=options.objective,
                              message="time limit hit before this workload was solved")
        else:
            res = info(problem, replace(options, uniform=uniform, time_limit_s=left, params=params))
        solves += 1
        c, k, e, b, r, dg, ms = key
        rejected, rejected_check = None, None
        while check_schedules and res.plan is not None and res.plan.schedule.interleaved and res.score is not None:
            check = check_schedule(problem, res.plan, res.score)
            if check.ok:
                break
            # its pass order does not do what the formulas say (piper/frontend/schedule_check.py): this
            # workload's answer is its best plan with fewer virtual stages (v - 1, ..., 1F1B) that
            # passes, each solved in the time this solve has left; the first rejected plan is kept
            if rejected is None:
                rejected, rejected_check = res, check
            left = budget(total - solves + 1)
            res = info(problem, replace(options, uniform=uniform, time_limit_s=left, params=params,
                                        max_virtual_stages=res.plan.schedule.virtual_stages - 1))
        if rejected is not None and uniform:
            # Megatron-LM's even splits at the rejected plan's degree, which the descent to v - 1 skips
            alt = even_split_alternative(cfg.with_changes(micro_batch=b), problem, rejected.plan, options.objective,
                                         res.value, c, options.max_virtual_stages)
            if alt is not None:
                res = make_result(problem, res.solver, Status.FEASIBLE, alt[0], time_s=res.time_s, objective=alt[1],
                                  bound=min(rejected.bound, alt[1]) if rejected.bound is not None else None,
                                  objective_kind=options.objective,
                                  message=f"Megatron's even split at the rejected plan's degree (p = "
                                          f"{alt[0].groups}, v = {alt[0].schedule.virtual_stages}), better than the "
                                          f"schedule check's "
                                          f"descent ({res.value:.6g})")
        cand = Candidate(b, uniform, problem, workload, res, c, e, r, cutoff, rejected, rejected_check, dg, k[0], k[1], ms)
        if progress is not None:
            what = (("uniform" if uniform else "free") + (f", experts e={e}" if cfg.moe is not None else "")
                    + ("" if r is None else f", recompute {'/'.join(r)}")
                    + ("" if ms is None else f" of {','.join(ms)}")
                    + (f", degree {dg[0]}" if per_degree and dg is not None and len(dg) == 1 else ""))
            value = f"{res.value:.6g}" if math.isfinite(res.value) else f"no plan ({res.status.value})"
            scheme = (k[0] or "default") + (f" {k[1]} x {c // k[1]}" if k[1] else "")
            where = (f"context-parallel {c}" + (f" ({scheme} scheme)" if cp_comm_types is not None and c > 1
                                                 else "") + ", ") if len(context_parallels) > 1 or c > 1 else ""
            cut = "" if cutoff is None else f", below {cutoff:.6g}"
            if cand.pruned:
                value = "pruned by bound (proven: no plan below the cutoff)"
            if rejected is not None:
                value += (f"; its interleaved plan ({rejected.value:.6g}) failed the schedule check ("
                          + "; ".join(rejected_check.reasons) + "): answered with fewer virtual stages")
            progress(f"{where}micro-batch {b}, {what}{cut}: {res.status.value}, {options.objective} {value} "
                     f"({res.time_s:.2f} s)")
        return cand

    def build(key: tuple) -> None:
        if key in problems:
            return
        if options.time_limit_s is not None and time.perf_counter() - start >= options.time_limit_s:
            # the time limit is spent: not built (building the workloads took seconds of their own:
            # GPT-OSS's 2,625 ran 20 s past a 1 s limit); its solve is "unknown" (run)
            problems[key] = (None, None)
            return
        c, k, e, b, r, dg, ms = key
        run_setup = replace(keyed, context_parallel=c, cp_comm_type=k[0], cp_a2a_size=k[1])
        if cfg.moe is not None:
            run_setup = replace(run_setup, expert_parallel=e)
        if ms is not None:
            run_setup = replace(run_setup, recompute_modules=ms)
        # the layers' costs depend on (c, scheme, e, b, the recompute modules), not on the degrees kept or
        # the recomputation kinds offered
        shared = node_costs.setdefault((c, k, e, b, ms), {})
        workload = build_workload(cfg.with_changes(micro_batch=b), hw, run_setup, degrees=dg, recompute=r,
                                  node_costs=shared)
        problems[key] = (load_problem(workload, strict=True), workload)

    for key in keys:
        build(key)
        if free or not cutoffs or not prune:
            candidates.append(run(key, True, None))
    resolved = 0
    if prune and not free and cutoffs:
        candidates, resolved = _pruned_uniform(keys, problems, options, run)
    if free:
        uniform_value: dict[tuple, float] = {}
        for x in candidates:
            k = (x.context_parallel, (x.cp_comm_type, x.cp_a2a_size), x.expert_parallel, x.micro_batch, x.recompute,
                 x.recompute_modules)
            uniform_value[k] = min(uniform_value.get(k, math.inf), x.value)
        order = sorted(free_keys, key=lambda key: uniform_value.get(key[:5] + key[6:], math.inf))
        incumbent = math.inf
        for key in order:
            build(key)
            cand = run(key, False, incumbent if cutoffs and math.isfinite(incumbent) else None)
            candidates.append(cand)
            if cand.result.plan is not None:
                incumbent = min(incumbent, cand.value)

    def best(uniform: bool) -> Candidate | None:
        found = [c for c in candidates if c.uniform == uniform and c.result.plan is not None]
        return min(found, key=lambda c: c.value) if found else None

    winner = best(False) if free else None
    runnable = best(True)

    return PlanSearch(tuple(candidates), runnable, winner, time.perf_counter() - start,
                      sum(1 for c in candidates if c.cutoff is not None) + resolved, resolved, iteration_keys)


def search_setup(setup: TrainingSetup, iteration_keys: bool) -> TrainingSetup:
    """The setup :func:`search_plans` builds its workloads from: with ``iteration_keys`` the optimizer
    step and the setup's overlap of the resync, each plan's over its own schedule's window
    (``resyncOverlapWindow`` "schedule", docs/problem.md §10.1: one micro-batch for 1F1B, more for an
    interleaved plan, as ``score`` prices it); without, neither."""
    if iteration_keys:
        return replace(setup, optimizer_step=True, resync_overlap_microbatches=1.0,
                       resync_overlap_window=WINDOW_SCHEDULE)
    return replace(setup, optimizer_step=False, overlap_grad_reduce=False, overlap_param_gather=False)


def takes_iteration_keys(info: SolverInfo, setup: TrainingSetup) -> bool:
    """Whether :func:`search_plans` can give ``info`` workloads with the keys of docs/problem.md §10
    and §10.1 (``resyncOverlapWindow``): it honours them, and, for a solver that prices them only when a layer's TMPCs at a degree share
    them (``SolverInfo.iteration_keys_shared_per_degree``: Piper's DP, piper/dp/iteration.py), the
    setup offers each MoE layer one expert layout per degree (with ``expert_tensor_parallel`` a
    layer's TMPCs at a degree differ in their expert keys). The exact models take them either way."""
    return set(ITERATION_FEATURES + WINDOW_FEATURES) <= set(info.features) and not (
        setup.expert_tensor_parallel and info.iteration_keys_shared_per_degree)


def with_optimizer_step_s(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, cand: Candidate) -> float:
    """The batch time (seconds) of ``cand``'s plan priced as ``python -m piper score`` prices a layout:
    its workload (c, e, micro-batch, recomputation, degrees) rebuilt with the optimizer step (docs/problem.md
    §10) and, when ``setup`` overlaps the resync, its overlap over the plan's own micro-batches (p groups,
    v, m = B / (b d)), written as ``resyncOverlapTime`` times that window: the search's value when its
    workloads carried the keys (they price the same window through ``resyncOverlapWindow``, §10.1; with
    per-layer recomputation at most that value), and the step and overlap a search without the keys
    left out. inf when it does not fit."""
    score = as_scored(cfg, hw, setup, cand)
    return score.batch_time if score is not None else math.inf


def other_moe_form_s(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, cand: Candidate) -> float | None:
    """:func:`with_optimizer_step_s` of ``cand`` with the runner-up MoE-block form fitted on the same rows
    (``FittedMoE.alternative``, piper/frontend/hardware.py) in place of the catalog's; None for a dense
    model, hardware without a fitted runner-up, or constants the user set (they are not the catalog's).
    How much an MoE plan's predicted time hangs on the form, where the rows cannot decide it."""
    other = runner_up_moe_hardware(cfg, hw)
    return None if other is None else with_optimizer_step_s(cfg, other, setup, cand)


def as_scored(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, cand: Candidate) -> Score | None:
    """The evaluator's score of ``cand``'s plan priced as :func:`with_optimizer_step_s` says (both
    objectives: ``tps`` and ``batch_time``); None when it does not fit."""
    from piper.frontend.overlap import overlap_microbatches

    plan = cand.result.plan
    d = plan.stages[0].d
    m = max(1, setup.global_batch // (cand.micro_batch * d))
    run = replace(cand.setup_for(setup), optimizer_step=True, context_parallel=cand.context_parallel, cp_comm_type=cand.cp_comm_type,
                  cp_a2a_size=cand.cp_a2a_size,
                  resync_overlap_microbatches=overlap_microbatches(plan.groups, plan.schedule.virtual_stages, m),
                  resync_overlap_window=WINDOW_MICROBATCH)
    if cfg.moe is not None:
        run = replace(run, expert_parallel=cand.expert_parallel)
    workload = build_workload(cfg.with_changes(micro_batch=cand.micro_batch), hw, run, degrees=cand.degrees,
                              recompute=cand.recompute)
    score = evaluate(load_problem(workload, strict=True), plan)
    return score if not score.oom and math.isfinite(score.batch_time) else None


def even_split_alternative(cfg: TransformerConfig, problem: Problem, rejected: Plan, objective: str,
                           below: float, context_parallel: int = 1,
                           max_virtual_stages: int | None = None) -> tuple[Plan, float] | None:
    """The best plan, below ``below`` (the objective's units), of Megatron-LM's even split at the
    rejected interleaved plan's degree t: its L device groups of d devices, and every other pipeline
    size L' dividing the layers with the most replicas that fit, d' = k // (t L') (Megatron's d =
    GPUs / (t p)); v' = V, V - 1, ..., 2 virtual stages (V = ``max_virtual_stages``, default the
    rejected plan's v) whose L' v' chunks split the transformer layers evenly (as they are, or with
    the embedding and / or the loss counted as a layer each, Megatron-Core's
    ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``:
    :func:`piper.frontend.score.megatron_split`), every layer with the
    rejected plan's one TMPC, the embedding in the first chunk and the output side in the last
    (:func:`piper.frontend.score.layout_plan`), that passes the schedule check (equal chunks: the
    formulas hold). The check's descent to v - 1 looks only at each v's optimum; an even split it
    skips can beat the 1F1B plan it ends at (the Megatron-LM README's gpt-314b: its own layout, v = 6,
    9.72 s against the descent's 1F1B plan at 10.95 s, both without the optimizer step; gpt-119b:
    the descent's plans have 3 groups, which 92 layers do not split evenly, and its own layout, 4
    groups, is one of the other pipeline sizes). None when no such plan exists or the layers hold
    more than one TMPC. ``context_parallel``: the workload's c (its degree keys are t x c)."""
    from piper.core.evaluate import evaluate
    from piper.frontend.score import Layout, even_split, layout_plan, megatron_split
    from piper.frontend.tmpc import expert_layout, parse_tmpc_id

    kinds = {nd.id: nd.kind for nd in problem.nodes}
    layer_ids = {tid for st in rejected.stages for v, tid in st.tmpcs.items() if kinds[v] == "transformer"}
    dense_ids = {tid.split("+ep", 1)[0] for tid in layer_ids}
    if len(dense_ids) != 1 or len({expert_layout(tid) for tid in layer_ids if "+ep" in tid}) > 1:
        return None
    recompute, sp = parse_tmpc_id(next(iter(dense_ids)))
    e, et = next((expert_layout(tid) for tid in layer_ids if "+ep" in tid), (1, 1))
    first = rejected.stages[0]
    width, d, groups = first.t, first.d, rejected.groups
    c = context_parallel
    best: tuple[Plan, float] | None = None
    top = max(rejected.schedule.virtual_stages, max_virtual_stages or 0)
    # the layer counts Megatron-Core splits evenly: the layers, and with the embedding and / or the loss
    # counted as a layer each (--account-for-embedding-in-pipeline-split / -loss-: megatron_split)
    counted = {(False, False): cfg.layers, (True, True): cfg.layers + 2, (True, False): cfg.layers + 1,
               (False, True): cfg.layers + 1}
    shapes = [(groups, d)] + [(g, problem.devices // (width * g)) for g in range(2, cfg.layers + 3)
                              if any(n % g == 0 for n in counted.values()) and g != groups
                              and problem.devices // (width * g) >= 1]
    for (groups, d), v, (emb, loss) in ((shape, v, flags) for shape in shapes for v in range(top, 1, -1)
                                        for flags in counted):
        if counted[(emb, loss)] % (groups * v):
            continue
        layout = Layout(tp=width // c, pp=groups, dp=d, recompute=recompute, sequence_parallel=sp, vp=v, cp=c,
                        ep=e, etp=et)
        try:
            split = (even_split(cfg.layers, groups * v) if not (emb or loss)
                     else list(megatron_split(cfg.layers, groups, v, emb, loss)))
            plan = layout_plan(problem, split, layout)
            score = evaluate(problem, plan)
        except (PlanError, FrontendError, KeyError):
            continue
        value = score.value(objective)
        if score.oom or not math.isfinite(value) or value >= (below if best is None else best[1]):
            continue
        if check_schedule(problem, plan, score).ok:
            best = (plan, value)
    return best


def time_share_s(left_s: float, solves_left: int) -> float:
    """Seconds one solve may use of the ``left_s`` the search has left with ``solves_left`` solves to
    make (this one included): half of it while others remain, all of it for the last. Most solves of
    a search end in a fraction of a second (cut off below the best plan so far), so an even share
    (1/420 of 300 s for DeepSeek-V3's 420 uniform workloads) starved the first, most important ones;
    a half keeps every solve's deadline within the search's and leaves time for the rest."""
    left_s = max(0.0, left_s)
    return left_s if solves_left <= 1 else left_s / 2


#: relative distance to the best value within which a solve made under a cutoff is made again
#: without it: a thousand times the DP's own slack on a cutoff and on "optimal" (1e-9,
#: piper.dp.limits.with_slack), so that no workload whose unpruned optimum could tie or beat the
#: winner keeps a plan found under a cutoff
TIE = 1e-6


def _pruned_uniform(keys: list[tuple], problems: dict[tuple, tuple[Problem | None, dict | None]],
                    options: Options, run: Callable[[tuple, bool, float | None], Candidate]
                    ) -> tuple[list[Candidate], int]:
    """The uniform searches best-first, each below the best uniform plan so far (module docstring);
    returns the candidates in the order of ``keys`` and how many were solved again without a cutoff."""
    uniform = replace(options, uniform=True)
    lower = {key: None if problems[key][0] is None else uniform_lower_bound(problems[key][0], uniform) for key in keys}
    index = {key: i for i, key in enumerate(keys)}
    done: dict[tuple, Candidate] = {}
    incumbent = math.inf
    for key in sorted(keys, key=lambda k: (0.0 if lower[k] is None else lower[k], index[k])):
        cutoff = incumbent if math.isfinite(incumbent) and lower[key] is not None else None
        cand = run(key, True, cutoff)
        done[key] = cand
        if cand.result.plan is not None:
            incumbent = min(incumbent, cand.value)
    resolved = 0
    if math.isfinite(incumbent):
        # near the best value the plan found under a cutoff may be another of equal value than the
        # unpruned search's: solve those again as the unpruned search does, without the cutoff
        for key in keys:
            cand = done[key]
            if cand.cutoff is not None and cand.result.plan is not None and cand.value <= incumbent * (1 + TIE):
                again = run(key, True, None)
                resolved += 1
                if again.result.plan is not None:
                    done[key] = again
                # else the time limit cut the solve again: the plan found under the cutoff stays
    return [done[key] for key in keys], resolved
