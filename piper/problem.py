"""The problem spec every solver shares: a profiled layer graph and a cluster.

Follows ``docs/problem.md`` §1 (the reference JSON format of msr-fiddle/piper).
Units: times are in the profiler's units (seconds for BERT, milliseconds
for GNMT/ResNet; the model takes them as given), sizes in bytes, bandwidth
in bytes/second.

Loading validates everything and raises :class:`ProblemError` naming the
node, edge or key at fault; a loaded :class:`Problem` is immutable.

Version 2 (``docs/problem.md`` §2) adds the optional keys
``devicesPerNode`` (G), ``intraNodeBandwidth`` (B_in, bytes/second),
``allReduceFactor`` (f) and the TMPC key ``memoryUsageShardedB`` (s, bytes);
a field is None (s: 0) when its key is not given, and the properties
:attr:`Problem.node_size`, :attr:`Problem.bandwidth_intra` and
:attr:`Problem.resync_factor` give the effective values. Unknown keys are kept
for round trips and listed in :attr:`Problem.unknown_keys` (``strict=True``:
an error).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from .jsonfile import read_json

__all__ = [
    "ProblemError",
    "TMPC",
    "Node",
    "Edge",
    "Problem",
    "load_problem",
    "problem_from_dict",
    "problem_to_dict",
    "dump_problem",
    "insert_bert_layers",
    "ACTIVATION_RECOMP",
    "VANILLA",
    "VERSION2_FEATURES",
    "DEFAULT_ALLREDUCE_FACTOR",
    "KNOWN_KEYS",
]

ACTIVATION_RECOMP = "activation recomp"
VANILLA = "vanilla"

#: the version-2 extensions (docs/problem.md §2), named by their JSON key;
#: :meth:`Problem.version2_features` lists the active ones, and a solver says which it honours
VERSION2_FEATURES = ("devicesPerNode", "intraNodeBandwidth", "allReduceFactor", "memoryUsageShardedB")

#: f when ``allReduceFactor`` is not given: bytes moved per weight byte in the
#: data-parallel resync (Piper's PipeDream rule, 4 (d - 1) w / (d N))
DEFAULT_ALLREDUCE_FACTOR = 4.0

_TOP_KEYS = (
    "maxDevices", "maxMemoryPerDevice", "bandwidth", "mbsInBatch", "maxBatchSize", "nodes", "edges",
    "devicesPerNode", "intraNodeBandwidth", "allReduceFactor",
    # written by the project's generators (experiments/instances.py, suites.py) and read back as
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
_TMPC_OPTIONAL_KEYS = ("memoryUsageShardedB",)
_EDGE_KEYS = ("sourceId", "destId", "communicationCost")

#: the JSON keys the loader understands, per place; any other key is kept (``extra``) for
#: round trips and reported in :attr:`Problem.unknown_keys` (an error with ``strict=True``)
KNOWN_KEYS: Mapping[str, tuple[str, ...]] = {
    "top level": _TOP_KEYS,
    "node": _NODE_KEYS,
    "TMPC": _TMPC_KEYS + _TMPC_OPTIONAL_KEYS,
    "edge": _EDGE_KEYS,
}

#: first label given to BERT layers inserted by :func:`insert_bert_layers`
#: (what the authors' code uses)
INSERTED_LAYER_FIRST_ID = 123456790


class ProblemError(ValueError):
    """An invalid workload: the message names the node / edge / key at fault."""


@dataclass(frozen=True)
class TMPC:
    """A tensor-model-parallel configuration of one layer at one degree t.

    All per-device quantities are for each of the t devices of the layer.
    """

    id: str
    #: forward + backward compute time per sample (profiler time units)
    time_per_sample: float
    #: bytes of weights on each device (drives data-parallel resync)
    parameter_size: float
    #: memory bytes per microbatch in flight (memory = a*y + b bytes)
    memory_a: float
    #: memory bytes independent of the microbatches in flight
    memory_b: float
    #: extra bytes per sample on each in-edge (keyed by the edge's tail)
    sync_fw: Mapping[int, float]
    #: extra bytes per sample on each out-edge (keyed by the edge's head)
    sync_bw: Mapping[int, float]
    #: unknown JSON keys, kept for round trips
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: s, ``memoryUsageShardedB`` (version 2): bytes of state split evenly across the stage's
    #: d data-parallel replicas (optimizer state under ZeRO-1); each device holds s / d. 0 when
    #: not given (and then not written back by :func:`problem_to_dict`)
    memory_sharded: float = 0.0


@dataclass(frozen=True)
class Node:
    """A layer: for each supported tensor-parallel degree t, its TMPCs (in file order)."""

    id: int
    tmpcs: Mapping[int, tuple[TMPC, ...]]
    name: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: ``kind`` (optional): what the layer is, e.g. "transformer", as the model front end writes it
    kind: str | None = None
    #: ``layerIndex`` (optional, integer >= 0): which transformer layer this node is
    layer_index: int | None = None

    @property
    def label(self) -> str:
        return f"{self.id}" if self.name is None else f"{self.id} ({self.name})"

    def tmpc(self, t: int, tmpc_id: str) -> TMPC | None:
        for c in self.tmpcs.get(t, ()):
            if c.id == tmpc_id:
                return c
        return None


@dataclass(frozen=True)
class Edge:
    """A directed edge u -> v carrying ``communication_cost`` bytes per sample."""

    u: int
    v: int
    communication_cost: float
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Problem:
    """A validated workload: DAG of layers plus cluster numbers.

    ``nodes`` keep the file order; node ids are the file's integer ids.
    """

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    #: k, number of identical accelerators
    devices: int
    #: M, memory of one accelerator, bytes
    memory_per_device: float
    #: N, microbatches in one batch
    microbatches: int
    #: B, bandwidth from each device to the outside, bytes/second (in version 2: for
    #: traffic that leaves a node)
    bandwidth: float
    #: top-level JSON keys without a field here (``name``, ``model`` and unknown ones), kept for round trips
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # ---- version 2 (docs/problem.md §2); None = the key was not given ----
    #: G, ``devicesPerNode``: devices in one node (integer >= 1); see :attr:`node_size`
    devices_per_node: int | None = None
    #: B_in, ``intraNodeBandwidth``: bytes/second per device inside a node; see :attr:`bandwidth_intra`
    intra_node_bandwidth: float | None = None
    #: f, ``allReduceFactor``: bytes moved per weight byte in the resync; see :attr:`resync_factor`
    allreduce_factor: float | None = None
    #: one message per unknown JSON key, saying where it is, e.g.
    #: "unknown key 'intraNodeBandwith' at top level (known: ...)"; the loader's warnings
    unknown_keys: tuple[str, ...] = field(default=(), compare=False)

    # ---- derived views (computed once, on demand) -------------------------------
    @cached_property
    def index(self) -> dict[int, int]:
        """node id -> position in ``nodes``."""
        return {n.id: i for i, n in enumerate(self.nodes)}

    @cached_property
    def node_by_id(self) -> dict[int, Node]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def in_edges(self) -> dict[int, tuple[Edge, ...]]:
        res: dict[int, list[Edge]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            res[e.v].append(e)
        return {k: tuple(v) for k, v in res.items()}

    @cached_property
    def out_edges(self) -> dict[int, tuple[Edge, ...]]:
        res: dict[int, list[Edge]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            res[e.u].append(e)
        return {k: tuple(v) for k, v in res.items()}

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """Node ids in a topological order, ties by file order."""
        return _topological_order(self.nodes, self.edges)

    @cached_property
    def degrees(self) -> tuple[int, ...]:
        """All tensor-parallel degrees t that some layer supports, sorted."""
        return tuple(sorted({t for n in self.nodes for t in n.tmpcs}))

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def node_size(self) -> int:
        """G: devices in one node (``devicesPerNode``; k when not given: one node)."""
        return self.devices if self.devices_per_node is None else self.devices_per_node

    @property
    def bandwidth_intra(self) -> float:
        """B_in: bytes/second per device inside a node (``intraNodeBandwidth``; B when not given)."""
        return self.bandwidth if self.intra_node_bandwidth is None else self.intra_node_bandwidth

    @property
    def resync_factor(self) -> float:
        """f: bytes moved per weight byte in the data-parallel resync (``allReduceFactor``; 4 when not given)."""
        return DEFAULT_ALLREDUCE_FACTOR if self.allreduce_factor is None else self.allreduce_factor

    def version2_feature_notes(self) -> dict[str, str]:
        """The active version-2 extensions, JSON key -> why it is active (e.g. "G=8 < k=64").

        A key counts as active only when it is given and changes some score:

        * ``devicesPerNode``: G given with G < k (with G >= k the cluster is one node);
        * ``intraNodeBandwidth``: B_in given and != B;
        * ``allReduceFactor``: f given and != 4;
        * ``memoryUsageShardedB``: some TMPC has s > 0.

        (G < k with B_in = B changes no number either; it is still listed, so that a solver
        that does not know about nodes refuses rather than guesses.)
        """
        out: dict[str, str] = {}
        if self.devices_per_node is not None and self.devices_per_node < self.devices:
            out["devicesPerNode"] = f"G={self.devices_per_node} < k={self.devices}"
        if self.intra_node_bandwidth is not None and self.intra_node_bandwidth != self.bandwidth:
            out["intraNodeBandwidth"] = f"B_in={self.intra_node_bandwidth:.6g} != B={self.bandwidth:.6g} bytes/s"
        if self.allreduce_factor is not None and self.allreduce_factor != DEFAULT_ALLREDUCE_FACTOR:
            out["allReduceFactor"] = f"f={self.allreduce_factor:.6g} != 4"
        sharded = sum(1 for nd in self.nodes for lst in nd.tmpcs.values() for c in lst if c.memory_sharded > 0)
        if sharded:
            out["memoryUsageShardedB"] = f"{sharded} TMPC(s) with s > 0"
        return out

    def version2_features(self) -> tuple[str, ...]:
        """The active version-2 extensions by JSON key, in :data:`VERSION2_FEATURES` order.

        Empty for a version-1 instance: then every score is exactly the version-1 score.
        See :meth:`version2_feature_notes` for when a key counts as active.
        """
        return tuple(self.version2_feature_notes())

    @property
    def max_stage_sum_d(self) -> int:
        """S = min(N, k): a bound on the sum of data-parallel degrees."""
        return min(self.microbatches, self.devices)

    def node(self, node_id: int) -> Node:
        try:
            return self.node_by_id[node_id]
        except KeyError:
            raise ProblemError(f"no node with id {node_id}") from None

    def with_cluster(
        self,
        devices: int | None = None,
        memory: float | None = None,
        microbatches: int | None = None,
        bandwidth: float | None = None,
        devices_per_node: int | None = None,
        intra_node_bandwidth: float | None = None,
        allreduce_factor: float | None = None,
    ) -> "Problem":
        """A copy with some cluster numbers replaced (validated like the file's; None keeps the value)."""
        p = replace(
            self,
            devices=self.devices if devices is None else devices,
            memory_per_device=self.memory_per_device if memory is None else memory,
            microbatches=self.microbatches if microbatches is None else microbatches,
            bandwidth=self.bandwidth if bandwidth is None else bandwidth,
            devices_per_node=self.devices_per_node if devices_per_node is None else devices_per_node,
            intra_node_bandwidth=self.intra_node_bandwidth if intra_node_bandwidth is None else intra_node_bandwidth,
            allreduce_factor=self.allreduce_factor if allreduce_factor is None else allreduce_factor,
        )
        _validate_cluster(p.devices, p.memory_per_device, p.microbatches, p.bandwidth)
        g, b_in, f = _validate_cluster_v2(p.devices_per_node, p.intra_node_bandwidth, p.allreduce_factor)
        return replace(p, devices_per_node=g, intra_node_bandwidth=b_in, allreduce_factor=f)

    def to_dict(self) -> dict[str, Any]:
        return problem_to_dict(self)


# ---------------------------------------------------------------------------------
# loading and validation
# ---------------------------------------------------------------------------------


def _number(value: Any, where: str, *, integer: bool = False, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProblemError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ProblemError(f"{where}: must be finite, got {value!r}")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ProblemError(f"{where}: must be an integer, got {value!r}")
        value = int(value)
        if value < 1:
            raise ProblemError(f"{where}: must be >= 1, got {value}")
        return value
    if positive and value <= 0:
        raise ProblemError(f"{where}: must be > 0, got {value!r}")
    if value < 0:
        raise ProblemError(f"{where}: must be >= 0, got {value!r}")
    return float(value)


def _validate_cluster(k: Any, m: Any, n: Any, b: Any) -> tuple[int, float, int, float]:
    return (
        int(_number(k, "maxDevices", integer=True)),
        _number(m, "maxMemoryPerDevice", positive=True),
        int(_number(n, "mbsInBatch", integer=True)),
        _number(b, "bandwidth", positive=True),
    )


def _validate_cluster_v2(g: Any, b_in: Any, f: Any) -> tuple[int | None, float | None, float | None]:
    """The version-2 cluster keys (each may be None = not given)."""
    return (
        None if g is None else int(_number(g, "devicesPerNode", integer=True)),
        None if b_in is None else _number(b_in, "intraNodeBandwidth", positive=True),
        None if f is None else _number(f, "allReduceFactor", positive=True),
    )


def _unknown(raw: Mapping[str, Any], known: tuple[str, ...], where: str, out: list[str]) -> None:
    for key in raw:
        if key not in known:
            out.append(f"unknown key {key!r} at {where} (known: {', '.join(known)})")


def _node_id(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ProblemError(f"{where}: node id must be an integer, got {value!r}")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ProblemError(f"{where}: node id must be an integer, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, int):
        raise ProblemError(f"{where}: node id must be an integer, got {value!r}")
    return value


def _sync_map(raw: Any, where: str) -> dict[int, float]:
    if not isinstance(raw, Mapping):
        raise ProblemError(f"{where}: expected an object keyed by node id, got {type(raw).__name__}")
    out: dict[int, float] = {}
    for key, val in raw.items():
        nid = _node_id(key, f"{where} key {key!r}")
        if nid in out:
            raise ProblemError(f"{where}: node {nid} appears twice")
        out[nid] = _number(val, f"{where}[{key!r}]")
    return out


def _tmpc_from_dict(raw: Any, where: str, unknown: list[str] | None = None) -> TMPC:
    if not isinstance(raw, Mapping):
        raise ProblemError(f"{where}: a TMPC must be an object, got {type(raw).__name__}")
    for key in _TMPC_KEYS:
        if key not in raw:
            raise ProblemError(f"{where}: missing key {key!r}")
    tid = raw["id"]
    if not isinstance(tid, str) or not tid:
        raise ProblemError(f"{where}: 'id' must be a non-empty string, got {tid!r}")
    where = f"{where} (TMPC {tid!r})"
    if unknown is not None:
        _unknown(raw, KNOWN_KEYS["TMPC"], where, unknown)
    sharded = raw.get("memoryUsageShardedB", 0.0)  # an explicit null is an error, like any number
    return TMPC(
        id=tid,
        time_per_sample=_number(raw["timePerSample"], f"{where} timePerSample"),
        parameter_size=_number(raw["parameterSize"], f"{where} parameterSize"),
        memory_a=_number(raw["memoryUsageA"], f"{where} memoryUsageA"),
        memory_b=_number(raw["memoryUsageB"], f"{where} memoryUsageB"),
        sync_fw=_sync_map(raw["syncTimeFw"], f"{where} syncTimeFw"),
        sync_bw=_sync_map(raw["syncTimeBw"], f"{where} syncTimeBw"),
        extra={k: v for k, v in raw.items() if k not in KNOWN_KEYS["TMPC"]},
        memory_sharded=_number(sharded, f"{where} memoryUsageShardedB"),
    )


def _node_from_dict(raw: Any, pos: int, unknown: list[str] | None = None) -> Node:
    if not isinstance(raw, Mapping):
        raise ProblemError(f"nodes[{pos}]: a node must be an object, got {type(raw).__name__}")
    if "id" not in raw:
        raise ProblemError(f"nodes[{pos}]: missing key 'id'")
    nid = _node_id(raw["id"], f"nodes[{pos}] id")
    where = f"node {nid}"
    if "TMPCs" not in raw:
        raise ProblemError(f"{where}: missing key 'TMPCs'")
    if unknown is not None:
        _unknown(raw, _NODE_KEYS, where, unknown)
    tm = raw["TMPCs"]
    if not isinstance(tm, Mapping):
        raise ProblemError(f"{where}: 'TMPCs' must be an object keyed by degree t")
    tmpcs: dict[int, tuple[TMPC, ...]] = {}
    for tkey, lst in tm.items():
        try:
            t = int(str(tkey).strip())
        except ValueError:
            raise ProblemError(f"{where}: TMPCs key {tkey!r} is not an integer degree t") from None
        if t < 1:
            raise ProblemError(f"{where}: TMPCs key {tkey!r}: degree t must be >= 1")
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
    name = raw.get("name")
    kind = raw.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise ProblemError(f"{where} kind: must be a string, got {kind!r}")
    layer_index = raw.get("layerIndex")
    if "layerIndex" in raw:
        whole = isinstance(layer_index, int) or (isinstance(layer_index, float) and layer_index.is_integer())
        if isinstance(layer_index, bool) or not whole or layer_index < 0:
            raise ProblemError(f"{where} layerIndex: must be an integer >= 0, got {layer_index!r}")
        layer_index = int(layer_index)
    return Node(
        id=nid,
        tmpcs=dict(sorted(tmpcs.items())),
        name=None if name is None else str(name),
        extra={k: v for k, v in raw.items() if k not in _NODE_KEYS},
        kind=kind,
        layer_index=layer_index,
    )


def _topological_order(nodes: tuple[Node, ...], edges: tuple[Edge, ...]) -> tuple[int, ...]:
    """Node ids in a topological order, ties broken by file order (networkx's
    lexicographical topological sort keyed on the node's position in the file).
    A cycle is a :class:`ProblemError` that names one cycle, edge by edge."""
    import networkx as nx

    pos = {n.id: i for i, n in enumerate(nodes)}
    graph = nx.DiGraph()
    graph.add_nodes_from(pos)
    graph.add_edges_from((e.u, e.v) for e in edges)
    try:
        return tuple(nx.lexicographical_topological_sort(graph, key=pos.__getitem__))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(graph)
        path = " -> ".join(str(u) for u, _ in cycle) + f" -> {cycle[0][0]}"
        raise ProblemError(f"the graph has a cycle: {path}") from None


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
    k, m, n, b = _validate_cluster(raw["maxDevices"], raw["maxMemoryPerDevice"], mbs, raw["bandwidth"])
    for key in ("devicesPerNode", "intraNodeBandwidth", "allReduceFactor"):
        if key in raw and raw[key] is None:  # null is not "not given"
            _number(None, key)
    g, b_in, f = _validate_cluster_v2(raw.get("devicesPerNode"), raw.get("intraNodeBandwidth"), raw.get("allReduceFactor"))
    unknown: list[str] = []
    _unknown(raw, _TOP_KEYS, "top level", unknown)

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
        cost = _number(e["communicationCost"], f"{where} communicationCost")
        _unknown(e, _EDGE_KEYS, where, unknown)
        extra = {k2: v2 for k2, v2 in e.items() if k2 not in _EDGE_KEYS}
        edges.append(Edge(u, v, cost, extra))
    edges_t = tuple(edges)
    _topological_order(nodes, edges_t)  # raises on a cycle

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

    if strict and unknown:
        raise ProblemError(f"{unknown[0]} (strict mode: unknown keys are errors)")
    extra = {key: val for key, val in raw.items() if key in _TOP_EXTRA_KEYS or key not in _TOP_KEYS}
    return Problem(nodes, edges_t, k, m, n, b, extra, devices_per_node=g, intra_node_bandwidth=b_in,
                   allreduce_factor=f, unknown_keys=tuple(unknown))


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


def _num_out(x: float) -> float | int:
    return x


def problem_to_dict(problem: Problem) -> dict[str, Any]:
    """The reference JSON structure (round-trips through :func:`problem_from_dict`)."""

    def tmpc(c: TMPC) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": c.id,
            "timePerSample": c.time_per_sample,
            "parameterSize": c.parameter_size,
            "memoryUsageA": c.memory_a,
            "memoryUsageB": c.memory_b,
            "syncTimeFw": {str(k): v for k, v in c.sync_fw.items()},
            "syncTimeBw": {str(k): v for k, v in c.sync_bw.items()},
        }
        if c.memory_sharded != 0:
            d["memoryUsageShardedB"] = c.memory_sharded
        d.update(c.extra)
        return d

    nodes = []
    for nd in problem.nodes:
        d: dict[str, Any] = {"id": nd.id}
        if nd.name is not None:
            d["name"] = nd.name
        if nd.kind is not None:
            d["kind"] = nd.kind
        if nd.layer_index is not None:
            d["layerIndex"] = nd.layer_index
        d["TMPCs"] = {str(t): [tmpc(c) for c in lst] for t, lst in nd.tmpcs.items()}
        d.update(nd.extra)
        nodes.append(d)
    edges = []
    for e in problem.edges:
        d = {"sourceId": e.u, "destId": e.v, "communicationCost": e.communication_cost}
        d.update(e.extra)
        edges.append(d)
    out: dict[str, Any] = {
        "maxDevices": problem.devices,
        "maxMemoryPerDevice": problem.memory_per_device,
        "bandwidth": problem.bandwidth,
        "mbsInBatch": problem.microbatches,
    }
    if problem.devices_per_node is not None:
        out["devicesPerNode"] = problem.devices_per_node
    if problem.intra_node_bandwidth is not None:
        out["intraNodeBandwidth"] = problem.intra_node_bandwidth
    if problem.allreduce_factor is not None:
        out["allReduceFactor"] = problem.allreduce_factor
    out.update(problem.extra)
    out["nodes"] = nodes
    out["edges"] = edges
    return out


def dump_problem(problem: Problem, path: str | Path | None = None, *, indent: int | None = 1) -> str:
    """Serialise to JSON; also write it to ``path`` if given. Returns the text."""
    text = json.dumps(problem_to_dict(problem), indent=indent)
    if path is not None:
        Path(path).write_text(text + "\n")
    return text


# ---------------------------------------------------------------------------------
# BERT-48/64/96 from BERT-32 by transformer-layer insertion
# ---------------------------------------------------------------------------------


def _is_transformer(node: Node) -> bool:
    return node.name == "ParallelTransformerLayer"


def insert_bert_layers(problem: Problem, transformer_layers: int) -> Problem:
    """BERT with ``transformer_layers`` layers, made from BERT-32 as the authors do.

    Copies of the last transformer layer whose successor is also a transformer
    layer (layer 34 in bert32a100.json) are inserted in a chain between it and
    that successor; see ``workloads/README.md``. Copies are numbered
    123456790, 123456791, ... along the chain.
    """
    have = sum(1 for nd in problem.nodes if _is_transformer(nd))
    if have == 0:
        raise ProblemError("insert_bert_layers: the workload has no 'ParallelTransformerLayer' nodes")
    extra_layers = transformer_layers - have
    if extra_layers < 0:
        raise ProblemError(f"insert_bert_layers: the workload already has {have} transformer layers, more than {transformer_layers}")
    if extra_layers == 0:
        return problem
    # the anchor: the last transformer layer (in topological order) with a transformer successor
    anchor = succ = None
    for nid in problem.topological_order:
        nd = problem.node(nid)
        if not _is_transformer(nd):
            continue
        for e in problem.out_edges[nid]:
            if _is_transformer(problem.node(e.v)):
                anchor, succ = nd, problem.node(e.v)
    if anchor is None or succ is None:
        raise ProblemError("insert_bert_layers: no transformer layer is followed by another one")
    anchor_pred = None
    for e in problem.in_edges[anchor.id]:
        if _is_transformer(problem.node(e.u)):
            anchor_pred = e.u
    if anchor_pred is None:
        raise ProblemError(f"insert_bert_layers: layer {anchor.id} has no transformer predecessor")
    link = next(e for e in problem.out_edges[anchor.id] if e.v == succ.id)
    ids = {nd.id for nd in problem.nodes}
    copies = [INSERTED_LAYER_FIRST_ID + i for i in range(extra_layers)]
    clash = ids.intersection(copies)
    if clash:
        raise ProblemError(f"insert_bert_layers: node id {min(clash)} already exists")
    chain = [anchor.id, *copies, succ.id]

    def with_sync(c: TMPC, fw: dict[int, float] | None, bw: dict[int, float] | None) -> TMPC:
        return replace(c, sync_fw=c.sync_fw if fw is None else fw, sync_bw=c.sync_bw if bw is None else bw)

    new_nodes: list[Node] = []
    for nd in problem.nodes:
        if nd.id == anchor.id:
            tm = {
                t: tuple(with_sync(c, None, {(copies[0] if k == succ.id else k): v for k, v in c.sync_bw.items()}) for c in lst)
                for t, lst in nd.tmpcs.items()
            }
            new_nodes.append(replace(nd, tmpcs=tm))
        elif nd.id == succ.id:
            tm = {
                t: tuple(with_sync(c, {(copies[-1] if k == anchor.id else k): v for k, v in c.sync_fw.items()}, None) for c in lst)
                for t, lst in nd.tmpcs.items()
            }
            new_nodes.append(replace(nd, tmpcs=tm))
        else:
            new_nodes.append(nd)
    for i, cid in enumerate(copies):
        prev, nxt = chain[i], chain[i + 2]
        tm = {
            t: tuple(with_sync(c, {prev: c.sync_fw[anchor_pred]}, {nxt: c.sync_bw[succ.id]}) for c in lst)
            for t, lst in anchor.tmpcs.items()
        }
        # a copy is the same kind of layer; its layerIndex (if any) would repeat the anchor's, so it has none
        new_nodes.append(Node(cid, tm, anchor.name, dict(anchor.extra), kind=anchor.kind))
    new_edges = [e for e in problem.edges if not (e.u == anchor.id and e.v == succ.id)]
    for a, b in zip(chain, chain[1:]):
        new_edges.append(Edge(a, b, link.communication_cost, dict(link.extra)))
    # re-validate through the dict form so the result is checked like any input
    return problem_from_dict(problem_to_dict(replace(problem, nodes=tuple(new_nodes), edges=tuple(new_edges))))
