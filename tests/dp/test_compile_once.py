"""Each DP kernel compiles once (the suite's time on CI: a fresh checkout compiles every kernel).

Numba compiles a kernel again for every new tuple of argument types, so the runs' arrays must
have one numba type whatever the workload (version 1, sharded state, a faster link inside a node,
expert parallelism), and kernels must pass int64 scalars rather than int literals to their
callees (piper/dp/stage.py).  The fast test checks the first; the slow one compiles every
kernel in a fresh process with an empty cache (``python -m piper warmup``'s instances) and
counts the compilations of each kernel.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numba
import pytest

from experiments.lib.instances import random_moe_problem, random_problem
from piper.core.options import candidates
from piper.dp.arrays import run_arrays
from tests.commands import ROOT
from tests.helpers import random_cluster_cases, with_random_cluster_keys

#: kernels that compile once per dtype of their arrays (ensure_room: int64, float64 and int8
#: arrays; _grow5: five int64 arrays, or two int64 and three float64 arrays)
SEVERAL = {"piper.dp.knapsack.ensure_room": 3, "piper.dp.bt_tables._grow5": 2}


def test_every_run_has_one_numba_type() -> None:
    problems = [random_problem(i) for i in range(4)] + random_cluster_cases(40, seed=11)
    problems += [random_moe_problem(i) for i in range(4)]
    problems += [with_random_cluster_keys(random_moe_problem(10 + i), random.Random(i)) for i in range(4)]
    types = set()
    kinds = set()
    for p in problems:
        layers = run_arrays(p, candidates(p)).layers
        types.add(numba.typeof(layers))
        kinds.add((layers.rb.size > 0, layers.sq.size > 0, bool(layers.xq.any())))
    # the cases reach both forms of each optional array, and expert terms
    assert {rb for rb, _, _ in kinds} == {False, True}
    assert {sq for _, sq, _ in kinds} == {False, True}
    assert any(x for _, _, x in kinds)
    assert len(types) == 1, types


def test_version_1_runs_take_the_version_1_loops() -> None:
    # without the cluster keys B_resync == B_edge and no state is sharded: both arrays are
    # empty, which sends the kernels to the reference's arithmetic (piper.dp.stage)
    for seed in range(4):
        p = random_problem(seed)
        assert not p.active_features()
        layers = run_arrays(p, candidates(p)).layers
        assert layers.rb.shape == (0, 0) and layers.sq.shape == (0, 0)


_COUNT = """
import collections, json
from numba.core import event
counts = collections.Counter()
class Count(event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        counts[f"{f.__module__}.{f.__qualname__}"] += 1
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
from piper.dp.warmup import compile_kernels
compile_kernels()
print(json.dumps({k: v for k, v in counts.items() if k.startswith("piper.")}))
"""


@pytest.mark.slow
def test_a_cold_warmup_compiles_each_kernel_once(tmp_path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _COUNT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800, check=True)
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(counts) >= 50, counts  # the warm-up reaches the kernels
    over = {name: n for name, n in counts.items() if n > SEVERAL.get(name, 1)}
    assert over == {}, over
