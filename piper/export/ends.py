"""Moving the model's ends into the first and last stage (export rule E2), with a note.

Megatron-LM, torchtitan and DeepSpeed place the nodes before the first transformer layer (the
embedding side) in the first pipeline stage and those after the last layer (the final norm, the
output layer and the loss) in the last; Megatron-LM's ``--pipeline-model-parallel-layout`` puts the
final norm with the loss (``L``). A plan may cut between them: the DP's interleaved DeepSeek-V3 plan
keeps the final norm in its next-to-last chunk with the last layer and the output layer alone in
the last. When the stray end nodes sit in the stage next to their place (the second stage or the
next-to-last) and moving them leaves no stage empty, :func:`move_ends` moves them there, with the
same TMPCs, and the plan is re-scored by the evaluator: the export then carries a note with both
scores. Otherwise the refusal stands.
"""

from __future__ import annotations

from dataclasses import replace

from piper.core.errors import PlanError
from piper.core.evaluate import evaluate
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.export.common import map_layers

__all__ = ["move_ends"]


def move_ends(problem: Problem, plan: Plan) -> tuple[Plan, str] | None:
    """``plan`` with its stray end nodes moved into the first / last stage and a note saying what
    moved and the evaluator's scores before and after; None when nothing can be moved that way."""
    lm = map_layers(problem)
    stages = [set(s.nodes) for s in plan.stages]
    last = len(stages) - 1
    if last < 1:
        return None
    moved: list[tuple[int, int, int]] = []  # (node, from stage, to stage), 0-based stages
    for i, nodes in enumerate(stages):
        for v in sorted(nodes):
            if v in lm.pre and i != 0:
                moved.append((v, i, 0))
            elif v in lm.post and i != last:
                moved.append((v, i, last))
    if not moved or any(abs(src - dst) != 1 for _, src, dst in moved):
        return None
    new_stages = []
    for i, s in enumerate(plan.stages):
        keep = tuple(v for v in s.nodes if not any(v == node and i == src for node, src, _ in moved))
        extra = tuple(node for node, src, dst in moved if dst == i)
        if not keep and not extra:
            return None
        tmpcs = {v: s.tmpcs[v] for v in keep}
        for node, src, dst in moved:
            if dst == i:
                tmpcs[node] = plan.stages[src].tmpcs[node]
        new_stages.append(replace(s, nodes=tuple(sorted(keep + extra)), tmpcs=tmpcs))
    candidate = Plan(tuple(new_stages), plan.schedule)
    try:
        before, after = evaluate(problem, plan), evaluate(problem, candidate)
    except PlanError:
        return None
    if after.oom:
        return None
    names = ", ".join(f"node {node} ({problem.node_by_id[node].name or problem.node_by_id[node].kind}) from stage "
                      f"{src + 1} to {dst + 1}" for node, src, dst in moved)
    note = (f"rule E2: moved {names}, where the target places it (the evaluator: batch time {after.batch_time:.6g} "
            f"against the plan's {before.batch_time:.6g}, {100 * (after.batch_time / before.batch_time - 1):+.3f}%; "
            f"time per sample {after.tps:.6g} against {before.tps:.6g})")
    return candidate, note
