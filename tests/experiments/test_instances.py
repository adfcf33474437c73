"""The seeded instance generators used by the benches."""

from __future__ import annotations

from baselines.brute import solve_brute
from experiments.lib.instances import bench_instance, random_problem, witness_memory
from piper import Options, Status


def test_witness_memory_makes_every_draw_feasible_and_memory_binding() -> None:
    """Tight raw draws are often infeasible; with the witness's memory every one with a
    witness is feasible (brute force), and halving that memory makes most infeasible."""
    raw_infeasible = witnessed = binding = 0
    for seed in range(40):
        raw = random_problem(seed, n=5, degrees=(1, 2, 4), memory_tightness=0.6, t1_missing=0.0)
        raw_infeasible += solve_brute(raw, Options()).status == Status.INFEASIBLE
        fixed = witness_memory(raw, seed)
        if fixed is None:
            continue
        witnessed += 1
        assert solve_brute(fixed, Options()).status == Status.OPTIMAL, seed
        half = fixed.with_cluster(memory=fixed.memory_per_device / 2)
        binding += solve_brute(half, Options()).status == Status.INFEASIBLE
    assert raw_infeasible >= 10  # the raw draws really were a problem
    assert witnessed >= 36
    assert binding >= witnessed // 2


def test_t1_missing_zero_keeps_t1_everywhere_and_default_stream_unchanged() -> None:
    p = random_problem(7, n=12, degrees=(1, 2, 4), t1_missing=0.0)
    assert all(1 in nd.tmpcs for nd in p.nodes)
    # the default keeps the old draws (t1_missing only changes a comparison)
    assert random_problem(7, n=12, degrees=(1, 2, 4)) == random_problem(7, n=12, degrees=(1, 2, 4), t1_missing=0.15)


def test_bench_instances_are_feasible() -> None:
    """Before the witness memory, 16-, 24- and 32-layer bench draws were mostly infeasible."""
    from piper.dp import solve_dp

    for n, shape, k in ((16, "chain", 4), (24, "chain", 8), (32, "chain", 16), (12, "branchy", 8)):
        p = bench_instance(n, shape, k)
        assert p.devices == k and p.microbatches == 2 * k and p.n == n
        assert solve_dp(p, Options()).status == Status.OPTIMAL, (n, shape, k)


def test_witness_memory_on_moe_instances_draws_again_past_rule_6() -> None:
    """An MoE layer's witness stage whose d t its e e_t does not divide broke rule 6 and raised
    (the certificate pass of 2026-12-05); the draw is now made again, and the witness fits."""
    from experiments.lib.instances import random_moe_problem

    found = 0
    for seed in range(40):
        fixed = witness_memory(random_moe_problem(8000 + seed), seed)
        if fixed is not None:
            found += 1
            assert solve_brute(fixed, Options()).plan is not None, seed
    assert found >= 30
