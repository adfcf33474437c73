"""Ideals (successor-closed node sets) of a workload graph, and their nested pairs.

An *ideal* here is a set I of nodes closed under successors: v in I and (v, x)
an edge imply x in I (the reference code calls them "downsets").  Every plan is
a chain V = I_1 > I_2 > ... > I_{L+1} = {} and stage i is I_i minus I_{i+1};
every difference of two nested ideals is a legal stage (``docs/problem.md`` §6.1).

Representation: node *positions* 0..n-1 follow ``problem.nodes`` (file order).
An ideal is a Python ``int`` bitmask (bit i = position i; works for any n, e.g.
ResNet's 177 nodes) and, for the compiled code, a row of a ``uint64`` matrix
``words[ideal, n_words]``.  Ideals are numbered in order of size (ties in
discovery order), so every proper sub-ideal of ideal ``i`` has a smaller number
and id 0 is the empty set.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from piper.core.errors import SolverError
from piper.core.problem import Problem
from piper.dp.limits import Progress, TimeUp, past

__all__ = ["Ideals", "enumerate_ideals", "count_ideals", "ideal_pairs", "IdealPairs", "DEFAULT_MAX_IDEAL_PAIRS", "pair_cap"]


@dataclass(frozen=True)
class Ideals:
    """All ideals of a graph, smallest first."""

    #: number of nodes
    n: int
    #: bitmask of each ideal (bit i = node position i); masks[0] == 0 (the empty set)
    masks: tuple[int, ...]
    #: words[i, w] = bits 64w..64w+63 of masks[i]
    words: np.ndarray
    #: popcount of each ideal
    sizes: np.ndarray
    #: True when the ideals are the suffixes of one topological order (``linearize``)
    linear: bool

    def __len__(self) -> int:
        return len(self.masks)

    @property
    def full(self) -> int:
        """Index of the ideal holding every node (the last one)."""
        return len(self.masks) - 1

    def nodes_of(self, mask: int) -> list[int]:
        """Positions of the set bits of ``mask``, ascending."""
        out = []
        i = 0
        while mask:
            if mask & 1:
                out.append(i)
            mask >>= 1
            i += 1
        return out


def _succ_masks(problem: Problem) -> list[int]:
    pos = problem.index
    succ = [0] * problem.n
    for e in problem.edges:
        succ[pos[e.u]] |= 1 << pos[e.v]
    return succ


def _to_words(masks: Sequence[int], n: int) -> np.ndarray:
    n_words = max(1, (n + 63) // 64)
    out = np.zeros((len(masks), n_words), dtype=np.uint64)
    low = (1 << 64) - 1
    for i, m in enumerate(masks):
        w = 0
        while m:
            out[i, w] = m & low
            m >>= 64
            w += 1
    return out


def enumerate_ideals(problem: Problem, max_ideals: int = 200_000, *, linearize: bool = False,
                     deadline: float | None = None, progress: Progress | None = None) -> Ideals:
    """Every ideal of the graph (BFS from the empty set, adding a node once all its
    successors are in), or with ``linearize`` only the suffixes of
    ``problem.topological_order`` (n + 1 ideals: stages become contiguous segments
    of that order).

    Raises :class:`SolverError` naming the count when there are more than
    ``max_ideals`` ideals, and :class:`~piper.dp.limits.TimeUp` when ``solve_clock()`` passes
    ``deadline`` (checked before each ideal is extended and every 4096 new ideals;
    ``progress`` then says how many so far); an interrupt
    (:mod:`piper.core.stopping`) is checked as often.
    """
    n = problem.n
    if linearize:
        pos = problem.index
        order = [pos[v] for v in problem.topological_order]
        masks = [0]
        m = 0
        for p in reversed(order):
            m |= 1 << p
            masks.append(m)
        if len(masks) > max_ideals:
            _too_many(len(masks), max_ideals)
        return Ideals(n, tuple(masks), _to_words(masks, n), np.arange(n + 1, dtype=np.int64), True)

    succ = _succ_masks(problem)
    seen = {0: 0}
    masks = [0]
    frontier = [0]
    # level by level: all ideals of size s come before those of size s + 1
    while frontier:
        nxt = []
        for ideal in frontier:
            if past(deadline):  # also raises Interrupted after SIGINT / SIGTERM
                raise TimeUp()
            for v in range(n):
                bit = 1 << v
                if ideal & bit or succ[v] & ~ideal:
                    continue
                new = ideal | bit
                if new not in seen:
                    seen[new] = len(masks)
                    masks.append(new)
                    nxt.append(new)
                    if len(masks) > max_ideals:
                        _too_many(None, max_ideals)
                    if not len(masks) & 4095 and (deadline is not None or progress is not None):
                        if past(deadline):
                            raise TimeUp
                        if progress is not None:
                            progress.say(f"enumerating ideals: {len(masks):,} so far (max_ideals {max_ideals:,})")
        frontier = nxt
    sizes = np.array([bin(m).count("1") for m in masks], dtype=np.int64)
    return Ideals(n, tuple(masks), _to_words(masks, n), sizes, False)


def count_ideals(problem: Problem, limit: int = 200_000, progress: Progress | None = None) -> int | None:
    """Number of ideals (successor-closed node sets) of the graph, or None when there
    are more than ``limit`` (``progress`` says how many so far, every 2 s)."""
    try:
        return len(enumerate_ideals(problem, limit, progress=progress))
    except SolverError:
        return None


def _too_many(count: int | None, limit: int) -> None:
    have = f"{count} ideals" if count is not None else f"more than {limit} ideals"
    raise SolverError(
        f"the graph has {have} (successor-closed node sets), over the limit max_ideals={limit}; "
        f"raise it with --max-ideals (Options.max_ideals) if memory and time allow, "
        f"or use --linearize (stages = contiguous segments of one topological order)"
    )


@dataclass(frozen=True)
class IdealPairs:
    """All pairs (I, J) of ideals with J a proper subset of I, grouped by I.

    The sub-ideals of ideal ``i`` are ``sub[ptr[i]:ptr[i+1]]`` (ascending ids).
    """

    ptr: np.ndarray
    sub: np.ndarray

    @property
    def count(self) -> int:
        return int(self.ptr[-1])


@njit(cache=True)
def _is_subset(words: np.ndarray, j: int, i: int) -> bool:
    """Ideal j is contained in ideal i."""
    for w in range(words.shape[1]):
        if words[j, w] & ~words[i, w]:
            return False
    return True


@njit(cache=True)
def _count_subsets(words: np.ndarray, i0: int, i1: int, counts: np.ndarray) -> None:
    """counts[i] = the number of proper sub-ideals of ideal i, for i0 <= i < i1."""
    for i in range(i0, i1):
        c = 0
        for j in range(i):
            if _is_subset(words, j, i):
                c += 1
        counts[i] = c


@njit(cache=True)
def _fill_subsets(words: np.ndarray, ptr: np.ndarray, sub: np.ndarray, i0: int, i1: int) -> None:
    for i in range(i0, i1):
        k = ptr[i]
        for j in range(i):
            if _is_subset(words, j, i):
                sub[k] = j
                k += 1


#: the default cap on the ideal pairs of one DP (``params["max_ideal_pairs"]``, ``solve
#: --max-ideal-pairs``): their index alone takes 4 bytes each, the stage tables a multiple
DEFAULT_MAX_IDEAL_PAIRS = 100_000_000
#: subset tests per kernel call of :func:`ideal_pairs` between deadline / interrupt checks
_PAIR_TESTS_PER_CALL = 20_000_000


def _rows(n_ideals: int, deadline: float | None) -> Iterator[tuple[int, int]]:
    """Row ranges [i0, i1) of about :data:`_PAIR_TESTS_PER_CALL` subset tests each (row i
    makes i tests), checking the deadline and interrupts before each (TimeUp)."""
    i0 = 0
    while i0 < n_ideals:
        if past(deadline):
            raise TimeUp()
        # rows i0..i1 make about (i1^2 - i0^2) / 2 tests
        i1 = min(n_ideals, max(i0 + 1, int(math.isqrt(i0 * i0 + 2 * _PAIR_TESTS_PER_CALL))))
        yield i0, i1
        i0 = i1


def ideal_pairs(ideals: Ideals, *, deadline: float | None = None, max_pairs: int | None = None,
                progress: Progress | None = None) -> IdealPairs:
    """All nested pairs J < I (J a proper sub-ideal of I).

    Since ideals are numbered by size, a proper sub-ideal has a smaller number;
    the subset test runs on the ``uint64`` words in compiled code, in calls of about
    :data:`_PAIR_TESTS_PER_CALL` tests with :func:`piper.dp.limits.past` between them
    (:class:`~piper.dp.limits.TimeUp` once ``solve_clock()`` passes ``deadline``; an interrupt
    stops it there). The pairs are counted before they are stored: more than ``max_pairs``
    (None: no cap) raises :class:`SolverError` naming the count and ``--max-ideal-pairs``.
    """
    if ideals.linear:
        n1 = len(ideals)
        counts = np.arange(n1, dtype=np.int64)
        ptr = np.zeros(n1 + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        if max_pairs is not None and int(ptr[-1]) > max_pairs:
            _too_many_pairs(int(ptr[-1]), max_pairs)
        sub = np.concatenate([np.arange(i, dtype=np.int32) for i in range(n1)]) if n1 > 1 else np.zeros(0, np.int32)
        return IdealPairs(ptr, sub.astype(np.int32))
    n_ideals = len(ideals)
    if max_pairs is not None and n_ideals > _SAMPLE_ABOVE:
        estimate = _estimate_pairs(ideals.words)
        if estimate > _SURE_FACTOR * max_pairs:  # refused up front, before the O(ideals^2) count
            _too_many_pairs(estimate, max_pairs, estimated=True)
    counts = np.zeros(n_ideals, dtype=np.int64)
    for i0, i1 in _rows(n_ideals, deadline):
        _count_subsets(ideals.words, i0, i1, counts)
        if progress is not None and i1 < n_ideals:
            progress.say(f"counting ideal pairs: {i1:,}/{n_ideals:,} ideals")
    ptr = np.zeros(n_ideals + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    if max_pairs is not None and int(ptr[-1]) > max_pairs:
        _too_many_pairs(int(ptr[-1]), max_pairs)
    sub = np.empty(int(ptr[-1]), dtype=np.int32)
    for i0, i1 in _rows(n_ideals, deadline):
        _fill_subsets(ideals.words, ptr, sub, i0, i1)
    return IdealPairs(ptr, sub)


def pair_cap(params: Mapping[str, Any]) -> int:
    """The cap on ideal pairs a DP's ``options.params`` set (``max_ideal_pairs``)."""
    return int(params.get("max_ideal_pairs", DEFAULT_MAX_IDEAL_PAIRS))


#: ideal_pairs estimates the pairs from a sample above this many ideals
_SAMPLE_ABOVE = 20_000
#: ... and refuses without counting when the estimate is over this many times the cap
_SURE_FACTOR = 4
_SAMPLE = 512


@njit(cache=True)
def _sample_counts(words: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(rows.shape[0], dtype=np.int64)
    for r in range(rows.shape[0]):
        i = rows[r]
        c = 0
        for j in range(i):
            if _is_subset(words, j, i):
                c += 1
        out[r] = c
    return out


def _estimate_pairs(words: np.ndarray) -> int:
    """The number of ideal pairs, estimated from the sub-ideal counts of :data:`_SAMPLE` ideals
    drawn at random (seed 0: the same estimate every run); costs _SAMPLE x ideals subset tests."""
    n_ideals = words.shape[0]
    rows = np.random.default_rng(0).choice(n_ideals, size=min(_SAMPLE, n_ideals), replace=False).astype(np.int64)
    return int(_sample_counts(words, rows).mean() * n_ideals)


def _too_many_pairs(count: int, limit: int, estimated: bool = False) -> None:
    raise SolverError(
        f"the DP needs {'about ' if estimated else ''}{count:,} ideal pairs "
        f"({'estimated from a sample; ' if estimated else ''}nested successor-closed node sets; their index alone takes "
        f"{4 * count / 1e9:.1f} GB, the stage tables several times that), over the limit "
        f"max_ideal_pairs={limit:,}; raise it with --max-ideal-pairs (params['max_ideal_pairs']) if memory and "
        f"time allow, or use --linearize (n + 1 ideals)")
