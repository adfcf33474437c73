"""CP-SAT's memory scaling stays within 64-bit integers: bytes of 9e18 and more (an absurd but
loadable workload, tests/data/cpsat_huge_bytes.json, M = 6.35e19) raised a TypeError out of OR-Tools
(the second certificate pass of 2026-12-05); such values now take the rounded scaling, a
restriction, so CP-SAT answers "feasible" at most, checked against the brute force."""

from __future__ import annotations

from pathlib import Path

from baselines.cpsat.model import EXACT_MEMORY_MAX, memory_scaling
from piper import Options, Status, load_problem, solve

DATA = Path(__file__).resolve().parents[1] / "data"


def test_exact_scaling_of_ordinary_bytes_is_kept() -> None:
    ints, limit, exact = memory_scaling([3e9, 1.5e9, 0.25], 8e10)
    assert exact and limit == 8e10 * 4 // 1 and ints == [12_000_000_000, 6_000_000_000, 1]


def test_huge_bytes_take_the_rounded_scaling_within_64_bits() -> None:
    ints, limit, exact = memory_scaling([9.3e18, 1e22, 4e18], 6.35e19)
    assert not exact and limit == 2**30
    assert all(0 <= i <= 2**31 for i in ints) and max(ints) == 2**31  # 1e22 > M: capped, still over
    units = 9.3e18 * 2**30 / 6.35e19  # 157,256,676.x units of M / 2^30
    assert units <= ints[0] <= units + 1  # rounded up: a restriction


def test_a_value_just_above_the_exact_range_is_not_called_exact() -> None:
    _, _, exact = memory_scaling([float(EXACT_MEMORY_MAX + 1)], float(2 * EXACT_MEMORY_MAX))
    assert not exact


def test_cpsat_on_huge_bytes_answers_without_a_crash_and_within_the_brute_force() -> None:
    problem = load_problem(DATA / "cpsat_huge_bytes.json")
    options = Options(threads=1, time_limit_s=30.0, progress=False)
    best = solve(problem, options, solver="brute")
    res = solve(problem, options, solver="cpsat")
    assert best.status == Status.OPTIMAL and res.status in (Status.OPTIMAL, Status.FEASIBLE, Status.UNKNOWN)
    if res.plan is not None:
        assert res.value >= best.value * (1 - 1e-12)
    if res.status == Status.OPTIMAL:
        assert abs(res.value - best.value) <= res.tolerance + 1e-9 * best.value
    if res.bound is not None:
        assert res.bound <= best.value * (1 + 1e-9)
