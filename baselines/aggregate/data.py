"""The parts of the plan space the aggregated model solves one at a time, and the per-choice
numbers it needs (docs/formulations.md §11.2).

A :class:`Space` is one model: a set of options o = (t, d) (one option for a uniform part:
then every stage has it), a range of devices used (Σ d t), and the edge bandwidth B_edge
that range implies (B_in when Σ d t <= G, else B). A :class:`Choice` is one allowed,
undominated TMPC of the inner layer or of one end node at one option, with its exact
per-sample numbers: the stage-time share kappa = p/d + f (d - 1) w / (d N B_resync) (time
units; with the iteration keys of docs/problem.md §10 kappa = p/d + (o + o_s/d)/N and the resync
less the overlap is ``rex``, docs/formulations.md §12), the compute p, the memory terms a and b + s/d (exact rationals of the float inputs),
and the sync bytes on its in-edge and out-edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from baselines.aggregate.chain import Chain
from piper.core.options import Candidates
from piper.core.problem import TMPC, Problem

__all__ = ["Choice", "Space", "choices", "free_spaces", "uniform_spaces"]


@dataclass(frozen=True)
class Space:
    """One part of the plan space, solved as one model."""

    #: the options (t, d) a stage may have; one for a uniform part
    options: tuple[tuple[int, int], ...]
    #: bytes/second of every cut edge in this part (B_in when Σ d t <= G, else B)
    bw_edge: float
    #: devices used, Σ d t, lie in [dev_lo, dev_hi]
    dev_lo: int
    dev_hi: int
    #: "inside" (Σ d t <= G) or "spanning"
    part: str
    #: stage slots of the model (an upper bound on the number of stages L)
    slots: int
    #: a fixed option per stage, slot 1 (the last stage) first (indices into ``options``): the
    #: part holds the plans of exactly these stages; None: any stage count and options
    sequence: tuple[int, ...] | None = None
    #: a uniform part of exactly this many stages (None: any count in the part's range)
    stages: int | None = None

    @property
    def single(self) -> bool:
        """One option and no sequence: every stage has the same (t, d), so y_j = j for the j-th
        stage from the back."""
        return len(self.options) == 1 and self.sequence is None

    @property
    def free(self) -> bool:
        """Each stage chooses its option (the model has option variables and y variables)."""
        return not self.single and self.sequence is None

    def slot_option(self, j: int) -> int | None:
        """The option index of slot j (1 = the last stage) when it is fixed."""
        if self.sequence is not None:
            return self.sequence[j - 1]
        return 0 if self.single else None

    def slot_y(self, j: int) -> int | None:
        """The microbatches in flight of slot j when they are fixed: j for a single option,
        ceil(D_j / d_j) for a sequence."""
        if self.sequence is not None:
            suffix = sum(self.options[o][1] for o in self.sequence[:j])
            d = self.options[self.sequence[j - 1]][1]
            return -(-suffix // d)
        return j if self.single else None

    def stage_range(self) -> tuple[int, int]:
        """(least, most) stages L: a sequence's length; for a single option dev_lo <= L d t <=
        dev_hi (L d <= N is in ``slots``); else 1..slots."""
        if self.sequence is not None:
            return len(self.sequence), len(self.sequence)
        if self.stages is not None:
            return self.stages, self.stages
        if not self.single:
            return 1, self.slots
        t, d = self.options[0]
        return max(1, -(-self.dev_lo // (d * t))), min(self.slots, self.dev_hi // (d * t))

    def label(self) -> str:
        if self.sequence is not None:
            opts = " ".join(f"{self.options[o][0]}x{self.options[o][1]}" for o in reversed(self.sequence))
            return f"stages t x d: {opts} {self.part}"
        opts = f"t={self.options[0][0]} d={self.options[0][1]}" if self.single else f"{len(self.options)} options"
        count = "" if self.stages is None else f" L={self.stages}"
        return f"{opts}{count} {self.part}"


@dataclass(frozen=True)
class Choice:
    """One TMPC of one node (or of the inner layer) at one option of a space."""

    #: index into ``Space.options``
    option: int
    tmpc: TMPC
    #: the node's share of a stage's time per sample: p/d + f (d - 1) w / (d N B_resync) (time units)
    kappa: float
    #: its compute time p (time units; the stage's tau adds it)
    p: float
    #: memory per microbatch in flight, a (bytes, exact)
    mem_a: Fraction
    #: memory independent of y, b + s/d (bytes, exact)
    mem_b: Fraction
    #: sync bytes on its in-edge / out-edge (0 where there is no such edge)
    fw: float
    bw: float
    #: docs/problem.md §10 (0 without the iteration keys): its resync per sample less what its overlap
    #: hides, ρ - h/N; kappa is then p/d + (o + o_s/d)/N and a stage pays max(0, Σ rex) on top
    #: (docs/formulations.md §12)
    rex: float = 0.0


def _parts(problem: Problem) -> list[tuple[str, int, int, float]]:
    """(part, least devices, most devices, B_edge): one part when G >= k, two otherwise."""
    k, g = problem.devices, problem.node_size
    parts = [("inside", 1, min(k, g), problem.bandwidth_intra)]
    if g < k:
        parts.append(("spanning", g + 1, k, problem.bandwidth))
    return parts


def _usable_ts(cand: Candidates, chain: Chain) -> list[int]:
    return [t for t in cand.ts if all(t in cand.tmpcs[v] for v in chain.order)]


def uniform_spaces(problem: Problem, cand: Candidates, chain: Chain) -> list[Space]:
    """One space per (t, d) usable by every node, part and stage count L (L d t in the part's
    devices, L d <= N, L <= n): each model then has its L slots all used, and the cheap bound
    of :mod:`bounds` refutes most L without a model."""
    n_mb = problem.microbatches
    out = []
    for part, lo, hi, bw in _parts(problem):
        for t in _usable_ts(cand, chain):
            for d in cand.ds:
                slots = min(chain.n, n_mb // d, hi // (d * t))
                if slots < 1:
                    continue
                least, most = Space(((t, d),), bw, lo, hi, part, slots).stage_range()
                out.extend(Space(((t, d),), bw, lo, hi, part, stages, stages=stages)
                           for stages in range(least, most + 1))
    return out


def free_spaces(problem: Problem, cand: Candidates, chain: Chain, max_sequences: int = 0) -> list[Space]:
    """Per part: one space per sequence of stage options (t, d) (the last stage first) within
    its devices and N, when there are at most ``max_sequences`` of them; else one space with
    every option, chosen per stage by the model."""
    out = []
    for part, lo, hi, bw in _parts(problem):
        opts = tuple((t, d) for t in cand.ts for d in cand.ds if t * d <= hi)
        slots = min(chain.n, problem.microbatches, hi)
        if not opts or slots < 1:
            continue
        seqs = _sequences(opts, slots, lo, hi, problem.microbatches, max_sequences)
        if seqs is None:
            out.append(Space(opts, bw, lo, hi, part, slots))
            continue
        for seq in seqs:
            used = tuple(sorted(set(seq)))
            remap = {o: i for i, o in enumerate(used)}
            out.append(Space(tuple(opts[o] for o in used), bw, lo, hi, part, len(seq),
                             tuple(remap[o] for o in seq)))
    return out


def _sequences(opts: tuple[tuple[int, int], ...], slots: int, lo: int, hi: int, n_mb: int,
               cap: int) -> list[tuple[int, ...]] | None:
    """Every sequence of 1..slots option indices with lo <= Σ d t <= hi and Σ d <= N, or None
    when there are more than ``cap``."""
    out: list[tuple[int, ...]] = []

    def grow(seq: list[int], devices: int, sum_d: int) -> bool:
        if seq and devices >= lo:
            out.append(tuple(seq))
            if len(out) > cap:
                return False
        if len(seq) == slots:
            return True
        for oi, (t, d) in enumerate(opts):
            if devices + t * d <= hi and sum_d + d <= n_mb:
                seq.append(oi)
                ok = grow(seq, devices + t * d, sum_d + d)
                seq.pop()
                if not ok:
                    return False
        return True

    return out if cap > 0 and grow([], 0, 0) else None


def _sync(problem: Problem, t: int, index: int, v_fw: int, v_bw: int) -> tuple[float, float]:
    """(sync bytes on the in-edge of ``v_fw``, on the out-edge of ``v_bw``) of the TMPC at
    ``index`` of their lists at ``t``; 0 where there is no such edge. Inner nodes share their
    TMPC lists and sync bytes, so any inner node with the edge tells."""
    ins, outs = problem.in_edges[v_fw], problem.out_edges[v_bw]
    fw = problem.node_by_id[v_fw].tmpcs[t][index].sync_fw[ins[0].u] if ins else 0.0
    bw = problem.node_by_id[v_bw].tmpcs[t][index].sync_bw[outs[0].v] if outs else 0.0
    return fw, bw


def _dominated(c: tuple, others: list[tuple], pos: int) -> bool:
    """``c`` = (p, w, a, b, s, fw, bw, -h, o, o_s) is beaten by another entry in every term (ties: the
    first kept)."""
    for opos, o in enumerate(others):
        if opos != pos and all(x <= y for x, y in zip(o, c)) and (o != c or opos < pos):
            return True
    return False


def choices(problem: Problem, cand: Candidates, space: Space, v: int,
            sync_nodes: tuple[int, int] | None = None) -> list[Choice]:
    """The choices of node ``v`` in ``space`` (``sync_nodes``: the nodes whose in-edge and out-edge
    give the sync bytes, default ``v`` itself): allowed TMPCs at each option's t that are not
    dominated (another TMPC of v at t no worse in p, w, a, b, s and both sync bytes: some optimal
    plan avoids dominated TMPCs, both objectives being non-decreasing in each) and whose a + b
    + s/d fits in M (y >= 1)."""
    n_mb, f, g = problem.microbatches, problem.resync_factor, problem.node_size
    iteration = problem.has_iteration_keys
    limit = Fraction(problem.memory_cap)
    v_fw, v_bw = sync_nodes or (v, v)
    out = []
    for oi, (t, d) in enumerate(space.options):
        listed = cand.tmpcs[v].get(t, ())
        allowed = [c for _, c in listed]
        syncs = [_sync(problem, t, index, v_fw, v_bw) for index, _ in listed]
        keys = [(c.time_per_sample, c.parameter_size, c.memory_a, c.memory_b, c.memory_sharded, *sync,
                 -c.resync_overlap_time, c.step_time, c.step_time_sharded)
                for c, sync in zip(allowed, syncs)]
        bw_res = problem.bandwidth_intra if d * t <= g else problem.bandwidth
        for pos, c in enumerate(allowed):
            if _dominated(keys[pos], keys, pos):
                continue
            mem_a = Fraction(c.memory_a)
            mem_b = Fraction(c.memory_b) + Fraction(c.memory_sharded) / d
            if mem_a + mem_b > limit:
                continue
            kappa = c.time_per_sample / d + f * (d - 1) * c.parameter_size / (d * n_mb * bw_res)
            rex = 0.0
            if iteration:  # docs/problem.md §10: kappa keeps what is always paid, rex the rest
                kappa = c.time_per_sample / d + (c.step_time + c.step_time_sharded / d) / n_mb
                rex = f * (d - 1) * c.parameter_size / (d * n_mb * bw_res) - c.resync_overlap_time / n_mb
            fw, bw = syncs[pos]
            out.append(Choice(oi, c, kappa, c.time_per_sample, mem_a, mem_b, fw, bw, rex))
    return out
