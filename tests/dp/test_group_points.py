"""group_points (piper.dp.group_kernels): a group's curves for every count of one-layer chunks cut on
both sides in one call, the same numbers as one knapsack per count on the group's items laid out in
item order (ends, singles, cut before, cut after, middle layers), as piper.dp.groups laid them out
before the kernel; the uniform search's answers rest on these points."""

from __future__ import annotations

import numpy as np
import pytest

from piper.dp.group_kernels import group_points
from piper.dp.knapsack import EXACT, GREEDY, knapsack, total_of


def _reference(e_off, e_cost, e_tau, e_mem, e_shared, k_cost, k_tau, k_mem, k_shared, io, n_o, n_i, n_none, room,
               sync_free, M, t_max, mode):
    """One knapsack per (singles, count), in Python, over the flat items of each singles."""
    out = ([], [], [], [], [])
    all_shared = True
    n_e = len(e_off) - 1
    for singles in range(io + 1):
        least = singles + 2 * (io - singles) + n_o + n_i + n_none
        if least > room:
            continue
        roomy = (io - singles) + n_o + n_i + n_none > 0
        top = room if roomy else least
        if sync_free and singles > 0:
            top = least
        counts = (singles, io - singles + n_i, io - singles + n_o, n_none + top - least)
        shared = bool(e_shared) and bool(k_shared[3]) and all(bool(k_shared[r]) for r in range(3) if counts[r])
        all_shared = all_shared and shared
        blocks_c = [e_cost] + [k_cost[r] for r in range(4) for _ in range(counts[r])]
        blocks_t = [e_tau] + [k_tau[r] for r in range(4) for _ in range(counts[r])]
        blocks_m = [e_mem] + [k_mem[r] for r in range(4) for _ in range(counts[r])]
        sizes = list(np.diff(e_off)) + [k_cost.shape[1]] * sum(counts)
        off = np.zeros(len(sizes) + 1, dtype=np.int64)
        off[1:] = np.cumsum(sizes)
        cost, tau, mem = (np.ascontiguousarray(np.concatenate(b)) for b in (blocks_c, blocks_t, blocks_m))
        n_fixed = n_e + counts[0] + counts[1] + counts[2]
        for m in range(n_none, n_none + top - least + 1):
            ni = n_fixed + m
            ch = np.empty(max(1, ni), dtype=np.int64)
            val = knapsack(mode, off[: ni + 1].copy(), cost, mem, M, ch[:ni])
            if val == np.inf or val > t_max:
                break
            tau_val = total_of(ch[:ni].copy(), tau)
            low = tau_val
            if not shared:
                ch2 = np.empty(max(1, ni), dtype=np.int64)
                other = knapsack(EXACT, off[: ni + 1].copy(), tau, mem, M, ch2[:ni])
                low = min(low, other)
            for lst, x in zip(out, (least - n_none + m, val, tau_val, low, singles)):
                lst.append(x)
    return out, all_shared


def _instance(rng: np.random.Generator):
    n_e = int(rng.integers(0, 4))
    sizes = rng.integers(1, 4, size=n_e)
    e_off = np.zeros(n_e + 1, dtype=np.int64)
    e_off[1:] = np.cumsum(sizes)
    n = int(e_off[-1])
    q = int(rng.integers(1, 4))
    e_cost, e_tau = rng.uniform(0.1, 2.0, n), rng.uniform(0.1, 5.0, n)
    e_mem = rng.uniform(1.0, 4.0, n)
    k_cost, k_tau = rng.uniform(0.1, 2.0, (4, q)), rng.uniform(0.1, 5.0, (4, q))
    k_mem = np.tile(rng.uniform(0.5, 3.0, q), (4, 1))  # every kind of identical layer holds the same memory
    k_shared = rng.random(4) < 0.7
    io, n_o, n_i, n_none = (int(x) for x in rng.integers(0, 3, size=4))
    room = int(rng.integers(0, 12))
    return (e_off, e_cost, e_tau, e_mem, bool(rng.random() < 0.7), k_cost, k_tau, k_mem, k_shared, io, n_o, n_i,
            n_none, room, bool(rng.random() < 0.5), float(rng.uniform(6.0, 30.0)),
            float(np.inf if rng.random() < 0.5 else rng.uniform(2.0, 12.0)))


@pytest.mark.parametrize("mode", [EXACT, GREEDY])
def test_group_points_matches_one_knapsack_per_count(mode: int) -> None:
    rng = np.random.default_rng(31 + mode)
    checked = points = 0
    for _ in range(150):
        args = _instance(rng)
        c, k, tau, low, singles, shared = group_points(*args, mode, np.empty(0), np.empty(0), 1.0)
        (r_c, r_k, r_tau, r_low, r_s), r_shared = _reference(*args, mode)
        assert c.tolist() == r_c and singles.tolist() == r_s
        assert k.tolist() == r_k and tau.tolist() == r_tau and low.tolist() == r_low  # bit for bit
        assert bool(shared) == r_shared
        assert c.dtype == np.int64 and singles.dtype == np.int64 and k.dtype == np.float64
        checked += 1
        points += len(r_c)
    assert checked == 150 and points > 300  # the instances have points to compare
