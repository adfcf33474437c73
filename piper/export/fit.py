"""``--fit-recompute``: when a target cannot express the plan's per-layer recomputation
(rules E4 / E6 about recomputation only), try the target's own settings instead and keep
the one the evaluator scores best (least time per sample, or batch time when asked: ``python -m
piper plan``; the first on ties, in the order below: less recomputation first) among those that
fit the memory limit.

Same stages, same (d, t), same sequence-parallel switch; only the TMPCs change (the
transformer layers' to the setting, every other node's to no recomputation). The result is never silent: :func:`fit_recompute` returns a note with the
setting chosen and the evaluator's numbers for the plan and the exported plan.

Settings per target (docs/export.md):

* Megatron-LM: none; selective on every layer; full on the first n layers of every stage
  (``--recompute-method block``, n = 1 .. longest stage - 1); full on every layer;
* DeepSpeed: none; full on every layer (``activation_checkpoint_interval`` 0 or 1);
* torchtitan: none; full on every n-th layer of every stage (``selective_ac_option`` n,
  n = longest stage .. 2); full on every layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from piper.core.errors import ExportError
from piper.core.evaluate import evaluate
from piper.core.options import TPS
from piper.core.plan import Plan
from piper.core.problem import ACTIVATION_RECOMP, VANILLA, Problem
from piper.export.common import map_layers, tmpc_meaning
from piper.frontend.tmpc import EP_SUFFIX

__all__ = ["fit_recompute", "fit_setting", "settings"]

#: a setting: (label, kind of layer k of a stage with n layers)
Setting = tuple[str, Callable[[int, int], str]]


def settings(target: str, longest: int) -> list[Setting]:
    """The target's recomputation settings, least recomputation first."""
    none: Setting = ("no recomputation", lambda k, n: "none")
    full: Setting = ("full recomputation of every layer", lambda k, n: "full")
    if target == "megatron":
        out = [none, ("selective recomputation of every layer", lambda k, n: "selective")]
        out += [(f"full recomputation of the first {m} layers of every stage (--recompute-method block)",
                 lambda k, n, m=m: "full" if k < m else "none") for m in range(1, longest)]
        return out + [full]
    if target == "torchtitan":
        out = [none]
        out += [(f"full recomputation of every {m}th layer of every stage (selective_ac_option {m})",
                 lambda k, n, m=m: "full" if (k + 1) % m == 0 else "none") for m in range(longest, 1, -1)]
        return out + [full]
    return [none, full]


def _tmpc_id(kind: str, sequence_parallel: bool, bert: bool, current: str = "") -> str:
    """The id of recomputation ``kind`` for a layer whose TMPC is ``current``: its sequence-parallel
    switch kept, and an MoE layer's expert layout (``+ep{e}``, ``x{e_t}``: one layout per plan) too."""
    if bert:
        return {"none": VANILLA, "full": ACTIVATION_RECOMP}.get(kind, "")
    expert = current[current.index(EP_SUFFIX):] if EP_SUFFIX in current else ""
    return kind + ("+sp" if sequence_parallel else "") + expert


def fit_recompute(problem: Problem, plan: Plan, target: str, refusal: ExportError,
                  objective: str = TPS) -> tuple[Plan, str]:
    """The plan with the target setting the evaluator scores best by ``objective`` (``tps``: time per
    sample, the export's default; ``batch-time``: the iteration, for ``python -m piper plan``), and a
    note saying what changed; ``refusal`` is raised again (with the reason) when no setting fits memory."""
    fitted, _, note = fit_setting(problem, plan, target, refusal, objective)
    return fitted, note


def fit_setting(problem: Problem, plan: Plan, target: str, refusal: ExportError,
                objective: str = TPS) -> tuple[Plan, str, str]:
    """:func:`fit_recompute` with the chosen setting's label: (plan, label, note)."""

    lm = map_layers(problem)
    pos = lm.position
    base = evaluate(problem, plan)
    longest = max(sum(1 for v in s.nodes if v in pos) for s in plan.stages)
    best: tuple[float, str, Plan, float] | None = None
    seen: set[tuple[tuple[int, ...], ...]] = set()
    for label, kind_of in settings(target, longest):
        # settings that recompute the same number of layers of each kind in every stage score the
        # same (up to rounding): keep the first
        shape = tuple(tuple(sorted(kind_of(k, n) for k in range(n)).count(x) for x in ("none", "selective", "full"))
                      for n in (sum(1 for v in s.nodes if v in pos) for s in plan.stages))
        if shape in seen:
            continue
        seen.add(shape)
        stages = []
        ok = True
        for s in plan.stages:
            layers = sorted((v for v in s.nodes if v in pos), key=pos.__getitem__)
            tm = dict(s.tmpcs)
            for v in s.nodes:
                if v in pos:
                    continue
                # the targets recompute transformer layers only: every other node keeps its activations
                meaning = tmpc_meaning(s.tmpcs[v])
                bert = s.tmpcs[v] in (VANILLA, ACTIVATION_RECOMP)
                tid = _tmpc_id("none", bool(meaning and meaning[1]), bert, s.tmpcs[v])
                if problem.node_by_id[v].tmpc(s.t, tid) is None:
                    ok = False
                    break
                tm[v] = tid
            for k, v in enumerate(layers):
                meaning = tmpc_meaning(s.tmpcs[v])
                bert = s.tmpcs[v] in (VANILLA, ACTIVATION_RECOMP)
                tid = _tmpc_id(kind_of(k, len(layers)), bool(meaning and meaning[1]), bert, s.tmpcs[v])
                if not tid or problem.node_by_id[v].tmpc(s.t, tid) is None:
                    ok = False
                    break
                tm[v] = tid
            if not ok:
                break
            stages.append(replace(s, tmpcs=tm))
        if not ok:
            continue
        candidate = Plan(tuple(stages), plan.schedule)
        score = evaluate(problem, candidate)
        if score.oom:
            continue
        # strictly better beyond rounding (relative 1e-9), else the earlier (less recomputation) stays
        if best is None or score.value(objective) < best[0] * (1 - 1e-9):
            best = (score.value(objective), label, candidate, max(st.memory for st in score.stages))
    if best is None:
        raise ExportError(f"{refusal} (--fit-recompute: no setting of the target fits the memory limit with this "
                          "split and (d, t))", rule=refusal.rule, target=refusal.target, stage=refusal.stage)
    got, label, fitted, memory = best
    was = base.value(objective)
    what = "time per sample" if objective == TPS else "batch time"
    change = "" if base.oom else f" ({100 * (got / was - 1):+.2f}%)"
    note = (f"--fit-recompute: the plan's per-layer recomputation has no setting here; exported with {label}: "
            f"{what} {got:.6g}{change} against the plan's {was:.6g}, fullest stage "
            f"{memory:.6g} bytes of {problem.memory_per_device:.6g} (the evaluator's scores)")
    return fitted, label, note
