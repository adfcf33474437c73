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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from piper.core.errors import SolverError
from piper.core.problem import Problem
from piper.dp.compile_clock import solve_clock
from piper.dp.limits import Progress, TimeUp

__all__ = ["Ideals", "enumerate_ideals", "count_ideals", "ideal_pairs", "IdealPairs"]


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
    ``deadline`` (checked every 4096 ideals; ``progress`` then says how many so far).
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
                        if deadline is not None and solve_clock() > deadline:
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
def _count_subsets(words: np.ndarray) -> np.ndarray:
    n_ideals = words.shape[0]
    counts = np.zeros(n_ideals, dtype=np.int64)
    for i in range(n_ideals):
        c = 0
        for j in range(i):
            if _is_subset(words, j, i):
                c += 1
        counts[i] = c
    return counts


@njit(cache=True)
def _fill_subsets(words: np.ndarray, ptr: np.ndarray, sub: np.ndarray) -> None:
    for i in range(words.shape[0]):
        k = ptr[i]
        for j in range(i):
            if _is_subset(words, j, i):
                sub[k] = j
                k += 1


def ideal_pairs(ideals: Ideals) -> IdealPairs:
    """All nested pairs J < I (J a proper sub-ideal of I).

    Since ideals are numbered by size, a proper sub-ideal has a smaller number;
    the subset test runs on the ``uint64`` words in compiled code.
    """
    if ideals.linear:
        n1 = len(ideals)
        counts = np.arange(n1, dtype=np.int64)
        ptr = np.zeros(n1 + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        sub = np.concatenate([np.arange(i, dtype=np.int32) for i in range(n1)]) if n1 > 1 else np.zeros(0, np.int32)
        return IdealPairs(ptr, sub.astype(np.int32))
    counts = _count_subsets(ideals.words)
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    sub = np.empty(int(ptr[-1]), dtype=np.int32)
    _fill_subsets(ideals.words, ptr, sub)
    return IdealPairs(ptr, sub)
