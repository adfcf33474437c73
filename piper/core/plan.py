"""A plan: an ordered list of pipeline stages, each with d, t and one TMPC per layer.

JSON in and out in the reference output shape::

    {"stages": [{"nodes": [3, 4], "dataParallelDegree": 2,
                 "tensorParallelDegree": 4,
                 "TMPCids": {"3": "vanilla", "4": "activation recomp"}}]}

``TMPCids`` is also read as a list of ``[node, tmpc]`` pairs (how the
authors' code writes it). The optional key ``schedule`` (docs/problem.md §9, version 3) is
``{"kind": "1f1b"}`` (the default when absent) or ``{"kind": "interleaved", "virtualStages": v}``
with v >= 2: then ``stages`` lists L * v *chunks* in pipeline order and chunk j runs on device
group j mod L (Megatron-LM's interleaved 1F1B schedule). Any other key is an error naming it, except
``madeFor``: plans saved by the project carry it (the workload hash and cluster the plan was made for),
which :mod:`piper.io.provenance` writes and checks. Files are read by :func:`piper.io.plans.load_plan`
and plans shown as a table by :func:`piper.render.table.render_plan`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piper.core.errors import PlanFormatError
from piper.core.limits import MAX_COUNT, MAX_NODE_ID

__all__ = ["Stage", "Plan", "Schedule", "plan_from_dict", "SCHEDULE_KINDS", "ONE_F_ONE_B", "INTERLEAVED"]

#: the pipeline schedules a plan may name (docs/problem.md §9)
ONE_F_ONE_B = "1f1b"
INTERLEAVED = "interleaved"
SCHEDULE_KINDS = (ONE_F_ONE_B, INTERLEAVED)
#: the keys of a plan object (``madeFor``: the record :mod:`piper.io.provenance` writes and checks)
PLAN_KEYS = ("stages", "schedule", "madeFor")
#: the keys of one stage
STAGE_KEYS = ("nodes", "dataParallelDegree", "tensorParallelDegree", "TMPCids")


@dataclass(frozen=True)
class Schedule:
    """The pipeline schedule: 1F1B (PipeDream-Flush; ``virtual_stages`` 1) or Megatron-LM's
    interleaved 1F1B with ``virtual_stages`` v >= 2 chunks per device group."""

    kind: str = ONE_F_ONE_B
    virtual_stages: int = 1

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise PlanFormatError(f"schedule kind {self.kind!r} is not one of {', '.join(SCHEDULE_KINDS)}")
        if self.kind == ONE_F_ONE_B and self.virtual_stages != 1:
            raise PlanFormatError(f"a 1f1b schedule has 1 virtual stage, not {self.virtual_stages}")
        if self.kind == INTERLEAVED and (isinstance(self.virtual_stages, bool) or not isinstance(self.virtual_stages, int)
                                         or self.virtual_stages < 2):
            raise PlanFormatError(f"an interleaved schedule needs virtualStages >= 2, got {self.virtual_stages!r}")

    @property
    def interleaved(self) -> bool:
        return self.kind == INTERLEAVED

    def to_dict(self) -> dict[str, Any]:
        if self.kind == ONE_F_ONE_B:
            return {"kind": ONE_F_ONE_B}
        return {"kind": self.kind, "virtualStages": self.virtual_stages}

    def label(self) -> str:
        """'1f1b' or 'interleaved v=V'."""
        return self.kind if self.kind == ONE_F_ONE_B else f"{self.kind} v={self.virtual_stages}"


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
    """Stages S_1..S_L in pipeline order (S_1 holds the first layers). With an interleaved
    ``schedule`` the entries of ``stages`` are the L * v chunks and chunk j runs on device
    group j mod L (:attr:`groups` = L)."""

    stages: tuple[Stage, ...]
    schedule: Schedule = Schedule()

    @property
    def groups(self) -> int:
        """L: the device groups (pipeline stages on devices); len(stages) for 1F1B."""
        return max(1, len(self.stages) // self.schedule.virtual_stages)

    def group_stages(self) -> tuple[Stage, ...]:
        """One chunk per device group (the first L entries): the groups' d and t."""
        return self.stages[: self.groups] if self.schedule.interleaved else self.stages

    @property
    def devices_used(self) -> int:
        """sum over device groups of d*t (over stages for 1F1B)."""
        return sum(s.d * s.t for s in self.group_stages())

    @property
    def sum_d(self) -> int:
        """sum over device groups of d."""
        return sum(s.d for s in self.group_stages())

    def stage_of(self) -> dict[int, int]:
        """node id -> stage index (0-based). Later stages win if a node repeats."""
        return {v: i for i, s in enumerate(self.stages) for v in s.nodes}

    def to_dict(self) -> dict[str, Any]:
        """The reference shape; ``schedule`` only for an interleaved plan (absent means 1F1B, so
        a 1F1B plan's file is what it was before version 3)."""
        out: dict[str, Any] = {"stages": [s.to_dict() for s in self.stages]}
        if self.schedule.interleaved:
            out["schedule"] = self.schedule.to_dict()
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=1) + "\n")


def _int(value: Any, where: str, limit: int = MAX_COUNT) -> int:
    """An integer of a plan field: an int, a float or a string holding one, of magnitude at most
    ``limit`` (:data:`~piper.core.limits.MAX_COUNT` for degrees, 2^53 for node ids)."""
    out: int | None = None
    if isinstance(value, bool):
        out = None
    elif isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]{1,20}\s*", value):
        out = int(value.strip())
    if out is None:
        text = repr(value)
        raise PlanFormatError(f"{where}: expected an integer, got {text if len(text) <= 60 else text[:57] + '...'}")
    if abs(out) > limit:
        raise PlanFormatError(f"{where}: {out if len(str(out)) <= 40 else str(out)[:37] + '...'} is out of range "
                              f"(at most {limit} in magnitude)")
    return out


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
        node = _int(item[0], f"{where} TMPCids key", MAX_NODE_ID)
        if not isinstance(item[1], str):
            raise PlanFormatError(f"{where}: TMPC id of node {node} must be a string, got {item[1]!r}")
        if node in out:
            raise PlanFormatError(f"{where}: node {node} is named twice in 'TMPCids'")
        out[node] = item[1]
    return out


def plan_from_dict(raw: Any) -> Plan:
    """Read a plan from the reference output shape (also accepts a bare stage list).

    ``schedule`` is read as :class:`Schedule` (absent: 1F1B). ``madeFor`` (see
    :mod:`piper.io.provenance`) is not part of the :class:`Plan`: accepted, and checked there.
    Any other key of the plan object or of a stage is an error naming it (:data:`PLAN_KEYS`,
    :data:`STAGE_KEYS`); in ``{"plan": {...}}`` (a result's JSON) the outer keys are not read."""
    if isinstance(raw, Mapping) and "plan" in raw and "stages" not in raw:
        raw = raw["plan"]
        if raw is None:
            raise PlanFormatError("'plan' is null: the result has no plan to read")
    if isinstance(raw, Mapping):
        if "stages" not in raw:
            raise PlanFormatError("a plan must have a 'stages' list")
        unknown = [str(k) for k in raw if k not in PLAN_KEYS]
        if unknown:
            raise PlanFormatError(f"unknown key {unknown[0]!r} in the plan (known: {', '.join(PLAN_KEYS)})")
        stages_raw = raw["stages"]
        schedule = _schedule(raw.get("schedule"))
    else:
        stages_raw = raw
        schedule = Schedule()
    if not isinstance(stages_raw, list):
        raise PlanFormatError("'stages' must be a list")
    stages = []
    for i, s in enumerate(stages_raw):
        where = f"stage {i + 1}"
        if not isinstance(s, Mapping):
            raise PlanFormatError(f"{where}: must be an object")
        for key in STAGE_KEYS:
            if key not in s:
                raise PlanFormatError(f"{where}: missing key {key!r}")
        unknown = [str(k) for k in s if k not in STAGE_KEYS]
        if unknown:
            raise PlanFormatError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(STAGE_KEYS)})")
        if not isinstance(s["nodes"], list):
            raise PlanFormatError(f"{where}: 'nodes' must be a list")
        nodes = tuple(_int(v, f"{where} nodes", MAX_NODE_ID) for v in s["nodes"])
        stages.append(
            Stage(
                nodes=nodes,
                d=_int(s["dataParallelDegree"], f"{where} dataParallelDegree"),
                t=_int(s["tensorParallelDegree"], f"{where} tensorParallelDegree"),
                tmpcs=_tmpc_ids(s["TMPCids"], where),
            )
        )
    return Plan(tuple(stages), schedule)


def _schedule(raw: Any) -> Schedule:
    """The ``schedule`` key: absent / null is 1F1B."""
    if raw is None:
        return Schedule()
    if not isinstance(raw, Mapping):
        raise PlanFormatError(f"'schedule' must be an object such as {{\"kind\": \"1f1b\"}}, got {raw!r}")
    unknown = sorted(set(raw) - {"kind", "virtualStages"})
    if unknown:
        raise PlanFormatError(f"'schedule': unknown key(s) {unknown} (known: kind, virtualStages)")
    kind = raw.get("kind")
    if kind not in SCHEDULE_KINDS:
        raise PlanFormatError(f"'schedule' kind must be one of {', '.join(SCHEDULE_KINDS)}, got {kind!r}")
    if kind == ONE_F_ONE_B:
        if raw.get("virtualStages", 1) not in (1,) or isinstance(raw.get("virtualStages", 1), bool):
            raise PlanFormatError(f"'schedule': a 1f1b schedule has virtualStages 1, got {raw.get('virtualStages')!r}")
        return Schedule()
    if "virtualStages" not in raw:
        raise PlanFormatError("'schedule': an interleaved schedule needs 'virtualStages' (an integer >= 2)")
    v = _int(raw["virtualStages"], "'schedule' virtualStages")
    if v < 2:
        raise PlanFormatError(f"'schedule': virtualStages must be >= 2 for an interleaved schedule, got {v}")
    return Schedule(INTERLEAVED, v)
