"""The authors' golden results (tests/data/reference_sample.jsonl) as (problem, plan, row) triples."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from piper import Plan, Problem, Stage, insert_bert_layers, load_problem

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "experiments" / "workloads"
SAMPLE = Path(__file__).resolve().parent / "data" / "reference_sample.jsonl"


def rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


@lru_cache(maxsize=None)
def _workload(name: str, layers: int | None) -> Problem:
    p = load_problem(WORKLOADS / name)
    if layers is not None and name.startswith("bert"):
        p = insert_bert_layers(p, layers)
    return p


def problem_of(row: dict) -> Problem:
    p = _workload(row["instance_file"], row.get("transformer_layers"))
    return p.with_cluster(devices=row["k"], memory=row["max_memory_per_device_bytes"],
                          microbatches=row["N"], bandwidth=row["bandwidth_bytes_per_s"])


def plan_of(row: dict) -> Plan | None:
    if not row.get("stages"):
        return None
    return Plan(tuple(Stage(tuple(s["nodes"]), s["d"], s["t"], dict(zip(s["nodes"], s["tmpc"]))) for s in row["stages"]))
