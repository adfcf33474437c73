"""A plan: an ordered list of pipeline stages, each with d, t and one TMPC per layer.

JSON in and out in the reference output shape::

    {"stages": [{"nodes": [3, 4], "dataParallelDegree": 2,
                 "tensorParallelDegree": 4,
                 "TMPCids": {"3": "vanilla", "4": "activation recomp"}}]}

``TMPCids`` is also read as a list of ``[node, tmpc]`` pairs (how the
authors' code writes it). Other top-level keys are ignored here; plans saved by the
project carry one, ``madeFor`` (the workload hash and cluster the plan was made for),
which :mod:`piper.provenance` writes and checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .jsonfile import read_json

if TYPE_CHECKING:  # pragma: no cover
    from .evaluate import Score
    from .problem import Problem

__all__ = ["Stage", "Plan", "PlanFormatError", "load_plan", "plan_from_dict", "render_plan"]


class PlanFormatError(ValueError):
    """A plan file or object that is not in the plan JSON shape."""


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its layers, data-parallel degree d, tensor-parallel degree t,
    and the TMPC id used by each of its layers (keyed by node id)."""

    nodes: tuple[int, ...]
    d: int
    t: int
    tmpcs: Mapping[int, str]

    @property
    def devices(self) -> int:
        return self.d * self.t

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "dataParallelDegree": self.d,
            "tensorParallelDegree": self.t,
            "TMPCids": {str(v): name for v, name in self.tmpcs.items()},
        }


@dataclass(frozen=True)
class Plan:
    """Stages S_1..S_L in pipeline order (S_1 holds the first layers)."""

    stages: tuple[Stage, ...]

    @property
    def devices_used(self) -> int:
        """sum over stages of d*t."""
        return sum(s.d * s.t for s in self.stages)

    @property
    def sum_d(self) -> int:
        return sum(s.d for s in self.stages)

    def stage_of(self) -> dict[int, int]:
        """node id -> stage index (0-based). Later stages win if a node repeats."""
        return {v: i for i, s in enumerate(self.stages) for v in s.nodes}

    def to_dict(self) -> dict[str, Any]:
        return {"stages": [s.to_dict() for s in self.stages]}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=1) + "\n")


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise PlanFormatError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise PlanFormatError(f"{where}: expected an integer, got {value!r}")


def _tmpc_ids(raw: Any, where: str) -> dict[int, str]:
    pairs: Sequence[Any]
    if isinstance(raw, Mapping):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = raw
    else:
        raise PlanFormatError(f"{where}: 'TMPCids' must be an object or a list of [node, tmpc] pairs")
    out: dict[int, str] = {}
    for item in pairs:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise PlanFormatError(f"{where}: 'TMPCids' entry {item!r} is not a [node, tmpc] pair")
        node = _int(item[0], f"{where} TMPCids key")
        if not isinstance(item[1], str):
            raise PlanFormatError(f"{where}: TMPC id of node {node} must be a string, got {item[1]!r}")
        if node in out:
            raise PlanFormatError(f"{where}: node {node} is named twice in 'TMPCids'")
        out[node] = item[1]
    return out


def plan_from_dict(raw: Any) -> Plan:
    """Read a plan from the reference output shape (also accepts a bare stage list).

    Top-level keys other than ``stages`` (e.g. ``madeFor``, see :mod:`piper.provenance`) are
    not part of the :class:`Plan`; they are accepted and ignored here."""
    if isinstance(raw, Mapping) and "plan" in raw and "stages" not in raw:
        raw = raw["plan"]
    if isinstance(raw, Mapping):
        if "stages" not in raw:
            raise PlanFormatError("a plan must have a 'stages' list")
        stages_raw = raw["stages"]
    else:
        stages_raw = raw
    if not isinstance(stages_raw, list):
        raise PlanFormatError("'stages' must be a list")
    stages = []
    for i, s in enumerate(stages_raw):
        where = f"stage {i + 1}"
        if not isinstance(s, Mapping):
            raise PlanFormatError(f"{where}: must be an object")
        for key in ("nodes", "dataParallelDegree", "tensorParallelDegree", "TMPCids"):
            if key not in s:
                raise PlanFormatError(f"{where}: missing key {key!r}")
        if not isinstance(s["nodes"], list):
            raise PlanFormatError(f"{where}: 'nodes' must be a list")
        nodes = tuple(_int(v, f"{where} nodes") for v in s["nodes"])
        stages.append(
            Stage(
                nodes=nodes,
                d=_int(s["dataParallelDegree"], f"{where} dataParallelDegree"),
                t=_int(s["tensorParallelDegree"], f"{where} tensorParallelDegree"),
                tmpcs=_tmpc_ids(s["TMPCids"], where),
            )
        )
    return Plan(tuple(stages))


def load_plan(source: str | Path | Mapping[str, Any]) -> Plan:
    if isinstance(source, Mapping):
        return plan_from_dict(source)
    return plan_from_dict(read_json(source, PlanFormatError, "plan"))


# ---------------------------------------------------------------------------------
# human-readable table
# ---------------------------------------------------------------------------------


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


def render_plan(problem: "Problem", plan: Plan, score: "Score | None" = None) -> str:
    """A readable table: stage, layers (as id ranges), d, t, TMPCs used, stage TPS,
    memory used / limit. ``score`` (from :func:`piper.evaluate.evaluate`) adds the numbers,
    the column "node" ("in": d * t <= G, the stage sits inside one node and resyncs at the
    intra-node bandwidth; "spans": it does not) and the batch time in the footer."""
    rows = [["stage", "layers", "d", "t", "TMPCs", "TPS", "compute", "edge", "resync", "y", "node", "memory / limit"]]
    for i, s in enumerate(plan.stages):
        counts: dict[str, int] = {}
        for v in s.nodes:
            name = s.tmpcs.get(v, "?")
            counts[name] = counts.get(name, 0) + 1
        tm = ", ".join(f"{n}x {name}" for name, n in counts.items())
        row = [str(i + 1), _ranges(sorted(s.nodes)), str(s.d), str(s.t), tm]
        if score is not None and i < len(score.stages):
            st = score.stages[i]
            mem = f"{_fmt_bytes(st.memory)} / {_fmt_bytes(problem.memory_per_device)}" + ("  OOM" if st.oom else "")
            node = "in" if st.fits_in_node else "spans"
            row += [f"{st.tps:.6g}", f"{st.compute:.4g}", f"{st.edge:.4g}", f"{st.resync:.4g}", str(st.y), node, mem]
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
            f"TPS {tps}; batch time {batch}; bottleneck stage "
            f"{score.bottleneck + 1 if score.bottleneck is not None else '-'}; "
            f"devices used {plan.devices_used} of {problem.devices}; sum of d {plan.sum_d} (N = {problem.microbatches})"
            + ("; the plan fits in one node" if score.fits_in_node and problem.node_size < problem.devices else "")
        )
    return "\n".join(lines)
