"""The problem spec every solver shares: a profiled layer graph and a cluster.

Follows ``docs/problem.md`` §1 (the reference JSON format of msr-fiddle/piper).
Units: times are in the profiler's units (seconds for BERT, milliseconds
for GNMT/ResNet; the model takes them as given), sizes in bytes, bandwidth
in bytes/second.

Loading validates everything and raises :class:`ProblemError` naming the
node, edge or key at fault; a loaded :class:`Problem` is immutable. This module
holds the data classes; JSON reading, validation and writing are in
:mod:`piper.io.workload` and BERT layer insertion in :mod:`piper.io.bert_layers`, both
re-exported here (``from piper.core.problem import load_problem`` keeps working).

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

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from piper.core.errors import ProblemError
from piper.core.limits import MAX_COUNT, MAX_MAGNITUDE, MEMORY_RTOL, MIN_POSITIVE

__all__ = [
    "ProblemError",
    "TMPC",
    "Node",
    "Edge",
    "Problem",
    "problem_to_dict",
    "checked_number",
    "short_repr",
    "validate_cluster",
    "validate_cluster_shape",
    "ACTIVATION_RECOMP",
    "VANILLA",
    "CLUSTER_FEATURES",
    "ITERATION_FEATURES",
    "RESYNC_OVERLAP_WINDOWS",
    "WINDOW_FEATURES",
    "WINDOW_MICROBATCH",
    "WINDOW_SCHEDULE",
    "overlap_window",
    "EXPERT_FEATURES",
    "WORKLOAD_FEATURES",
    "DEFAULT_ALLREDUCE_FACTOR",
]

ACTIVATION_RECOMP = "activation recomp"
VANILLA = "vanilla"

#: the version-2 extensions (docs/problem.md §2), named by their JSON key;
#: :meth:`Problem.active_features` lists the active ones, and a solver says which it honours
CLUSTER_FEATURES = ("devicesPerNode", "intraNodeBandwidth", "allReduceFactor", "memoryUsageShardedB")
#: the iteration-time keys of docs/problem.md §10 (TMPC keys): the part of a stage's resync
#: hidden behind its compute, and the optimizer step's time; a solver that does not declare
#: them refuses an instance that uses them
ITERATION_FEATURES = ("resyncOverlapTime", "stepTime", "stepTimeSharded")
#: the top-level key ``resyncOverlapWindow`` (docs/problem.md §10.1): with "schedule", a device group of
#: an interleaved plan hides the resync behind its schedule's window of micro-batches, not one
WINDOW_FEATURES = ("resyncOverlapWindow",)
#: ``resyncOverlapWindow``'s values: h counts once per stage (the default), or times the schedule's window
WINDOW_MICROBATCH, WINDOW_SCHEDULE = "microbatch", "schedule"
RESYNC_OVERLAP_WINDOWS = (WINDOW_MICROBATCH, WINDOW_SCHEDULE)
#: expert parallelism (docs/problem.md §11, rule 6): one feature for the four TMPC keys
#: ``expertParallel``, ``expertTensorParallel``, ``expertParameterSize`` and
#: ``memoryUsageShardedExpertB``; a solver that does not declare it refuses an instance that uses them
EXPERT_FEATURES = ("expertParallel",)
#: every feature a solver may have to declare (:meth:`Problem.active_feature_notes`)
WORKLOAD_FEATURES = CLUSTER_FEATURES + ITERATION_FEATURES + WINDOW_FEATURES + EXPERT_FEATURES

#: f when ``allReduceFactor`` is not given: bytes moved per weight byte in the
#: data-parallel resync (Piper's PipeDream rule, 4 (d - 1) w / (d N))
DEFAULT_ALLREDUCE_FACTOR = 4.0


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
    #: h, ``resyncOverlapTime`` (docs/problem.md §10): seconds of one micro-batch of this node during
    #: which the stage's data-parallel resync can run; 0 when not given
    resync_overlap_time: float = 0.0
    #: o, ``stepTime`` (§10): time units per iteration this node adds on each device (the optimizer step); 0
    step_time: float = 0.0
    #: o_s, ``stepTimeSharded`` (§10): per-iteration time split over the stage's d replicas; 0
    step_time_sharded: float = 0.0
    #: e, ``expertParallel`` (docs/problem.md §11): devices the layer's experts are spread over
    #: (integer >= 1); 1 when not given
    expert_parallel: int = 1
    #: e_t, ``expertTensorParallel`` (§11): devices each expert is split over (integer >= 1); 1
    expert_tensor_parallel: int = 1
    #: w_x, ``expertParameterSize`` (§11): bytes of expert weights on each device (not counted
    #: in ``parameter_size``); their resync is over the r = d t / (e e_t) copies; 0
    expert_parameter_size: float = 0.0
    #: s_x, ``memoryUsageShardedExpertB`` (§11): bytes of expert optimizer state split evenly
    #: over the r devices that hold the same experts (each holds s_x / r); 0
    memory_sharded_expert: float = 0.0

    @property
    def expert_width(self) -> int:
        """e * e_t: the devices one copy of the layer's experts spans (docs/problem.md §11).
        Rule 6: a stage of degrees (d, t) may use this TMPC only if it divides d * t."""
        return self.expert_parallel * self.expert_tensor_parallel

    @property
    def has_expert_terms(self) -> bool:
        """True when any of the four §11 keys is not its default (e e_t > 1, w_x > 0 or s_x > 0)."""
        return self.expert_width > 1 or self.expert_parameter_size > 0 or self.memory_sharded_expert > 0

    def expert_copies(self, d: int, t: int) -> int | None:
        """r = d t / (e e_t), the copies of each expert shard a stage of degrees (d, t) holds
        (docs/problem.md §11); None when rule 6 fails (e e_t does not divide d t)."""
        width = self.expert_width
        if (d * t) % width:
            return None
        return d * t // width

    def expert_terms(self, d: int, t: int, factor: float, microbatches: int) -> tuple[float, float] | None:
        """docs/problem.md §11 for a stage of degrees (d, t): (resync bytes per sample
        f (r - 1) w_x / (r N), memory bytes s_x / r) with r = :meth:`expert_copies`; None when
        rule 6 fails. (0.0, 0.0) exactly when w_x = s_x = 0."""
        r = self.expert_copies(d, t)
        if r is None:
            return None
        return factor * (r - 1) * self.expert_parameter_size / (r * microbatches), self.memory_sharded_expert / r


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
    #: ``resyncOverlapWindow`` (docs/problem.md §10.1): :data:`WINDOW_MICROBATCH` (the default: each
    #: group hides its h once) or :data:`WINDOW_SCHEDULE` (an interleaved plan's group hides it
    #: :func:`overlap_window` times)
    resync_overlap_window: str = WINDOW_MICROBATCH
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

    def _edges_by(self, end: str) -> dict[int, tuple[Edge, ...]]:
        """Node id -> the edges whose ``end`` ("u" or "v") it is, in file order."""
        res: dict[int, list[Edge]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            res[getattr(e, end)].append(e)
        return {k: tuple(v) for k, v in res.items()}

    @cached_property
    def in_edges(self) -> dict[int, tuple[Edge, ...]]:
        return self._edges_by("v")

    @cached_property
    def out_edges(self) -> dict[int, tuple[Edge, ...]]:
        return self._edges_by("u")

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """Node ids in a topological order, ties by file order."""
        return topological_order_of(self.nodes, self.edges)

    @cached_property
    def degrees(self) -> tuple[int, ...]:
        """All tensor-parallel degrees t that some layer supports, sorted."""
        return tuple(sorted({t for n in self.nodes for t in n.tmpcs}))

    @cached_property
    def has_iteration_keys(self) -> bool:
        """Whether some TMPC has a docs/problem.md §10 key > 0 (``resyncOverlapTime``, ``stepTime``,
        ``stepTimeSharded``): then the evaluator's TPS prices the resync's overlap and the step."""
        return any(c.resync_overlap_time > 0 or c.step_time > 0 or c.step_time_sharded > 0
                   for nd in self.nodes for lst in nd.tmpcs.values() for c in lst)

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def memory_cap(self) -> float:
        """M (1 + MEMORY_RTOL), bytes: the most memory a stage may use (docs/problem.md §3.3), the
        evaluator's and every solver's memory test."""
        return self.memory_per_device * (1.0 + MEMORY_RTOL)

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

    def active_feature_notes(self) -> dict[str, str]:
        """The active version-2 extensions, JSON key -> why it is active (e.g. "G=8 < k=64").

        A key counts as active only when it is given and changes some score:

        * ``devicesPerNode``: G given with G < k (with G >= k the cluster is one node);
        * ``intraNodeBandwidth``: B_in given and != B;
        * ``allReduceFactor``: f given and != 4;
        * ``memoryUsageShardedB``: some TMPC has s > 0;
        * ``resyncOverlapTime``, ``stepTime``, ``stepTimeSharded`` (§10): some TMPC has the key > 0;
        * ``resyncOverlapWindow`` (§10.1): "schedule" and some TMPC has ``resyncOverlapTime`` > 0;
        * ``expertParallel`` (§11, the four expert keys): some TMPC has e e_t > 1, w_x > 0 or s_x > 0.

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
        for key, attr in (("resyncOverlapTime", "resync_overlap_time"), ("stepTime", "step_time"),
                          ("stepTimeSharded", "step_time_sharded")):
            count = sum(1 for nd in self.nodes for lst in nd.tmpcs.values() for c in lst if getattr(c, attr) > 0)
            if count:
                out[key] = f"{count} TMPC(s) with {key} > 0"
        if self.resync_overlap_window == WINDOW_SCHEDULE and any(
                c.resync_overlap_time > 0 for nd in self.nodes for lst in nd.tmpcs.values() for c in lst):
            out["resyncOverlapWindow"] = "'schedule' with some resyncOverlapTime > 0"
        expert = sum(1 for nd in self.nodes for lst in nd.tmpcs.values() for c in lst if c.has_expert_terms)
        if expert:
            out["expertParallel"] = f"{expert} TMPC(s) with expert parallelism (e*e_t > 1, w_x > 0 or s_x > 0)"
        return out

    def active_features(self) -> tuple[str, ...]:
        """The active version-2 extensions and iteration keys by JSON key, in :data:`WORKLOAD_FEATURES` order.

        Empty for a version-1 instance: then every score is exactly the version-1 score.
        See :meth:`active_feature_notes` for when a key counts as active.
        """
        return tuple(self.active_feature_notes())

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
        validate_cluster(p.devices, p.memory_per_device, p.microbatches, p.bandwidth)
        g, b_in, f = validate_cluster_shape(p.devices_per_node, p.intra_node_bandwidth, p.allreduce_factor)
        return replace(p, devices_per_node=g, intra_node_bandwidth=b_in, allreduce_factor=f)

    def to_dict(self) -> dict[str, Any]:
        """The reference JSON structure (:func:`problem_to_dict`)."""
        return problem_to_dict(self)


def topological_order_of(nodes: tuple[Node, ...], edges: tuple[Edge, ...]) -> tuple[int, ...]:
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


def checked_number(value: Any, where: str, *, integer: bool = False, positive: bool = False,
                   maximum: float | None = None) -> float:
    """``value`` checked as a number of a workload field (docs/problem.md §1.5, V3/V4/V9), a
    :class:`ProblemError` naming ``where`` otherwise: not a bool; finite; an integer in
    1..:data:`~piper.core.limits.MAX_COUNT` with ``integer``; else a float in
    [:data:`~piper.core.limits.MIN_POSITIVE`, :data:`~piper.core.limits.MAX_MAGNITUDE`] with
    ``positive``, in [0, MAX_MAGNITUDE] without (``maximum`` replaces the upper end)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProblemError(f"{where}: expected a number, got {short_repr(value)}")
    if integer:
        top = MAX_COUNT if maximum is None else maximum
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ProblemError(f"{where}: must be finite, got {value!r}")
            if not value.is_integer():
                raise ProblemError(f"{where}: must be an integer, got {value!r}")
        if value < 1:
            raise ProblemError(f"{where}: must be >= 1, got {short_repr(value)}")
        if value > top:
            raise ProblemError(f"{where}: must be <= {top}, got {short_repr(value)}")
        return int(value)
    top = MAX_MAGNITUDE if maximum is None else maximum
    if isinstance(value, int) and abs(value) > top:  # before float(): a huge int does not convert
        raise ProblemError(f"{where}: must be <= {top:g}, got {short_repr(value)}")
    value = float(value)
    if not math.isfinite(value):
        raise ProblemError(f"{where}: must be finite, got {value!r}")
    if positive and value <= 0:
        raise ProblemError(f"{where}: must be > 0, got {value!r}")
    if value < 0:
        raise ProblemError(f"{where}: must be >= 0, got {value!r}")
    if positive and value < MIN_POSITIVE:
        raise ProblemError(f"{where}: must be >= {MIN_POSITIVE:g} (so that dividing by it cannot overflow), got {value!r}")
    if value > top:
        raise ProblemError(f"{where}: must be <= {top:g} (so that no sum over the graph can overflow), got {value!r}")
    return value


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (a value may be a 40-digit integer or a large object)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_cluster(k: Any, m: Any, n: Any, b: Any) -> tuple[int, float, int, float]:
    """k, M, N, B checked (docs/problem.md §1): a :class:`ProblemError` naming the key at fault."""
    return (
        int(checked_number(k, "maxDevices", integer=True)),
        checked_number(m, "maxMemoryPerDevice", positive=True),
        int(checked_number(n, "mbsInBatch", integer=True)),
        checked_number(b, "bandwidth", positive=True),
    )


def validate_cluster_shape(g: Any, b_in: Any, f: Any) -> tuple[int | None, float | None, float | None]:
    """The version-2 cluster keys (each may be None = not given)."""
    return (
        None if g is None else int(checked_number(g, "devicesPerNode", integer=True)),
        None if b_in is None else checked_number(b_in, "intraNodeBandwidth", positive=True),
        None if f is None else checked_number(f, "allReduceFactor", positive=True),
    )


#: the optional keys :func:`problem_to_dict` writes only away from their default, in output
#: order: (JSON key, attribute, default), of a TMPC, a node and the cluster
_OPTIONAL_TMPC_KEYS = (
    ("memoryUsageShardedB", "memory_sharded", 0),
    ("resyncOverlapTime", "resync_overlap_time", 0),
    ("stepTime", "step_time", 0),
    ("stepTimeSharded", "step_time_sharded", 0),
    ("expertParallel", "expert_parallel", 1),
    ("expertTensorParallel", "expert_tensor_parallel", 1),
    ("expertParameterSize", "expert_parameter_size", 0),
    ("memoryUsageShardedExpertB", "memory_sharded_expert", 0),
)
_OPTIONAL_NODE_KEYS = (("name", "name", None), ("kind", "kind", None), ("layerIndex", "layer_index", None))
_OPTIONAL_CLUSTER_KEYS = (
    ("devicesPerNode", "devices_per_node", None),
    ("intraNodeBandwidth", "intra_node_bandwidth", None),
    ("allReduceFactor", "allreduce_factor", None),
    ("resyncOverlapWindow", "resync_overlap_window", WINDOW_MICROBATCH),
)


def overlap_window(problem: Problem, groups: int, v: int, d: int) -> float:
    """The micro-batches of its stage a device group hides its resync behind (docs/problem.md §10.1):
    1 with ``resyncOverlapWindow`` "microbatch" and for 1F1B (v = 1); else, for Megatron-LM's
    interleaved schedule with ``groups`` device groups of v chunks and m = N // d micro-batches
    per replica, min(m, ((v - 1) groups + 1) / v)."""
    if problem.resync_overlap_window != WINDOW_SCHEDULE or v == 1:
        return 1.0
    return min(problem.microbatches // d, ((v - 1) * groups + 1) / v)


def _put_optional(d: dict[str, Any], obj: Any, keys: tuple[tuple[str, str, Any], ...]) -> None:
    """Set each of ``keys`` (JSON key, attribute, default) in ``d`` whose value on ``obj`` is
    not its default (``None``: is not None)."""
    for key, attr, default in keys:
        value = getattr(obj, attr)
        if (value is not None) if default is None else (value != default):
            d[key] = value


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
        _put_optional(d, c, _OPTIONAL_TMPC_KEYS)
        d.update(c.extra)
        return d

    nodes = []
    for nd in problem.nodes:
        d: dict[str, Any] = {"id": nd.id}
        _put_optional(d, nd, _OPTIONAL_NODE_KEYS)
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
    _put_optional(out, problem, _OPTIONAL_CLUSTER_KEYS)
    out.update(problem.extra)
    out["nodes"] = nodes
    out["edges"] = edges
    return out
