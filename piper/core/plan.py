"""A plan: an ordered list of pipeline stages, each with d, t and one TMPC per layer.

JSON in and out in the reference output shape::

    {"stages": [{"nodes": [3, 4], "dataParallelDegree": 2,
                 "tensorParallelDegree": 4,
                 "TMPCids": {"3": "vanilla", "4": "activation recomp"}}]}

``TMPCids`` is also read as a list of ``[node, tmpc]`` pairs (how the
authors' code writes it). Other top-level keys are ignored here; plans saved by the
project carry one, ``madeFor`` (the workload hash and cluster the plan was made for),
which :mod:`piper.io.provenance` writes and checks. Files are read by :func:`piper.io.plans.load_plan`
and plans shown as a table by :func:`piper.render.table.render_plan`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piper.core.errors import PlanFormatError

__all__ = ["Stage", "Plan", "plan_from_dict"]


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

    Top-level keys other than ``stages`` (e.g. ``madeFor``, see :mod:`piper.io.provenance`) are
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
