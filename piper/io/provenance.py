"""Plan provenance: what a saved plan records about the workload and cluster it was made for.

A plan written by the project (``python -m piper solve --out``, ``python -m piper plan
--plan-out``) carries, next to its ``stages``, one more top-level key (docs/problem.md §3.1)::

    "madeFor": {"record": 1,
                "workloadSha256": "ab12...",
                "cluster": {"maxDevices": 64, "maxMemoryPerDevice": 8589934592.0,
                            "mbsInBatch": 1920, "bandwidth": 26843545600.0,
                            "devicesPerNode": 8, "intraNodeBandwidth": 3e11,
                            "allReduceFactor": 4.0}}

* ``workloadSha256`` (:func:`workload_hash`) is the SHA-256 of the workload's layer graph in a
  canonical form: the data every solver and the evaluator read apart from the cluster. It
  does not depend on the order of JSON keys, on whitespace, on the order of the ``nodes``
  and ``edges`` lists, or on how a number is spelt (``4``, ``4.0``, ``4e0``); it changes
  with any cost, size, memory coefficient, sync byte count, edge, degree t, TMPC id, TMPC
  list order at a degree (it breaks ties in the greedy knapsack), node name, ``kind`` or
  ``layerIndex``, or in the model front end's top-level ``model`` record (the model and
  training shape that ``export`` reads). Keys the loader does not know (kept for round
  trips) and the top-level ``name`` are not part of it, nor are the cluster numbers
  (recorded apart, below).
* ``cluster`` holds the *effective* cluster numbers, under the workload file's own keys
  (bytes, bytes/second): k, M, N, B and the version-2 G, B_in, f with their defaults
  filled in (G = k, B_in = B, f = 4 when the workload does not give them), so a workload
  that spells a default out and one that omits it are the same cluster. These are exactly
  the numbers the cluster flags of every command (``-k -M -N -B -G --intra-node-bandwidth
  --allreduce-factor``) can change. When G = k (one node) in the record and in the cluster
  given, a difference in k is reported once, as k; likewise B_in = B and B.

:func:`check_plan_record` compares a plan's record with the workload and cluster a
command was given and returns one warning per difference; ``strict=True`` raises
:class:`PlanRecordMismatch` with the same text. A plan without ``madeFor`` (the authors'
output shape, a hand-written plan) gives no warning: it is accepted exactly as before.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piper.core.errors import PlanFormatError, PlanRecordMismatch
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.io.jsonfile import read_json

__all__ = [
    "RECORD_KEY",
    "RECORD_VERSION",
    "RECORD_KEYS",
    "RESULT_KEYS",
    "record_shape_error",
    "unknown_document_keys",
    "PlanRecordMismatch",
    "workload_hash",
    "cluster_record",
    "plan_record",
    "plan_document",
    "check_plan_record",
]

#: the top-level key of the plan JSON that holds the record
RECORD_KEY = "madeFor"
#: version of the record's layout (the ``record`` field)
RECORD_VERSION = 1
#: the keys of the record (``contextParallel``: only for a workload built for c > 1)
RECORD_KEYS = ("record", "workloadSha256", "cluster", "contextParallel")
#: the keys around the plan in a solver result's JSON (``Result.to_dict``, ``solve --json``), which
#: :func:`piper.io.plans.load_plan` also reads (``{"plan": {...}, ...}``), and the record
RESULT_KEYS = ("solver", "status", "tps", "batch_time", "objective_kind", "objective", "bound", "tolerance",
               "time_s", "devices_used", "plan", "message", "stats", RECORD_KEY)


# (workload key, symbol, unit words for the message, command-line flag)
_CLUSTER_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("maxDevices", "k", "devices", "--devices"),
    ("maxMemoryPerDevice", "M", "bytes of memory per device", "--memory"),
    ("mbsInBatch", "N", "microbatches", "--microbatches"),
    ("bandwidth", "B", "bytes/s bandwidth", "--bandwidth"),
    ("devicesPerNode", "G", "devices per node", "--devices-per-node"),
    ("intraNodeBandwidth", "B_in", "bytes/s intra-node bandwidth", "--intra-node-bandwidth"),
    ("allReduceFactor", "f", "all-reduce factor", "--allreduce-factor"),
)


#: a field whose default is another one's value (G = k: one node; B_in = B): when it equals
#: that field on both sides, only the other field's difference is reported
_FOLLOWS = {"devicesPerNode": "maxDevices", "intraNodeBandwidth": "bandwidth"}


def _canonical_graph(problem: Problem) -> dict[str, Any]:
    """The layer graph as plain JSON data with one spelling: nodes sorted by id, edges by
    (source, dest), degrees ascending, sync maps by node id, every cost a float."""

    def tmpc(c: Any) -> list[Any]:
        return [
            c.id,
            float(c.time_per_sample),
            float(c.parameter_size),
            float(c.memory_a),
            float(c.memory_b),
            float(c.memory_sharded),
            [[u, float(x)] for u, x in sorted(c.sync_fw.items())],
            [[x, float(b)] for x, b in sorted(c.sync_bw.items())],
        ] + (
            # expert parallelism (docs/problem.md §11): only when given, so that the hash of a
            # workload without the keys is what it was before them
            [[int(c.expert_parallel), int(c.expert_tensor_parallel), float(c.expert_parameter_size),
              float(c.memory_sharded_expert)]] if c.has_expert_terms else []
        )

    nodes = [
        {
            "id": nd.id,
            "name": nd.name,
            "kind": nd.kind,
            "layerIndex": nd.layer_index,
            # the list order at one degree is kept: it breaks ties in the greedy knapsack
            "TMPCs": [[t, [tmpc(c) for c in nd.tmpcs[t]]] for t in sorted(nd.tmpcs)],
        }
        for nd in sorted(problem.nodes, key=lambda n: n.id)
    ]
    edges = [[e.u, e.v, float(e.communication_cost)] for e in sorted(problem.edges, key=lambda e: (e.u, e.v))]
    out: dict[str, Any] = {"nodes": nodes, "edges": edges}
    if "model" in problem.extra:  # the model front end's record of the model and training shape
        out["model"] = problem.extra["model"]
    return out


def workload_hash(problem: Problem) -> str:
    """SHA-256 (64 hex digits) of the workload's layer graph in canonical form (module
    docstring): independent of key order, list order of nodes and edges, number spelling
    and the cluster; any change of a cost, an edge, a degree or a TMPC changes it."""
    text = json.dumps(_canonical_graph(problem), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cluster_record(problem: Problem) -> dict[str, int | float]:
    """The effective cluster numbers under the workload's keys (bytes, bytes/second)."""
    return {
        "maxDevices": problem.devices,
        "maxMemoryPerDevice": float(problem.memory_per_device),
        "mbsInBatch": problem.microbatches,
        "bandwidth": float(problem.bandwidth),
        "devicesPerNode": problem.node_size,
        "intraNodeBandwidth": float(problem.bandwidth_intra),
        "allReduceFactor": float(problem.resync_factor),
    }


def plan_record(problem: Problem) -> dict[str, Any]:
    """The ``madeFor`` record of a plan made for ``problem`` (workload hash and cluster)."""
    out = {"record": RECORD_VERSION, "workloadSha256": workload_hash(problem), "cluster": cluster_record(problem)}
    model = problem.extra.get("model")
    c = model.get("contextParallel", 1) if isinstance(model, Mapping) else 1
    if isinstance(c, int) and not isinstance(c, bool) and c > 1:
        # the context-parallel size the workload was built for (docs/problem.md §11), for the reader:
        # the hash binds it already
        out["contextParallel"] = c
    return out


def plan_document(plan: Plan, problem: Problem) -> dict[str, Any]:
    """The plan JSON the project writes: :meth:`Plan.to_dict` plus the ``madeFor`` record."""
    return {**plan.to_dict(), RECORD_KEY: plan_record(problem)}


def _fmt_pair(a: float, b: float) -> tuple[str, str]:
    """Two different numbers, written with the fewest significant digits (>= 6) that tell
    them apart; whole numbers below 1e6 as integers."""
    for digits in range(6, 18):
        sa, sb = (str(int(x)) if x.is_integer() and abs(x) < 1e6 else f"{x:.{digits}g}" for x in (a, b))
        if sa != sb:
            return sa, sb
    return repr(a), repr(b)


_ABSENT = object()


def _find_record(doc: Any) -> Any:
    """The ``madeFor`` value of a plan document (also inside ``{"plan": {...}}``; a null one is
    None), or ``_ABSENT``."""
    if not isinstance(doc, Mapping):
        return _ABSENT
    if RECORD_KEY in doc:
        return doc[RECORD_KEY]
    inner = doc.get("plan")
    if isinstance(inner, Mapping) and RECORD_KEY in inner:
        return inner[RECORD_KEY]
    return _ABSENT


def record_shape_error(record: Any) -> str | None:
    """What makes a ``madeFor`` value unreadable, in one line naming the key: null or not an
    object, a ``record`` version other than :data:`RECORD_VERSION` (or none); None when it is
    readable (its fields are compared by :func:`record_differences`)."""
    if record is None:
        return (f"{RECORD_KEY} is null: a plan's record is an object such as {{\"record\": {RECORD_VERSION}, "
                "\"workloadSha256\": ..., \"cluster\": {...}} (leave the key out for a plan without one)")
    if not isinstance(record, Mapping):
        return f"{RECORD_KEY} must be an object, got {type(record).__name__}"
    if "record" not in record:
        return f"{RECORD_KEY}.record is missing (the version of the record's layout, {RECORD_VERSION})"
    version = record["record"]
    if type(version) is not int or version != RECORD_VERSION:
        shown = json.dumps(version) if isinstance(version, (str, int, float, bool)) or version is None \
            else type(version).__name__
        return f"{RECORD_KEY}.record is {shown[:40]}: this version of piper reads record {RECORD_VERSION}"
    return None


def unknown_document_keys(doc: Any) -> list[str]:
    """One message per key of a plan document that no reader knows: around the plan in a
    result's JSON (:data:`RESULT_KEYS`), in ``madeFor`` (:data:`RECORD_KEYS`) and in
    ``madeFor.cluster``. (Unknown keys of the plan object and its stages are errors of
    :func:`~piper.core.plan.plan_from_dict`.)"""
    out: list[str] = []
    if not isinstance(doc, Mapping):
        return out
    if "plan" in doc and "stages" not in doc:
        out += [f"unknown key {str(k)!r} next to the plan (known in a result: {', '.join(RESULT_KEYS)})"
                for k in doc if k not in RESULT_KEYS]
    record = _find_record(doc)
    if isinstance(record, Mapping):
        out += [f"unknown key {str(k)!r} in {RECORD_KEY} (known: {', '.join(RECORD_KEYS)})"
                for k in record if k not in RECORD_KEYS]
        cluster = record.get("cluster")
        if isinstance(cluster, Mapping):
            known = [key for key, *_ in _CLUSTER_FIELDS]
            out += [f"unknown key {str(k)!r} in {RECORD_KEY}.cluster (known: {', '.join(known)})"
                    for k in cluster if k not in known]
    return out


def record_differences(record: Any, problem: Problem) -> list[str]:
    """One message per difference between a ``madeFor`` record and ``problem`` (without the
    "warning:" prefix); a record that cannot be read is one message saying which field."""
    if not isinstance(record, Mapping):
        what = "null" if record is None else f"not an object ({type(record).__name__})"
        return [f"the plan's {RECORD_KEY!r} is {what}: it cannot be checked"]
    unreadable = record_shape_error(record)
    if unreadable is not None:
        return [f"the plan's {unreadable}: it cannot be checked"]
    out: list[str] = []
    recorded_hash = record.get("workloadSha256")
    if recorded_hash is None:
        out.append(f"the plan's {RECORD_KEY}.workloadSha256 is missing: the workload cannot be checked")
    else:
        here = workload_hash(problem)
        if str(recorded_hash).lower() != here:
            out.append(f"plan was made for workload sha256 {str(recorded_hash)[:12]}..., this workload is {here[:12]}... "
                       "(a different layer graph, costs or model record)")
    cluster = record.get("cluster")
    if not isinstance(cluster, Mapping):
        out.append(f"the plan's {RECORD_KEY}.cluster is missing or not an object: the cluster cannot be checked")
        return out
    given = cluster_record(problem)
    made_numbers: dict[str, float] = {}
    for key, symbol, words, flag in _CLUSTER_FIELDS:
        if key not in cluster:
            out.append(f"the plan's {RECORD_KEY}.cluster.{key} is missing: {symbol} cannot be checked")
            continue
        made = cluster[key]
        if isinstance(made, bool) or not isinstance(made, (int, float)) or not math.isfinite(made):
            out.append(f"the plan's {RECORD_KEY}.cluster.{key} is {made!r}, not a number: {symbol} cannot be checked")
            continue
        made_numbers[key] = float(made)
        # G = k (one node) and B_in = B on both sides: the difference in k (B), named already, is all there is
        follows = _FOLLOWS.get(key)
        if (follows is not None and made_numbers.get(follows) == float(made)
                and float(given[follows]) == float(given[key])):
            continue
        if float(made) != float(given[key]):
            was, now = _fmt_pair(float(made), float(given[key]))
            out.append(f"plan was made for {symbol}={was} {words}, the cluster given has "
                       f"{symbol}={now} ({key}, flag {flag})")
    return out


def check_plan_record(plan_doc_or_path: str | Path | Mapping[str, Any] | list[Any], problem: Problem, *,
                      strict: bool, name: str | None = None) -> list[str]:
    """Warnings, one per unknown key of the document (:func:`unknown_document_keys`), then one
    per difference between the plan's ``madeFor`` record and ``problem`` (its layer graph and
    its effective cluster, after any cluster flags). A plan without a record and without
    unknown keys gives ``[]``. With ``strict=True`` an unknown key raises
    :class:`~piper.core.errors.PlanFormatError` naming it, and any difference
    :class:`PlanRecordMismatch` whose one-line message lists them all.

    ``plan_doc_or_path``: the plan JSON (a mapping, or a bare stage list) or its file path
    (an unreadable file raises :class:`~piper.core.plan.PlanFormatError`); ``name``: the file a
    parsed document was read from, for the messages.
    """
    if isinstance(plan_doc_or_path, (str, Path)):
        doc = read_json(plan_doc_or_path, PlanFormatError, "plan")
        where = f"plan {str(plan_doc_or_path)!r}"
    else:
        doc = plan_doc_or_path
        where = "the plan" if name is None else f"plan {name!r}"
    unknown = unknown_document_keys(doc)
    if unknown and strict:
        raise PlanFormatError(f"{where}: {unknown[0]} (strict mode: unknown keys are errors)")
    record = _find_record(doc)
    if record is _ABSENT:
        return unknown
    diffs = record_differences(record, problem)
    if diffs and strict:
        raise PlanRecordMismatch(f"{where} does not match the workload and cluster given (--strict): " + "; ".join(diffs))
    return unknown + diffs
