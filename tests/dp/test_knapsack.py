"""The per-stage knapsacks: the reference greedy's exact semantics, and the exact solver's optimality."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from piper.dp.knapsack import EXACT, GREEDY, exact_knapsack, greedy_knapsack, knapsack


def _flat(nodes: list[list[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[[(cost, mem), ...] per node] -> off, cost, mem."""
    off = np.zeros(len(nodes) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(x) for x in nodes])
    cost = np.array([c for x in nodes for c, _ in x], dtype=np.float64)
    mem = np.array([m for x in nodes for _, m in x], dtype=np.float64)
    return off, cost, mem


def _enumerate(off: np.ndarray, cost: np.ndarray, mem: np.ndarray, M: float) -> float:
    best = np.inf
    n = len(off) - 1
    for combo in itertools.product(*[range(off[i], off[i + 1]) for i in range(n)]):
        c = list(combo)
        if mem[c].sum() <= M:
            best = min(best, cost[c].sum())
    return best


def _choice(n: int) -> np.ndarray:
    return np.full(n, -1, dtype=np.int64)


def test_all_fastest_fits_takes_fastest_first_on_ties() -> None:
    off, cost, mem = _flat([[(1.0, 5.0), (1.0, 1.0)], [(2.0, 3.0), (3.0, 1.0)]])
    ch = _choice(2)
    assert greedy_knapsack(off, cost, mem, 8.0, ch) == 3.0
    assert list(ch) == [0, 2]  # node 0: first of the two equally fast options


def test_least_memory_does_not_fit_is_infeasible() -> None:
    off, cost, mem = _flat([[(1.0, 5.0), (2.0, 4.0)], [(1.0, 5.0), (2.0, 4.0)]])
    for solver in (greedy_knapsack, exact_knapsack):
        assert solver(off, cost, mem, 7.9, _choice(2)) == np.inf


def test_greedy_applies_swaps_by_ratio_and_may_overshoot() -> None:
    # need to shave 2 bytes; swaps: node0 saves 10 for +5 (ratio .5), node1 saves 2 for +2 (ratio 1)
    # greedy takes node0's swap first (overshooting by 8): cost 6 + 1; exact takes node1's: 1 + 3
    off, cost, mem = _flat([[(1.0, 12.0), (6.0, 2.0)], [(1.0, 10.0), (3.0, 8.0)]])
    ch = _choice(2)
    g = greedy_knapsack(off, cost, mem, 20.0, ch)
    assert g == 6.0 + 1.0 and list(ch) == [1, 2]
    e = exact_knapsack(off, cost, mem, 20.0, ch)
    assert e == 1.0 + 3.0 and list(ch) == [0, 3]


def test_greedy_ties_in_ratio_go_by_node_position() -> None:
    # two identical nodes, either swap suffices: the reference takes the first node's
    off, cost, mem = _flat([[(1.0, 10.0), (2.0, 5.0)], [(1.0, 10.0), (2.0, 5.0)]])
    ch = _choice(2)
    assert greedy_knapsack(off, cost, mem, 16.0, ch) == 3.0
    assert list(ch) == [1, 2]


def test_greedy_stops_once_shaved_and_later_swap_of_same_node_replaces_choice() -> None:
    # node 0 has three options; after swapping to option 1 (ratio 0.5) the memory
    # still does not fit; node 1's swap (ratio 1) is next; then node 0's option 2.
    off, cost, mem = _flat([[(0.0, 10.0), (1.0, 8.0), (4.0, 2.0)], [(0.0, 10.0), (3.0, 7.0)]])
    ch = _choice(2)
    # need 20 - 14 = 6: swaps sorted (0.5: n0->1 saves 2), (0.5: n0->2 saves 8), (1.0: n1 saves 3)
    # apply n0->1 (left 4), n0->2 replaces with saving 8 - 2 = 6 against option 1 (left -2): stop
    assert greedy_knapsack(off, cost, mem, 14.0, ch) == 4.0
    assert list(ch) == [2, 3]


def test_greedy_falls_back_to_least_memory_when_the_list_runs_out() -> None:
    # a later, worse-ratio swap of node 0 undoes a bigger saving: the list runs out unfit
    # need 8.5: n0->1 (ratio 1/8) leaves 0.5; n0->2 (ratio 1) replaces it, saving 2 - 7 = -5;
    # n1 (ratio 100) saves 0.5; the list ends 5 bytes over: take the least-memory choice
    off, cost, mem = _flat([[(0.0, 10.0), (1.0, 2.0), (3.0, 7.0)], [(0.0, 10.0), (50.0, 9.5)]])
    ch = _choice(2)
    val = greedy_knapsack(off, cost, mem, 11.5, ch)
    assert list(ch) == [1, 4] and val == 51.0
    assert mem[ch].sum() <= 11.5


@pytest.mark.parametrize("seed", range(4))
def test_exact_equals_enumeration_and_never_above_greedy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(1, 7))
        counts = rng.integers(1, 4, size=n)
        off = np.zeros(n + 1, dtype=np.int64)
        off[1:] = np.cumsum(counts)
        cost = rng.integers(0, 10, size=off[-1]).astype(float)
        mem = rng.integers(0, 10, size=off[-1]).astype(float)
        M = float(rng.integers(0, 45))
        ch = _choice(n)
        val = exact_knapsack(off, cost, mem, M, ch)
        assert val == _enumerate(off, cost, mem, M)
        if np.isfinite(val):
            assert mem[ch].sum() <= M and cost[ch].sum() == val
        g = greedy_knapsack(off, cost, mem, M, _choice(n))
        assert np.isfinite(g) == np.isfinite(val)
        if np.isfinite(val):
            assert g >= val
        assert knapsack(EXACT, off, cost, mem, M, ch) == val
        assert knapsack(GREEDY, off, cost, mem, M, ch) == g


def test_exact_on_a_large_stage_with_real_magnitudes() -> None:
    """177 layers, two options each (ResNet-sized): exact beats or ties greedy and fits."""
    rng = np.random.default_rng(7)
    n = 177
    off = np.arange(0, 2 * n + 1, 2, dtype=np.int64)
    cost = rng.random(2 * n)
    mem = rng.random(2 * n) * 5e7
    cost[1::2] = cost[0::2] * 1.3
    mem[1::2] = mem[0::2] * 0.3
    M = float(mem[0::2].sum() * 0.6)
    ch = _choice(n)
    e = exact_knapsack(off, cost, mem, M, ch)
    assert mem[ch].sum() <= M
    assert cost[ch].sum() == pytest.approx(e, rel=1e-12)
    assert e <= greedy_knapsack(off, cost, mem, M, _choice(n))
