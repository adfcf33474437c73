"""The DP at a large budget S = min(N, k): its kernels' work grows with S, and one call at
S = 10^6 ran for minutes past the time limit and past SIGTERM (the kernels held the GIL, so the
signal watcher could not run). Now the long kernels poll a stop flag (`piper.dp.limits.run_stoppable`)
and run without the GIL, and a choice's y-run is found by galloping (`piper.dp.stage.fits_through`)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from piper import Options, load_problem, solve
from piper.dp.compile_clock import solve_clock
from piper.dp.limits import TimeUp, run_stoppable
from tests.commands import ROOT

WORKLOAD = ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json"


def _spin(stop: np.ndarray) -> str:
    """A stand-in kernel: runs until its flag is set."""
    while not stop[0]:
        time.sleep(0.001)
    return "stopped"


def test_run_stoppable_returns_or_raises_at_the_deadline():
    assert run_stoppable(lambda stop: int(stop[0]) + 7, solve_clock() + 60.0) == 7
    assert run_stoppable(lambda stop: 7, None) == 7
    t0 = time.perf_counter()
    with pytest.raises(TimeUp):
        run_stoppable(_spin, solve_clock() + 0.2)
    assert time.perf_counter() - t0 < 30.0  # the flag was set: without it the spin never ends
    assert threading.active_count() < 50  # the timers are cancelled or done, not piling up


def test_a_million_devices_and_microbatches_end_at_the_time_limit():
    """S = 10^6: before, the first threshold test alone took minutes; the limit was not seen."""
    problem = load_problem(WORKLOAD).with_cluster(devices=10**6, microbatches=10**6)
    t0 = time.perf_counter()
    result = solve(problem, Options(time_limit_s=1.0), "dp")
    assert time.perf_counter() - t0 < 60.0
    assert result.status.value in ("unknown", "feasible") and "time limit" in result.message


@pytest.mark.parametrize("memory_gib", [2, 8, 64])
def test_galloping_runs_give_the_dense_table_engines_optimum(memory_gib):
    """The threshold engine's tables find each choice's y-run by galloping; the table engine fills
    every y one by one (piper/dp/table_kernels.py). Both exact: the same optimum, at a budget where
    the runs are long (k = N = 400; the dense table is O(k S)) and memories where they end early."""
    problem = load_problem(WORKLOAD).with_cluster(devices=400, microbatches=400, memory=memory_gib * 2**30)
    fast = solve(problem, Options(), "dp")
    dense = solve(problem, Options(params={"engine": "table"}), "dp")
    assert fast.stats["engine"] == "threshold" and dense.stats["engine"] == "table"
    assert fast.status.value == dense.status.value
    assert fast.tps == pytest.approx(dense.tps, rel=1e-12) if dense.tps is not None else fast.tps is None


@pytest.mark.parametrize("mode_name", ["exact", "greedy"])
def test_every_table_segment_is_the_knapsack_at_its_ends(mode_name):
    """Each segment [y_lo, y_hi] of the threshold engine's tables holds one choice's value: the
    stage's knapsack at y_lo and at y_hi is that value, and at y_hi + 1 (within ceil(S / d)) it is
    not (memory binds there, or another choice wins): a y-run found by galloping that ran past the
    choice's last fitting y fails here. A transformer of 8 layers with 4,096 tokens on 2.5-4 GB
    devices, where the micro-batches in flight decide what fits."""
    from piper import problem_from_dict
    from piper.core.options import candidates
    from piper.dp.arrays import limits_of, run_arrays
    from piper.dp.ideals import enumerate_ideals, ideal_pairs
    from piper.dp.knapsack import EXACT, GREEDY
    from piper.dp.stage import stage_choice
    from piper.dp.threshold import build_tables
    from piper.frontend.hardware import hardware
    from piper.frontend.presets import PRESETS
    from piper.frontend.workload import TrainingSetup, build_workload

    mode = EXACT if mode_name == "exact" else GREEDY
    cfg = PRESETS["megatron-1.7b"].with_changes(layers=8, seq_length=4096)
    base = problem_from_dict(build_workload(cfg, hardware("a100-80gb"),
                                            TrainingSetup(nodes=1, global_batch=64, distributed_optimizer=False)))
    checked = ended = 0
    for memory in (2.5e9, 4e9):
        problem = base.with_cluster(memory=memory)
        options = Options(knapsack=mode_name)
        run = run_arrays(problem, candidates(problem, options), problem.bandwidth)
        ideals = enumerate_ideals(problem, options.max_ideals)
        tables = build_tables(problem, run, ideals, ideal_pairs(ideals), mode)
        lay, lim, arr = run.layers, limits_of(problem), tables.arrays
        S = min(problem.microbatches, problem.devices)
        ts = list(lay.ts)
        for e in range(tables.entries):
            I, J = int(arr.entries.ideal[e]), int(arr.entries.sub[e])
            t, d = int(arr.entries.t[e]), int(arr.entries.d[e])
            for q in range(int(arr.entries.first_seg[e]), int(arr.seg_stop[e])):
                lo, hi, value = int(arr.segments.y_lo[q]), int(arr.segments.y_hi[q]), float(arr.segments.value[q])
                for y in {lo, hi}:
                    # the d-invariant path prices its d = 1 choice at d: the same value to an ulp
                    assert stage_choice(lay, lim, ideals.words, I, J, ts.index(t), d, y, mode)[2] == \
                        pytest.approx(value, rel=1e-12)
                    checked += 1
                if hi < (S + d - 1) // d:
                    after = stage_choice(lay, lim, ideals.words, I, J, ts.index(t), d, hi + 1, mode)[2]
                    assert after != pytest.approx(value, rel=1e-12)
                    ended += 1
    assert checked > 100 and ended > 10
