"""Export a plan to a training framework: Megatron-LM arguments, a DeepSpeed config and
pipeline partition, torchtitan TOML sections (issue 22; docs/export.md).

``export_plan(problem, plan, "megatron" | "deepspeed" | "torchtitan")`` returns an
:class:`Export`, or raises :class:`ExportError` (a ValueError) naming the stage and the
rule (E1-E7) when the target cannot express the plan. Nothing is rounded: what carries
over only approximately is listed in ``Export.notes``.
"""

from __future__ import annotations

from piper.core.errors import ExportError
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.export import common
from piper.export.common import *  # the names of common.__all__, re-exported
from piper.export.common import Export, ExportPlan, prepare

__all__ = [*common.__all__, "export_plan"]


def export_plan(problem: Problem, plan: Plan, target: str, *, micro_batch: int | None = None,
                fit_recompute: bool = False) -> Export:
    """``plan`` (for ``problem``) in ``target``'s terms; :class:`ExportError` when it cannot be
    expressed. ``micro_batch``: sequences per Piper sample, for workloads that do not record it.
    End nodes one stage off their place (rule E2) are moved there, re-scored, with a note
    (:mod:`piper.export.ends`). ``fit_recompute``: when only the recomputation cannot be expressed,
    export the target's setting that the evaluator scores best instead (:mod:`piper.export.fit`),
    with a note."""
    from piper.export.ends import move_ends

    try:
        return _export(prepare(problem, plan, target, micro_batch=micro_batch))
    except ExportError as exc:
        refusal = exc
    notes: tuple[str, ...] = ()
    if refusal.rule == "E2":
        moved = move_ends(problem, plan)
        if moved is None:
            raise refusal
        plan, note = moved
        notes = (note,)
        try:
            return _export(prepare(problem, plan, target, micro_batch=micro_batch, notes=notes))
        except ExportError as exc:
            refusal = exc
    if not (fit_recompute and refusal.recompute):
        raise refusal
    from piper.export.fit import fit_recompute as fit

    fitted, note = fit(problem, plan, target, refusal)
    return _export(prepare(problem, fitted, target, micro_batch=micro_batch, notes=notes + (note,)))


def _export(ep: ExportPlan) -> Export:
    if ep.target == "megatron":
        from piper.export.megatron import export_megatron

        return export_megatron(ep)
    if ep.target == "deepspeed":
        from piper.export.deepspeed import export_deepspeed

        return export_deepspeed(ep)
    from piper.export.torchtitan import export_torchtitan

    return export_torchtitan(ep)
