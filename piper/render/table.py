"""A plan as a readable table (``python -m piper solve`` / ``evaluate``): :func:`render_plan`."""

from __future__ import annotations

from collections.abc import Sequence

from piper.core.evaluate import Score
from piper.core.plan import Plan
from piper.core.problem import Problem

__all__ = ["render_plan"]


def _ranges(ids: Sequence[int]) -> str:
    """[1,2,3,7,9,10] -> '1-3,7,9-10' (in the given order, runs of consecutive ids)."""
    if not ids:
        return "-"
    out: list[str] = []
    start = prev = ids[0]
    for v in list(ids[1:]) + [None]:  # type: ignore[list-item]
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(out)


def _fmt_bytes(x: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= size:
            return f"{x / size:.2f} {unit}"
    return f"{x:.0f} B"


def render_plan(problem: Problem, plan: Plan, score: Score | None = None) -> str:
    """A readable table: stage, layers (as id ranges), d, t, TMPCs used, stage TPS,
    memory used / limit. ``score`` (from :func:`piper.core.evaluate.evaluate`) adds the numbers,
    the column "node" ("in": d * t <= G, the stage sits inside one node and resyncs at the
    intra-node bandwidth; "spans": it does not) and the batch time in the footer. An
    interleaved plan has one row per device group ("group"), its chunks' layers joined by " | "."""
    interleaved = plan.schedule.interleaved
    groups = plan.groups
    members = [tuple(range(g, len(plan.stages), groups)) for g in range(groups)] if interleaved else \
        [(i,) for i in range(len(plan.stages))]
    rows = [["group" if interleaved else "stage", "layers", "d", "t", "TMPCs", "TPS", "compute", "edge", "resync", "y",
             "node", "memory / limit"]]
    for i, chunk_ids in enumerate(members):
        first = plan.stages[chunk_ids[0]]
        counts: dict[str, int] = {}
        for j in chunk_ids:
            s = plan.stages[j]
            for v in s.nodes:
                name = s.tmpcs.get(v, "?")
                counts[name] = counts.get(name, 0) + 1
        tm = ", ".join(f"{n}x {name}" for name, n in counts.items())
        layers = " | ".join(_ranges(sorted(plan.stages[j].nodes)) for j in chunk_ids)
        row = [str(i + 1), layers, str(first.d), str(first.t), tm]
        if score is not None and i < len(score.stages):
            st = score.stages[i]
            mem = f"{_fmt_bytes(st.memory)} / {_fmt_bytes(problem.memory_per_device)}" + ("  OOM" if st.oom else "")
            node = "in" if st.fits_in_node else "spans"
            y = f"{st.y:.4g}" if isinstance(st.y, float) else str(st.y)
            row += [f"{st.tps:.6g}", f"{st.compute:.4g}", f"{st.edge:.4g}", f"{st.resync:.4g}", y, node, mem]
        else:
            row += ["", "", "", "", "", "", ""]
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if score is not None:
        tps = "OOM (infinite)" if score.oom else f"{score.tps:.10g}"
        batch = "OOM (infinite)" if score.oom else f"{score.batch_time:.10g}"
        lines.append(
            f"TPS {tps}; batch time {batch}; bottleneck {'group' if interleaved else 'stage'} "
            f"{score.bottleneck + 1 if score.bottleneck is not None else '-'}; "
            f"devices used {plan.devices_used} of {problem.devices}; sum of d {plan.sum_d} (N = {problem.microbatches})"
            + ("; the plan fits in one node" if score.fits_in_node and problem.node_size < problem.devices else "")
            + (f"; schedule {plan.schedule.label()}" if interleaved else "")
        )
    return "\n".join(lines)
