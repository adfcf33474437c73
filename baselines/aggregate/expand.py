"""From a solution of the aggregated model (counts per slot) to a concrete :class:`Plan`:
node ids in chain order, one TMPC id per node, as the evaluator needs."""

from __future__ import annotations

from baselines.aggregate.chain import Chain
from baselines.aggregate.data import Choice, Space
from baselines.aggregate.model import SlotValue
from piper.core.plan import Plan, Stage

__all__ = ["expand_plan"]


def expand_plan(chain: Chain, space: Space, inner: list[Choice], values: list[SlotValue]) -> Plan:
    """Stages in pipeline order (``values`` first stage first): each takes its head end nodes,
    then its count of inner layers (the next ones in chain order: its ``first`` choice first,
    its ``last`` choice last, the others in choice order), then its tail end nodes."""
    stages = []
    taken = 0
    ids = chain.inner
    for sv in values:
        t, d = space.options[sv.option]
        nodes: list[int] = []
        tmpcs: dict[int, str] = {}
        for e in sorted(e for e in sv.ends if e < chain.head):
            nodes.append(chain.order[e])
            tmpcs[chain.order[e]] = sv.ends[e].tmpc.id
        left = dict(sv.counts)
        total = sum(left.values())
        front, back = [], []
        if total and sv.first is not None:
            front.append(sv.first)
            left[sv.first] -= 1
        if total >= 2 and sv.last is not None:
            back.append(sv.last)
            left[sv.last] -= 1
        if any(c < 0 for c in left.values()):
            raise ValueError(f"slot counts {sv.counts} do not hold its first/last choices {sv.first}, {sv.last}")
        seq = front + [ci for ci in sorted(left) for _ in range(left[ci])] + back
        for ci in seq:
            v = ids[taken]
            taken += 1
            nodes.append(v)
            tmpcs[v] = inner[ci].tmpc.id
        for e in sorted(e for e in sv.ends if e >= chain.head):
            nodes.append(chain.order[e])
            tmpcs[chain.order[e]] = sv.ends[e].tmpc.id
        stages.append(Stage(tuple(nodes), d, t, tmpcs))
    if taken != chain.n_inner:
        raise ValueError(f"the solution places {taken} inner layers, the chain has {chain.n_inner}")
    return Plan(tuple(stages))
