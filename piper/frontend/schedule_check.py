"""Does a plan's schedule, played out pass by pass, do what the evaluator's formulas say?

The evaluator prices the interleaved schedule with closed formulas (docs/problem.md §9.2: the
bubble (sum tau_g - max tau_g) / v and the memory y_g x activations) that are exact when a device
group's chunks are equal. The solvers may return interleaved plans with very unequal chunks (a
group's first chunk holding most of its layers, its last only the head), which the formulas
price as well as equal ones. Played out in Megatron-LM's pass order such a plan is slower and
holds more activations: ``plan llama3-8b --gpu h100 --nodes 4 --seq 8192 --global-batch 256``
found an interleaved plan at 8.20 s and 77.3 GB whose pass order takes 10.50 s and holds 102.9 GB
(over the 79.1 GB limit). This check replays the order (:mod:`piper.render.timeline`'s simulation,
:func:`piper.core.pass_order.schedule_order_memory`) so that ``plan`` can refuse such a plan
(docs/frontend.md, "The schedule check").

A plan passes when its pass order holds no more than the memory limit and, for an interleaved
plan whose simulation is small enough to run (:data:`piper.render.timeline.MAX_PASSES`), takes at
most :data:`TIME_TOLERANCE` longer than the formula's batch time. 1F1B plans are not timed: their
formula is Piper's (docs/problem.md §2.4), the project's model of record, and with unequal d per
stage the simulation's routing of micro-batches to replicas (k mod d) adds waits of its own; their
pass order holds exactly the formula's y micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piper.core.evaluate import Score
from piper.core.pass_order import schedule_order_memory
from piper.core.plan import Plan
from piper.core.problem import Problem

__all__ = ["TIME_TOLERANCE", "ScheduleCheck", "check_schedule"]

#: the simulated iteration may exceed the formula's batch time by this fraction (equal chunks: not
#: at all, tests/render/test_timeline.py)
TIME_TOLERANCE = 0.05


@dataclass(frozen=True)
class ScheduleCheck:
    """The formula's figures against the played-out schedule's (time in the workload's unit,
    seconds for the model front end; memory in bytes per device)."""

    formula_batch_time: float
    #: None: a 1F1B plan, a pass order over the memory limit (not timed), or too many passes to play out
    simulated_batch_time: float | None
    formula_memory_bytes: float
    order_memory_bytes: float
    memory_limit_bytes: float

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the plan fails the check (empty when it passes)."""
        out = []
        if self.order_memory_bytes > self.memory_limit_bytes:
            out.append(f"its pass order holds {self.order_memory_bytes / 1e9:.2f} GB per device, over the "
                       f"{self.memory_limit_bytes / 1e9:.2f} GB limit (the formula: "
                       f"{self.formula_memory_bytes / 1e9:.2f} GB)")
        sim = self.simulated_batch_time
        if sim is not None and sim > self.formula_batch_time * (1 + TIME_TOLERANCE):
            out.append(f"played out it takes {sim:.4g} s per iteration, {100 * (sim / self.formula_batch_time - 1):.0f}% "
                       f"more than the formula's {self.formula_batch_time:.4g} s")
        return tuple(out)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "formula_batch_time_s": self.formula_batch_time,
                "simulated_batch_time_s": self.simulated_batch_time,
                "formula_memory_bytes": self.formula_memory_bytes, "order_memory_bytes": self.order_memory_bytes,
                "memory_limit_bytes": self.memory_limit_bytes, "reasons": list(self.reasons)}


def check_schedule(problem: Problem, plan: Plan, score: Score) -> ScheduleCheck:
    """Replay ``plan``'s schedule (module docstring). ``score`` is the evaluator's score of it."""
    from piper.render.timeline import simulate_schedule

    order_memory = max(schedule_order_memory(problem, plan, score))
    # the simulation plays every replica's passes: skipped when the memory has already failed
    timed = plan.schedule.interleaved and not score.oom and order_memory <= problem.memory_cap
    timeline = simulate_schedule(problem, plan, score) if timed else None
    return ScheduleCheck(
        formula_batch_time=score.batch_time,
        simulated_batch_time=None if timeline is None else timeline.makespan,
        formula_memory_bytes=max(st.memory for st in score.stages),
        order_memory_bytes=order_memory,
        memory_limit_bytes=problem.memory_per_device,
    )
