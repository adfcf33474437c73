"""The paper's PipeDream-2BW-like "equi" baseline (``docs/problem.md`` §7.2).

Every plan it considers has the same data-parallel degree d and tensor-parallel
degree t in all L stages, and uses activation recomputation on every layer or on
none. It returns the best such plan under the evaluator. The semantics follow
the authors' planner (msr-fiddle/piper ``algo.cpp``, ``runPipeDream2BWPlanner``
and ``runPipeDream2BWPlannerNonTransformer``); they were checked against the
golden ``equi*`` rows of ``reference/sample.jsonl``:

Transformer mode (graphs with ``ParallelTransformerLayer`` nodes; variants
``equi`` and, with ``Options.tensor_parallel=False``, ``equi_noTP``):

* The transformer layers, in a topological order, are split into ``L'``
  contiguous groups of ``T // L'`` layers; the *last* ``T % L'`` groups get one
  more layer (BERT-32 in 5 stages: 6, 6, 6, 7, 7).
* The other layers are "initial" (they reach a transformer layer: embedding,
  masks, ...) or "final" (reached from one: the pooler), found by repeatedly
  scanning the edges as the authors' code does. Either they join the first /
  last transformer stage (``L = L'``), or they form their own first / last
  stage (``L = L' + 2``). Both arrangements are tried (``params["equi_separate"]``
  False restricts to the first, as the paper's "no sep" variant).
* ``L`` runs over 1.. while ``L <= k`` and every transformer stage is
  non-empty; d over the divisors of N with ``L * d <= min(k, N)``; t over the
  degrees every layer supports with ``L * d * t <= k`` (only t = 1 without
  tensor parallelism); then "no recomputation" (every layer's ``vanilla``
  TMPC) before "recomputation everywhere" (every layer's ``activation
  recomp``). The first plan with the strictly lowest TPS wins (the authors'
  tie-break order).

Topological mode (graphs without transformer layers, or
``params["equi_mode"] = "topological"``; variant ``equi_nonTransformer``): the
same search over an even split of one topological order into L stages (again
the last ``n % L`` stages one layer longer). The order is the authors' (Kahn's
algorithm with a LIFO stack seeded in file order, successors in edge-file
order), so the split is the one their planner scores.

Decisions where the authors' code is silent or would crash, written down here:

* A layer without a TMPC named ``vanilla`` at t uses its first allowed TMPC
  that is not ``activation recomp``; a layer without ``activation recomp`` at
  t keeps that choice in the "everywhere" variant. A (t, variant) is skipped
  when a layer has no allowed choice (``Options.exclude_tmpcs``: with ``NO_AR``
  only the "no recomputation" variant is left).
* A separate first / last stage that would be empty (no initial / final
  layers) is dropped from the plan rather than kept as an empty stage (the
  evaluator forbids empty stages); its TPS is unchanged.
* If the initial / final classification does not cover every layer (a layer
  neither reaches nor is reached from a transformer layer; the authors' loop
  would not terminate) or would put a stage out of pipeline order, transformer
  mode is not applicable and the topological mode is used (``stats["mode"]``
  says which, ``message`` says why).

Version 2 (docs/problem.md §2: nodes of G devices, B_in, f, sharded memory s/d) and the
iteration keys (§10: the resync's overlap, the optimizer step) are honoured because every
candidate plan is scored by the one evaluator
(:func:`piper.core.evaluate.evaluate`), which applies the version-2 formulas; this module
computes no stage time of its own. Every equi plan is uniform (docs/problem.md §2.5:
one (d, t) in all stages), so ``Options.uniform`` restricts nothing here: equi is the
special case of a uniform plan with, in addition, an even split of the layers and
activation recomputation on every layer or on none.

The result is a heuristic: status FEASIBLE with the best plan (bound 0), or
UNKNOWN when every plan of its family is out of memory: that is no proof that
no plan exists, so it is not reported as INFEASIBLE. INFEASIBLE (a proof) is
returned only when some layer has no usable TMPC at all, or none whose memory a + b
(one microbatch in flight) fits in M (:func:`piper.core.options.candidates`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from piper.core.evaluate import evaluate
from piper.core.options import Options, candidates
from piper.core.plan import Plan, Stage
from piper.core.problem import ACTIVATION_RECOMP, VANILLA, Problem
from piper.core.result import Result, Status, make_result

__all__ = [
    "TRANSFORMER_LAYER_NAME",
    "solve_equi",
    "authors_topological_order",
    "transformer_layout",
    "TransformerLayout",
    "split_evenly",
]

#: the node name that marks a transformer layer (BERT's profile)
TRANSFORMER_LAYER_NAME = "ParallelTransformerLayer"
#: why transformer mode does not apply to a graph without transformer layers
NO_TRANSFORMERS = "the graph has no transformer layers"


@dataclass(frozen=True)
class TransformerLayout:
    """The transformer layers in topological order and the layers before / after them."""

    transformers: tuple[int, ...]
    #: layers that reach a transformer layer (join the first stage), in discovery order
    initial: tuple[int, ...]
    #: layers reached from a transformer layer (join the last stage), in discovery order
    final: tuple[int, ...]


def authors_topological_order(problem: Problem) -> list[int]:
    """Node ids in the order the authors' ``getNodeIdsToposorted`` produces.

    Kahn's algorithm with a LIFO stack: sources pushed in file order, the most
    recently pushed node popped first, successors pushed in edge-file order as
    their in-degree reaches 0.
    """
    indeg = {nd.id: 0 for nd in problem.nodes}
    succs: dict[int, list[int]] = {nd.id: [] for nd in problem.nodes}
    for e in problem.edges:
        indeg[e.v] += 1
        succs[e.u].append(e.v)
    stack = [nd.id for nd in problem.nodes if indeg[nd.id] == 0]
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    return order


def transformer_layout(problem: Problem) -> TransformerLayout | str:
    """Classify the layers as the authors' PipeDream-2BW-like planner does.

    Returns the layout, or a string saying why transformer mode does not apply
    (no transformer layers; some layer neither before nor after them; an edge
    that would run backwards between stages, e.g. a non-transformer layer
    between two transformer layers).
    """
    is_tr = {nd.id: nd.name == TRANSFORMER_LAYER_NAME for nd in problem.nodes}
    transformers = [v for v in authors_topological_order(problem) if is_tr[v]]
    if not transformers:
        return NO_TRANSFORMERS
    initial: list[int] = []
    final: list[int] = []
    in_initial: set[int] = set()
    in_final: set[int] = set()
    while len(transformers) + len(initial) + len(final) < problem.n:
        grew = False
        # one pass over the edges in file order, with the classification read
        # afresh for every edge (as the authors' loop does)
        for e in problem.edges:
            u, v = e.u, e.v
            if u not in in_initial and not is_tr[u] and u not in in_final and (v in in_initial or is_tr[v]):
                initial.append(u)
                in_initial.add(u)
                grew = True
            if v not in in_initial and not is_tr[v] and v not in in_final and (is_tr[u] or u in in_final):
                final.append(v)
                in_final.add(v)
                grew = True
        if not grew:
            left = [nd.id for nd in problem.nodes if not is_tr[nd.id] and nd.id not in in_initial and nd.id not in in_final]
            return f"layer(s) {left[:10]} neither reach nor are reached from a transformer layer"
    # the finest partition (initial | each transformer | final) must respect the
    # edges; every equi partition merges neighbours of it, so then all do
    rank = {v: -1 for v in initial}
    rank.update({v: len(transformers) for v in final})
    rank.update({v: i for i, v in enumerate(transformers)})
    for e in problem.edges:
        if rank[e.u] > rank[e.v]:
            return f"edge {e.u}->{e.v} runs backwards across the transformer stages"
    return TransformerLayout(tuple(transformers), tuple(initial), tuple(final))


def split_evenly(items: Sequence[int], parts: int) -> list[list[int]]:
    """``items`` cut into ``parts`` contiguous groups of ``len // parts`` items,
    the last ``len % parts`` groups one item longer (the authors' rule)."""
    base, larger = divmod(len(items), parts)
    groups: list[list[int]] = []
    pos = 0
    for i in range(parts):
        size = base + (1 if i >= parts - larger else 0)
        groups.append(list(items[pos : pos + size]))
        pos += size
    return groups


def _transformer_partitions(
    layout: TransformerLayout, max_stages: int, separate_options: Sequence[bool]
) -> Iterator[tuple[list[list[int]], bool, int]]:
    """(stage node lists, separate?, the authors' stage count) of every
    transformer-mode partition, in the authors' order. The stage count
    includes a dropped empty separate stage: it is what bounds d and t."""
    n_tr = len(layout.transformers)
    for sep in separate_options:
        extra = 2 if sep else 0
        stages = 1 + extra
        while stages <= max_stages and stages <= n_tr + extra:
            groups = split_evenly(layout.transformers, stages - extra)
            if sep:
                parts = [list(layout.initial), *groups, list(layout.final)]
                # a separate stage with no layers is dropped (documented above)
                parts = [p for p in parts if p]
            else:
                parts = [list(g) for g in groups]
                parts[0].extend(layout.initial)
                parts[-1].extend(layout.final)
            yield parts, sep, stages
            stages += 1


def _topological_partitions(order: Sequence[int], max_stages: int) -> Iterator[tuple[list[list[int]], bool, int]]:
    """Even splits of ``order`` into 1..min(k, n) stages (more stages would only
    add empty stages: the same plans with more devices)."""
    for stages in range(1, min(max_stages, len(order)) + 1):
        yield split_evenly(order, stages), False, stages


def _in_pipeline_order(problem: Problem, parts: list[list[int]]) -> bool:
    stage_of = {v: i for i, p in enumerate(parts) for v in p}
    return all(stage_of[e.u] <= stage_of[e.v] for e in problem.edges)


def _variant_tmpcs(problem: Problem, options: Options, t: int) -> list[tuple[bool, dict[int, str]]]:
    """For degree t: [(recomputation everywhere?, node id -> TMPC id)], "none" first.

    Empty when some layer has no allowed TMPC at t. The "everywhere" variant is
    left out when it equals the "none" variant; the "none" variant is left out
    when some layer allows only ``activation recomp``.
    """
    cand = candidates(problem, options).tmpcs
    none: dict[int, str] | None = {}
    every: dict[int, str] = {}
    for nd in problem.nodes:
        allowed = [c.id for _, c in cand[nd.id].get(t, ())]
        if not allowed:
            return []
        plain = VANILLA if VANILLA in allowed else next((x for x in allowed if x != ACTIVATION_RECOMP), None)
        if plain is None:
            none = None
        elif none is not None:
            none[nd.id] = plain
        every[nd.id] = ACTIVATION_RECOMP if ACTIVATION_RECOMP in allowed else str(plain)
    out: list[tuple[bool, dict[int, str]]] = []
    if none is not None:
        out.append((False, none))
    if none is None or every != none:
        out.append((True, every))
    return out


def solve_equi(problem: Problem, options: Options | None = None) -> Result:
    """The best equi plan (same d and t everywhere, even split) under the evaluator.

    ``options.params``: ``equi_mode`` "auto" (default: transformer mode when the
    graph has transformer layers), "transformer" or "topological";
    ``equi_separate`` (default True) also tries the non-transformer layers in
    their own first / last stages. Honours ``data_parallel``,
    ``tensor_parallel``, ``exclude_tmpcs``, ``time_limit_s`` and (trivially: every equi
    plan is uniform) ``uniform``; version 2 through the evaluator; expert parallelism
    (docs/problem.md §11): a candidate whose TMPCs break rule 6 at its (d, t) is skipped,
    the expert terms come from the evaluator.
    """
    options = options or Options()
    start = time.perf_counter()
    mode = str(options.params.get("equi_mode", "auto"))
    if mode not in ("auto", "transformer", "topological"):
        raise ValueError(f"equi_mode must be 'auto', 'transformer' or 'topological', not {mode!r}")
    separate = bool(options.params.get("equi_separate", True))
    k, n_mb = problem.devices, problem.microbatches
    cand = candidates(problem, options)
    stats: dict[str, object] = {"candidates_evaluated": 0}
    message = ""

    if cand.infeasible_reason is not None:
        return make_result(
            problem, "equi", Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
            stats={**stats, "mode": mode}, message=cand.infeasible_reason, objective_kind=options.objective,
        )

    partitions: Iterator[tuple[list[list[int]], bool, int]]
    used_mode = "topological"
    if mode in ("auto", "transformer"):
        layout = transformer_layout(problem)
        if isinstance(layout, TransformerLayout):
            used_mode = "transformer"
            partitions = _transformer_partitions(layout, k, (False, True) if separate else (False,))
        else:
            if mode == "transformer" or layout != NO_TRANSFORMERS:
                message = f"transformer mode not applicable ({layout}); used an even split of a topological order"
            partitions = _topological_partitions(authors_topological_order(problem), k)
    else:
        partitions = _topological_partitions(authors_topological_order(problem), k)
    stats["mode"] = used_mode

    # degrees every layer supports (the authors check one layer; in their inputs all agree)
    ts = [t for t in cand.ts if all(t in cand.tmpcs[nd.id] for nd in problem.nodes)]
    variants = {t: _variant_tmpcs(problem, options, t) for t in ts}
    ds = cand.ds

    best_tps = float("inf")
    best_plan: Plan | None = None
    best_info: dict[str, object] = {}
    evaluated = 0
    timed_out = False
    skipped_order = 0
    rule6_skipped = 0
    for parts, sep, nominal in partitions:
        if timed_out:
            break
        if not _in_pipeline_order(problem, parts):
            skipped_order += 1
            continue
        n_stages = len(parts)
        for d in ds:
            if timed_out:
                break
            if nominal * d > min(k, n_mb):
                break
            for t in ts:
                if nominal * d * t > k:
                    break
                for recomp, tm in variants[t]:
                    if any((d * t) % problem.node_by_id[v].tmpc(t, name).expert_width for v, name in tm.items()):
                        rule6_skipped += 1  # rule 6 (docs/problem.md §11): e e_t must divide d t
                        continue
                    plan = Plan(tuple(Stage(tuple(p), d, t, {v: tm[v] for v in p}) for p in parts))
                    score = evaluate(problem, plan)
                    evaluated += 1
                    if score.value(options.objective) < best_tps:  # TPS or batch time (docs/problem.md §9)
                        best_tps = score.value(options.objective)
                        best_plan = plan
                        best_info = {
                            "stages": n_stages,
                            "d": d,
                            "t": t,
                            "activation_recomp_everywhere": recomp,
                            "non_transformer_separately": sep,
                        }
                if options.time_limit_s is not None and time.perf_counter() - start > options.time_limit_s:
                    timed_out = True
                    break
    stats.update(best_info)
    stats["candidates_evaluated"] = evaluated
    if skipped_order:
        stats["partitions_out_of_order"] = skipped_order
    if rule6_skipped:
        stats["candidates_breaking_rule_6"] = rule6_skipped
    elapsed = time.perf_counter() - start
    if timed_out:
        message = (message + "; " if message else "") + f"time limit {options.time_limit_s} s reached"
    if best_plan is None:
        msg = "no equi plan fits in memory (not a proof that no plan exists)" if not timed_out else ""
        return make_result(
            problem, "equi", Status.UNKNOWN, None, time_s=elapsed, bound=0.0, stats=stats,
            message="; ".join(x for x in (message, msg) if x), objective_kind=options.objective,
        )
    return make_result(
        problem, "equi", Status.FEASIBLE, best_plan, time_s=elapsed, objective=best_tps, bound=0.0,
        stats=stats, message=message, objective_kind=options.objective,
    )
