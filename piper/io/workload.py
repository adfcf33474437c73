"""Reading, validating and writing workload JSON (``docs/problem.md`` §1, §2; rules V0..V14).

:func:`load_problem` / :func:`problem_from_dict` build a :class:`~piper.core.problem.Problem` and
raise :class:`~piper.core.problem.ProblemError` naming the node, edge or key at fault;
:func:`problem_to_dict` / :func:`dump_problem` write the reference structure back. Keys the
loader does not know (:data:`KNOWN_KEYS`) are kept for round trips and listed in
:attr:`Problem.unknown_keys` (``strict=True``: an error). The data classes are in
:mod:`piper.core.problem`, with the cluster checks and :func:`problem_to_dict` (a Problem writes
itself, :meth:`Problem.to_dict`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from piper.core.errors import ProblemError
from piper.core.limits import MAX_COUNT, MAX_MAGNITUDE, MAX_NODE_ID
from piper.core.problem import (
    RESYNC_OVERLAP_WINDOWS,
    TMPC,
    WINDOW_MICROBATCH,
    Edge,
    Node,
    Problem,
    checked_number,
    problem_to_dict,
    topological_order_of,
    validate_cluster,
    validate_cluster_shape,
)
from piper.core.problem import (
    short_repr as _short,
)
from piper.io.jsonfile import lone_surrogate, read_json

__all__ = ["KNOWN_KEYS", "load_problem", "problem_from_dict", "dump_problem"]

_TOP_KEYS = (
    "maxDevices", "maxMemoryPerDevice", "bandwidth", "mbsInBatch", "maxBatchSize", "nodes", "edges",
    "devicesPerNode", "intraNodeBandwidth", "allReduceFactor", "resyncOverlapWindow",
    # written by the project's generators (experiments/lib/instances.py, suites.py) and read back as
    # ``problem.extra["name"]``: known, and kept in ``extra``
    "name",
    # written by the model front end (piper/frontend/workload.py ``model_record``): the model and
    # training shape (micro-batch, global batch, widths, ...), read by ``python -m piper export``
    # as ``problem.extra["model"]``; known, kept in ``extra``, not part of the problem solved
    "model",
)
#: known top-level keys that have no ``Problem`` field and are kept in ``Problem.extra``
_TOP_EXTRA_KEYS = ("name", "model")
_NODE_KEYS = ("id", "TMPCs", "name", "kind", "layerIndex")
_TMPC_KEYS = ("id", "timePerSample", "parameterSize", "memoryUsageA", "memoryUsageB", "syncTimeFw", "syncTimeBw")
_TMPC_OPTIONAL_KEYS = (
    "memoryUsageShardedB", "resyncOverlapTime", "stepTime", "stepTimeSharded",
    # expert parallelism (docs/problem.md §11, rule 6)
    "expertParallel", "expertTensorParallel", "expertParameterSize", "memoryUsageShardedExpertB",
)
_EDGE_KEYS = ("sourceId", "destId", "communicationCost")

#: the JSON keys the loader understands, per place; any other key is kept (``extra``) for
#: round trips and reported in :attr:`Problem.unknown_keys` (an error with ``strict=True``)
KNOWN_KEYS: Mapping[str, tuple[str, ...]] = {
    "top level": _TOP_KEYS,
    "node": _NODE_KEYS,
    "TMPC": _TMPC_KEYS + _TMPC_OPTIONAL_KEYS,
    "edge": _EDGE_KEYS,
}


class _Unknown:
    """The loader's unknown keys: one message per distinct (key, place kind), with the first
    place and how many more there are (a misspelt key on 300 layers is one warning)."""

    _PLURAL: ClassVar[dict[str, str]] = {"top level": "top levels", "node": "nodes", "TMPC": "TMPCs", "edge": "edges"}

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], list[Any]] = {}

    def check(self, raw: Mapping[str, Any], kind: str, where: str) -> None:
        known = KNOWN_KEYS[kind]
        for key in raw:
            if key not in known:
                entry = self.seen.setdefault((key, kind), [where, 0])
                entry[1] += 1

    def messages(self) -> list[str]:
        out = []
        for (key, kind), (where, count) in self.seen.items():
            more = f" and {count - 1} more {self._PLURAL[kind]}" if count > 1 else ""
            out.append(f"unknown key {key!r} at {where}{more} (known: {', '.join(KNOWN_KEYS[kind])})")
        return out


def _node_id(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ProblemError(f"{where}: node id must be an integer, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[-+]?[0-9]{1,20}", text):
            raise ProblemError(f"{where}: node id must be an integer, got {_short(value)}")
        value = int(text)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    elif not isinstance(value, int):
        raise ProblemError(f"{where}: node id must be an integer, got {_short(value)}")
    if abs(value) > MAX_NODE_ID:
        raise ProblemError(f"{where}: node id {_short(value)} is out of range (|id| <= 2^53)")
    return value


def _sync_map(raw: Any, where: str) -> dict[int, float]:
    if not isinstance(raw, Mapping):
        raise ProblemError(f"{where}: expected an object keyed by node id, got {type(raw).__name__}")
    out: dict[int, float] = {}
    for key, val in raw.items():
        nid = _plain_id(key)
        if nid is None:
            nid = _node_id(key, f"{where} key {key!r}")
        if nid in out:
            raise ProblemError(f"{where}: node {nid} appears twice")
        out[nid] = val if _plain_number(val) else checked_number(val, f"{where}[{key!r}]")
    return out


def _plain_number(value: Any) -> bool:
    """``value`` is a float that :func:`checked_number` (no options) returns unchanged: in
    [0, MAX_MAGNITUDE] (so finite). The loader's fast path for its common case: it then skips the
    full check and the message naming where the number is (built only for the others)."""
    return type(value) is float and 0.0 <= value <= MAX_MAGNITUDE


def _plain_id(key: Any) -> int | None:
    """A node id written as a short string of ASCII digits (the common case of a sync map's keys),
    as :func:`_node_id` reads it; None for every other key (then :func:`_node_id` checks it)."""
    if type(key) is str and 0 < len(key) <= 15 and key.isascii() and key.isdigit():
        return int(key)  # at most 15 digits: below MAX_NODE_ID (2^53)
    return None


def _field(raw: Mapping[str, Any], key: str, where: str, default: Any = None) -> float:
    """``raw[key]`` (``default`` when absent and a default is given) as :func:`checked_number`
    returns it, the message naming ``where`` and the key built only when the full check runs."""
    value = raw[key] if default is None else raw.get(key, default)
    return value if _plain_number(value) else checked_number(value, f"{where} {key}")


def _count_field(raw: Mapping[str, Any], key: str, where: str) -> int:
    """``raw.get(key, 1)`` as ``int(checked_number(..., integer=True))`` returns it; an int in
    1..MAX_COUNT skips the full check."""
    value = raw.get(key, 1)
    if type(value) is int and 1 <= value <= MAX_COUNT:
        return value
    return int(checked_number(value, f"{where} {key}", integer=True))


def _text(value: Any, where: str) -> str:
    """``value``, a string of Unicode text (no lone surrogate, which cannot be printed or drawn),
    else a :class:`ProblemError` naming ``where``."""
    if not isinstance(value, str):
        raise ProblemError(f"{where}: must be a string, got {_short(value)}")
    words = lone_surrogate(value)
    if words is not None:
        raise ProblemError(f"{where}: {words}")
    return value


def _tmpc_from_dict(raw: Any, where: str, unknown: _Unknown | None = None) -> TMPC:
    if not isinstance(raw, Mapping):
        raise ProblemError(f"{where}: a TMPC must be an object, got {type(raw).__name__}")
    for key in _TMPC_KEYS:
        if key not in raw:
            raise ProblemError(f"{where}: missing key {key!r}")
    tid = raw["id"]
    if not isinstance(tid, str) or not tid:
        raise ProblemError(f"{where}: 'id' must be a non-empty string, got {_short(tid)}")
    if not tid.isascii():
        _text(tid, f"{where} id")
    where = f"{where} (TMPC {tid!r})"
    if unknown is not None:
        unknown.check(raw, "TMPC", where)
    # an explicit null is an error, like any number (the default applies only to an absent key)
    return TMPC(
        id=tid,
        time_per_sample=_field(raw, "timePerSample", where),
        parameter_size=_field(raw, "parameterSize", where),
        memory_a=_field(raw, "memoryUsageA", where),
        memory_b=_field(raw, "memoryUsageB", where),
        sync_fw=_sync_map(raw["syncTimeFw"], f"{where} syncTimeFw"),
        sync_bw=_sync_map(raw["syncTimeBw"], f"{where} syncTimeBw"),
        extra={k: v for k, v in raw.items() if k not in KNOWN_KEYS["TMPC"]},
        memory_sharded=_field(raw, "memoryUsageShardedB", where, 0.0),
        resync_overlap_time=_field(raw, "resyncOverlapTime", where, 0.0),
        step_time=_field(raw, "stepTime", where, 0.0),
        step_time_sharded=_field(raw, "stepTimeSharded", where, 0.0),
        expert_parallel=_count_field(raw, "expertParallel", where),
        expert_tensor_parallel=_count_field(raw, "expertTensorParallel", where),
        expert_parameter_size=_field(raw, "expertParameterSize", where, 0.0),
        memory_sharded_expert=_field(raw, "memoryUsageShardedExpertB", where, 0.0),
    )


def _node_from_dict(raw: Any, pos: int, unknown: _Unknown | None = None) -> Node:
    if not isinstance(raw, Mapping):
        raise ProblemError(f"nodes[{pos}]: a node must be an object, got {type(raw).__name__}")
    if "id" not in raw:
        raise ProblemError(f"nodes[{pos}]: missing key 'id'")
    nid = _node_id(raw["id"], f"nodes[{pos}] id")
    where = f"node {nid}"
    if "TMPCs" not in raw:
        raise ProblemError(f"{where}: missing key 'TMPCs'")
    if unknown is not None:
        unknown.check(raw, "node", where)
    tm = raw["TMPCs"]
    if not isinstance(tm, Mapping):
        raise ProblemError(f"{where}: 'TMPCs' must be an object keyed by degree t")
    tmpcs: dict[int, tuple[TMPC, ...]] = {}
    for tkey, lst in tm.items():
        if not re.fullmatch(r"\s*[-+]?[0-9]{1,20}\s*", str(tkey)):
            raise ProblemError(f"{where}: TMPCs key {_short(tkey)} is not an integer degree t")
        t = int(str(tkey).strip())
        if t < 1:
            raise ProblemError(f"{where}: TMPCs key {tkey!r}: degree t must be >= 1")
        if t > MAX_COUNT:
            raise ProblemError(f"{where}: TMPCs key {tkey!r}: degree t must be <= {MAX_COUNT}")
        if t in tmpcs:
            raise ProblemError(f"{where}: degree t={t} given twice")
        if not isinstance(lst, list) or not lst:
            raise ProblemError(f"{where}: TMPCs[{tkey!r}] must be a non-empty list")
        items = tuple(_tmpc_from_dict(c, f"{where} t={t} TMPCs[{i}]", unknown) for i, c in enumerate(lst))
        seen: set[str] = set()
        for c in items:
            if c.id in seen:
                raise ProblemError(f"{where} t={t}: TMPC id {c.id!r} appears twice")
            seen.add(c.id)
        tmpcs[t] = items
    if not tmpcs:
        raise ProblemError(f"{where}: 'TMPCs' is empty (a layer needs at least one degree t)")
    # V6: a string if given (an explicit null is an error, not "not given")
    name = _text(raw["name"], f"{where} name") if "name" in raw else None
    kind = _text(raw["kind"], f"{where} kind") if "kind" in raw else None
    layer_index = raw.get("layerIndex")
    if "layerIndex" in raw:
        whole = isinstance(layer_index, int) or (isinstance(layer_index, float) and layer_index.is_integer())
        if isinstance(layer_index, bool) or not whole or not 0 <= layer_index <= MAX_COUNT:
            raise ProblemError(f"{where} layerIndex: must be an integer >= 0 and <= {MAX_COUNT}, got {_short(layer_index)}")
        layer_index = int(layer_index)
    return Node(
        id=nid,
        tmpcs=dict(sorted(tmpcs.items())),
        name=name,
        extra={k: v for k, v in raw.items() if k not in _NODE_KEYS},
        kind=kind,
        layer_index=layer_index,
    )


def problem_from_dict(raw: Any, *, strict: bool = False) -> Problem:
    """Build and validate a :class:`Problem` from the reference JSON structure.

    Keys the loader does not know (see :data:`KNOWN_KEYS`) are kept in ``extra`` for round
    trips and listed in :attr:`Problem.unknown_keys`; with ``strict=True`` the first one is a
    :class:`ProblemError` instead.
    """
    if not isinstance(raw, Mapping):
        raise ProblemError(f"the workload must be a JSON object, got {type(raw).__name__}")
    for key in ("maxDevices", "maxMemoryPerDevice", "bandwidth", "nodes", "edges"):
        if key not in raw:
            raise ProblemError(f"missing top-level key {key!r}")
    if "mbsInBatch" in raw and "maxBatchSize" in raw and raw["mbsInBatch"] != raw["maxBatchSize"]:
        raise ProblemError(
            f"'mbsInBatch' ({raw['mbsInBatch']!r}) and its alias 'maxBatchSize' "
            f"({raw['maxBatchSize']!r}) disagree"
        )
    if "mbsInBatch" in raw:
        mbs = raw["mbsInBatch"]
    elif "maxBatchSize" in raw:
        mbs = raw["maxBatchSize"]
    else:
        raise ProblemError("missing top-level key 'mbsInBatch' (or its alias 'maxBatchSize')")
    k, m, n, b = validate_cluster(raw["maxDevices"], raw["maxMemoryPerDevice"], mbs, raw["bandwidth"])
    for key in ("devicesPerNode", "intraNodeBandwidth", "allReduceFactor"):
        if key in raw and raw[key] is None:  # null is not "not given"
            checked_number(None, key)
    g, b_in, f = validate_cluster_shape(raw.get("devicesPerNode"), raw.get("intraNodeBandwidth"), raw.get("allReduceFactor"))
    window = raw.get("resyncOverlapWindow", WINDOW_MICROBATCH)
    if not isinstance(window, str) or window not in RESYNC_OVERLAP_WINDOWS:
        raise ProblemError(f"top-level key 'resyncOverlapWindow' must be one of "
                           f"{', '.join(repr(w) for w in RESYNC_OVERLAP_WINDOWS)}, got {_short(window)}")
    if "name" in raw:  # a label (titles of pictures, compare's instance names)
        _text(raw["name"], "top-level key 'name'")
    unknown = _Unknown()
    unknown.check(raw, "top level", "top level")

    if not isinstance(raw["nodes"], list):
        raise ProblemError("'nodes' must be a list")
    if not isinstance(raw["edges"], list):
        raise ProblemError("'edges' must be a list")
    nodes = tuple(_node_from_dict(x, i, unknown) for i, x in enumerate(raw["nodes"]))
    if not nodes:
        raise ProblemError("'nodes' is empty: a workload needs at least one layer")
    ids: set[int] = set()
    for nd in nodes:
        if nd.id in ids:
            raise ProblemError(f"node id {nd.id} appears twice")
        ids.add(nd.id)

    edges: list[Edge] = []
    seen_edges: set[tuple[int, int]] = set()
    for i, e in enumerate(raw["edges"]):
        if not isinstance(e, Mapping):
            raise ProblemError(f"edges[{i}]: an edge must be an object")
        for key in _EDGE_KEYS:
            if key not in e:
                raise ProblemError(f"edges[{i}]: missing key {key!r}")
        u = _node_id(e["sourceId"], f"edges[{i}] sourceId")
        v = _node_id(e["destId"], f"edges[{i}] destId")
        where = f"edge {u}->{v}"
        if u not in ids:
            raise ProblemError(f"{where}: source node {u} does not exist")
        if v not in ids:
            raise ProblemError(f"{where}: destination node {v} does not exist")
        if u == v:
            raise ProblemError(f"{where}: a self-loop makes the graph cyclic")
        if (u, v) in seen_edges:
            raise ProblemError(f"{where}: duplicate edge")
        seen_edges.add((u, v))
        cost = checked_number(e["communicationCost"], f"{where} communicationCost")
        unknown.check(e, "edge", where)
        extra = {k2: v2 for k2, v2 in e.items() if k2 not in _EDGE_KEYS}
        edges.append(Edge(u, v, cost, extra))
    edges_t = tuple(edges)
    topological_order_of(nodes, edges_t)  # raises on a cycle

    preds: dict[int, set[int]] = {nd.id: set() for nd in nodes}
    succs: dict[int, set[int]] = {nd.id: set() for nd in nodes}
    for e in edges_t:
        preds[e.v].add(e.u)
        succs[e.u].add(e.v)
    for nd in nodes:
        for t, lst in nd.tmpcs.items():
            for c in lst:
                where = f"node {nd.id} t={t} TMPC {c.id!r}"
                _check_keys(set(c.sync_fw), preds[nd.id], f"{where} syncTimeFw", "in-neighbours")
                _check_keys(set(c.sync_bw), succs[nd.id], f"{where} syncTimeBw", "out-neighbours")

    unknown_keys = unknown.messages()
    if strict and unknown_keys:
        raise ProblemError(f"{unknown_keys[0]} (strict mode: unknown keys are errors)")
    extra = {key: val for key, val in raw.items() if key in _TOP_EXTRA_KEYS or key not in _TOP_KEYS}
    return Problem(nodes, edges_t, k, m, n, b, extra, devices_per_node=g, intra_node_bandwidth=b_in,
                   allreduce_factor=f, resync_overlap_window=window, unknown_keys=tuple(unknown_keys))


def _check_keys(have: set[int], want: set[int], where: str, what: str) -> None:
    if have != want:
        missing = sorted(want - have)
        unexpected = sorted(have - want)
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if unexpected:
            parts.append(f"unexpected {unexpected}")
        raise ProblemError(f"{where}: keys must be exactly the node's {what} {sorted(want)}; " + ", ".join(parts))


def load_problem(source: str | Path | Mapping[str, Any], *, strict: bool = False) -> Problem:
    """Load a workload from a JSON file path or an already-parsed dict.

    ``strict=True``: an unknown key is a :class:`ProblemError` (otherwise it is kept and
    reported in :attr:`Problem.unknown_keys`).
    """
    if isinstance(source, Mapping):
        return problem_from_dict(source, strict=strict)
    return problem_from_dict(read_json(source, ProblemError, "workload"), strict=strict)


def dump_problem(problem: Problem, path: str | Path | None = None, *, indent: int | None = 1) -> str:
    """Serialise to JSON; also write it to ``path`` if given. Returns the text."""
    text = json.dumps(problem_to_dict(problem), indent=indent)
    if path is not None:
        Path(path).write_text(text + "\n")
    return text
