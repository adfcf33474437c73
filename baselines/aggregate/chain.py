"""Detection of a chain of identical layers (docs/formulations.md §11.1), from the numbers only.

A workload qualifies when its graph is a chain v_0 -> v_1 -> ... -> v_{n-1} (every node at
most one in-edge and one out-edge, connected) whose *inner* nodes, a run of consecutive
nodes, are identical: the same degrees, at each degree the same TMPC list (ids, times,
parameter sizes, memory a, b, s and the iteration keys h, o, o_s, in the same order), the same sync bytes on their in-edge and
on their out-edge (per TMPC), and the same communication cost on every edge between two
inner nodes. Names, kinds and layer indices are never read. The run chosen is the longest
(the first of equal length); the nodes before it (the *head*) and after it (the *tail*)
are the *ends*, at most :data:`MAX_ENDS` of them, and may differ from everything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from piper.core.errors import SolverError
from piper.core.problem import Problem

__all__ = ["MAX_ENDS", "Chain", "detect_chain"]

#: the most end nodes (head + tail) a chain may have: each end node has its own variables
#: in every slot, the inner nodes only counts
MAX_ENDS = 8

_WHO = "solver 'aggregate' needs a chain of identical layers"


@dataclass(frozen=True)
class Chain:
    """A chain of n nodes: ``order`` in pipeline order, ``head`` end nodes, then the
    ``inner`` identical nodes, then ``tail`` end nodes."""

    order: tuple[int, ...]
    head: int
    tail: int
    #: communication cost (bytes per sample) of the edge order[i] -> order[i + 1]
    edge_costs: tuple[float, ...]
    #: the workload has the iteration keys of docs/problem.md §10 (each stage row then holds its
    #: exposed resync, docs/formulations.md §12)
    iteration: bool = False

    @property
    def n(self) -> int:
        return len(self.order)

    @property
    def inner(self) -> tuple[int, ...]:
        return self.order[self.head: self.n - self.tail]

    @property
    def n_inner(self) -> int:
        return self.n - self.head - self.tail

    @property
    def ends(self) -> tuple[int, ...]:
        """Positions (indices into ``order``) of the end nodes, head first."""
        return (*range(self.head), *range(self.n - self.tail, self.n))

    def describe(self) -> str:
        return f"chain of {self.n} nodes: {self.head} head, {self.n_inner} identical inner, {self.tail} tail"


def _chain_order(problem: Problem) -> tuple[int, ...]:
    """The nodes in chain order, or a SolverError saying why the graph is not a chain."""
    for nd in problem.nodes:
        ins, outs = problem.in_edges[nd.id], problem.out_edges[nd.id]
        if len(ins) > 1:
            raise SolverError(f"{_WHO}; node {nd.label} has {len(ins)} in-edges")
        if len(outs) > 1:
            raise SolverError(f"{_WHO}; node {nd.label} has {len(outs)} out-edges")
    sources = [nd.id for nd in problem.nodes if not problem.in_edges[nd.id]]
    if len(sources) != 1:
        raise SolverError(f"{_WHO}; the graph has {len(sources)} nodes without an in-edge (a chain has one)")
    order = [sources[0]]
    while problem.out_edges[order[-1]]:
        order.append(problem.out_edges[order[-1]][0].v)
    if len(order) != problem.n:
        raise SolverError(f"{_WHO}; the graph is not connected")
    return tuple(order)


def _core(problem: Problem, v: int) -> tuple:
    """What must be equal for two inner nodes, sync bytes aside."""
    node = problem.node_by_id[v]
    return tuple((t, tuple((c.id, c.time_per_sample, c.parameter_size, c.memory_a, c.memory_b, c.memory_sharded,
                            c.resync_overlap_time, c.step_time, c.step_time_sharded)
                           for c in node.tmpcs[t])) for t in sorted(node.tmpcs))


def _sync(problem: Problem, v: int, side: str) -> tuple | None:
    """Per degree and TMPC, the sync bytes on v's in-edge (side "fw") or out-edge ("bw");
    None when v has no such edge."""
    node = problem.node_by_id[v]
    edges = problem.in_edges[v] if side == "fw" else problem.out_edges[v]
    if not edges:
        return None
    other = edges[0].u if side == "fw" else edges[0].v
    return tuple((t, tuple((c.sync_fw if side == "fw" else c.sync_bw)[other] for c in node.tmpcs[t]))
                 for t in sorted(node.tmpcs))


def detect_chain(problem: Problem, max_ends: int = MAX_ENDS) -> Chain:
    """The chain structure of ``problem`` (module docstring), or a :class:`SolverError` (one
    line) saying why it is not a chain of identical layers."""
    order = _chain_order(problem)
    n = len(order)
    costs = tuple(problem.out_edges[order[i]][0].communication_cost for i in range(n - 1))
    core = [_core(problem, v) for v in order]
    fw = [_sync(problem, v, "fw") for v in order]
    bw = [_sync(problem, v, "bw") for v in order]
    best = (0, 0)  # (start, end) of the longest run, inclusive
    for s in range(n):
        if n - s <= best[1] - best[0] + 1:
            break
        fws = {fw[s]} - {None}
        bws = {bw[s]} - {None}
        cost = None
        e = s
        while e + 1 < n and core[e + 1] == core[s]:
            nxt_fw = fws | ({fw[e + 1]} - {None})
            nxt_bw = bws | ({bw[e + 1]} - {None})
            if len(nxt_fw) > 1 or len(nxt_bw) > 1 or (cost is not None and costs[e] != cost):
                break
            fws, bws, cost = nxt_fw, nxt_bw, costs[e]
            e += 1
        if e - s > best[1] - best[0]:
            best = (s, e)
    head, tail = best[0], n - 1 - best[1]
    if head + tail > max_ends:
        raise SolverError(f"{_WHO}; the longest run of identical nodes has {best[1] - best[0] + 1} of {n} nodes, "
                          f"leaving {head + tail} end nodes (at most {max_ends})")
    return Chain(order, head, tail, costs, problem.has_iteration_keys)
