"""Named instance suites for ``python -m experiments.compare``.

A suite is a deterministic list of :class:`Instance` (seeded: the same names and
the same problems on every machine). Suites:

* ``tiny``: random DAGs with 3-7 layers (chains with skip edges and branchy DAGs),
  k <= 6, memory often binding; every exact solver, brute force included, proves these.
* ``small``: random DAGs with 8-10 layers, k = 4, N = 8, t in {1, 2, 4}.
* ``paper-slices``: the first layers of BERT-32, GNMT and ResNet-50
  (``experiments/workloads``), on a small cluster whose memory binds.
* ``infeasible``: instances with no plan, each provably so (see the builders).
* ``medium``: larger random DAGs (12-16 layers, k = 8, N = 16); exact solvers hit
  the time limit on some. Not in the default suite.
* ``random:COUNT[:FIRST]``: ``random_problem(seed)`` for COUNT seeds from FIRST
  (e.g. ``random:320``, the 320 seeds the exact models were first cross-checked on).
* ``real-magnitudes``: issue 18's reproducer and operator-like graphs with real
  magnitudes; ``real-magnitudes:COUNT[:FIRST[:MAXN]]`` for more (``real_magnitude_suite``).
  COUNT, over all the suites of one run, is at most :data:`MAX_SUITE_INSTANCES` (every instance
  is built before the first solve).
* ``models``: tiny transformers built by the model front end (``piper.frontend``).
* ``cluster``: tiny DAGs with version-2 cluster keys (nodes of G devices, sharded
  optimizer state, both) and with uniform plans.
* ``moe``: tiny random DAGs with MoE layers (expert parallelism, docs/problem.md §11): TPS and
  batch time, free and uniform plans, a few with interleaved plans.
* ``identical-chains``: chains of identical layers (1 head, 3-5 identical, 2 tail layers)
  under TPS and the batch time, free and uniform: solver ``aggregate`` against the others.
* ``iteration``: front-end and random instances with the iteration keys (docs/problem.md §10).
* ``default``: what ``python -m experiments.compare`` runs with no arguments:
  tiny + small + paper-slices + infeasible + 8 of cluster + 2 of models + 4 of schedules + 3 of
  identical-chains + 4 of iteration, sized to finish well within 3 minutes
  on 2 cores with every solver.

A slice (:func:`slice_problem`, the one slicing function of the project) is the induced
subgraph on a prefix of the topological order, with the ``syncTimeFw``/``syncTimeBw`` maps
restricted to the kept neighbours, so it is again a valid :class:`~piper.core.problem.Problem`.

The paper's workloads (:func:`paper_workload`, BERT grown by layer insertion) and the one
table of the paper's (k, memory) pairs (:data:`PAPER_PAIRS`) live here too, for
``experiments.paper`` and ``experiments.bench``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.lib.instances import (
    identical_chain_problem,
    operator_graph_problem,
    random_moe_problem,
    random_problem,
    with_iteration_keys,
    witness_memory,
)
from piper.core.problem import Problem, problem_to_dict
from piper.io.bert_layers import insert_bert_layers
from piper.io.workload import load_problem, problem_from_dict

__all__ = [
    "Instance",
    "SUITES",
    "WORKLOADS_DIR",
    "suite_names",
    "build_suite",
    "is_suite",
    "suite_count",
    "MAX_SUITE_INSTANCES",
    "random_suite",
    "slice_problem",
    "binding_memory",
    "paper_workload",
    "PAPER_FILES",
    "PAPER_BANDWIDTH",
    "PAPER_PAIRS",
    "GNMT_PAIRS",
    "RESNET_PAIRS",
    "problem_name",
]

WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads"
PAPER_FILES = {"bert": "bert32a100.json", "gnmt": "gnmt.json", "resnet": "resnet.json"}

GIB = 2**30
#: the paper's bandwidth for its GNMT and ResNet tables and Fig. 1: 25 GiB/s
PAPER_BANDWIDTH = 25 * GIB
#: the (devices k, memory per device in GiB) pairs of the paper's GNMT table
GNMT_PAIRS: tuple[tuple[int, float], ...] = (
    (2, 2.5), (2, 3.5), (4, 1.2), (4, 2.5), (8, 0.6), (8, 1.2), (8, 2.4), (16, 0.3), (16, 0.6), (16, 1.2),
    (32, 0.3), (32, 0.8), (64, 0.3),
)
#: the (devices k, memory per device in GiB) pairs of the paper's ResNet-50 table
RESNET_PAIRS: tuple[tuple[int, float], ...] = (
    (8, 4), (8, 8), (8, 16), (16, 1.5), (16, 2), (16, 4), (16, 8), (16, 16), (32, 1.5), (32, 2), (32, 4), (32, 8),
    (32, 16), (64, 1), (64, 1.5), (64, 2), (64, 4), (64, 8), (64, 16), (128, 1), (128, 1.5), (128, 2), (128, 4),
    (128, 8), (128, 16),
)
#: the one table of the paper's (k, memory GiB) pairs, by workload
PAPER_PAIRS: dict[str, tuple[tuple[int, float], ...]] = {"gnmt": GNMT_PAIRS, "resnet": RESNET_PAIRS}


@dataclass(frozen=True)
class Instance:
    """One problem to compare solvers on."""

    name: str
    problem: Problem
    #: the suite it came from ("file" for command-line workloads)
    suite: str
    #: what the instance is for, e.g. "provably infeasible: ..."
    note: str = ""
    #: solve with ``Options(uniform=True)``: every stage the same (d, t)
    uniform: bool = False
    #: the objective to minimize (``Options.objective``; None: the run's, ``--objective``)
    objective: str | None = None
    #: ``Options.max_virtual_stages`` (None: the run's; >= 2 allows interleaved plans)
    max_virtual_stages: int | None = None


# ---------------------------------------------------------------------------------
# slicing and cluster sizing
# ---------------------------------------------------------------------------------


def problem_name(problem: Problem, default: str = "problem") -> str:
    name = problem.extra.get("name")
    return name if isinstance(name, str) and name else default


def slice_problem(problem: Problem, layers: int, name: str | None = None) -> Problem:
    """The induced subgraph on the first ``layers`` nodes of the topological order.

    Edges leaving the kept set are dropped, and every TMPC's sync maps are
    restricted to the kept neighbours, so the result is a valid Problem. The
    cluster numbers are kept. ``layers`` >= the node count returns all of it.
    """
    if layers < 1:
        raise ValueError(f"a slice needs at least one layer, got {layers}")
    keep = set(problem.topological_order[:layers])
    raw = problem_to_dict(problem)
    raw["nodes"] = [_slice_node(nd, keep) for nd in raw["nodes"] if nd["id"] in keep]
    raw["edges"] = [e for e in raw["edges"] if e["sourceId"] in keep and e["destId"] in keep]
    if name is not None:
        raw["name"] = name
    return problem_from_dict(raw)


def _slice_node(node: dict[str, Any], keep: set[int]) -> dict[str, Any]:
    def restrict(sync: dict[str, float]) -> dict[str, float]:
        return {key: val for key, val in sync.items() if int(key) in keep}

    tmpcs = {
        t: [{**c, "syncTimeFw": restrict(c["syncTimeFw"]), "syncTimeBw": restrict(c["syncTimeBw"])} for c in lst]
        for t, lst in node["TMPCs"].items()
    }
    return {**node, "TMPCs": tmpcs}


def _min_node_memory(problem: Problem) -> dict[int, float]:
    """node id -> the least memory it can take on a device (any t, any TMPC, y = 1)."""
    return {nd.id: min(c.memory_a + c.memory_b for lst in nd.tmpcs.values() for c in lst) for nd in problem.nodes}


def _vanilla_memory(problem: Problem, y: int) -> float:
    """Memory of the whole graph on one device at ``y`` microbatches in flight, with
    each layer's first TMPC at its smallest degree (the fast, memory-hungry choice)."""
    total = 0.0
    for nd in problem.nodes:
        c = nd.tmpcs[min(nd.tmpcs)][0]
        total += c.memory_a * y + c.memory_b
    return total


def binding_memory(problem: Problem, fraction: float) -> float:
    """A per-device memory between the largest single layer's minimum (below it no
    plan exists) and the whole graph on one device with vanilla TMPCs and
    y = min(N, k) in flight (above it memory rarely matters): lo + fraction*(hi - lo),
    rounded up to a whole MiB when the numbers are that large."""
    lo = max(_min_node_memory(problem).values())
    hi = _vanilla_memory(problem, problem.max_stage_sum_d)
    mem = lo + fraction * max(hi - lo, 0.0)
    unit = 2.0**20 if lo >= 2**24 else 1.0
    return max(math.ceil(mem / unit) * unit, lo)


def paper_workload(key: str, transformer_layers: int | None = None) -> Problem:
    """One of the paper's workloads by short name: bert, gnmt or resnet; BERT grown to
    ``transformer_layers`` by layer insertion (:func:`piper.core.problem.insert_bert_layers`)."""
    if key not in PAPER_FILES:
        raise ValueError(f"unknown paper workload {key!r}; known: {', '.join(PAPER_FILES)}")
    problem = load_problem(WORKLOADS_DIR / PAPER_FILES[key])
    if transformer_layers is not None and transformer_layers != 32:
        if key != "bert":
            raise ValueError("only BERT can be grown")
        problem = insert_bert_layers(problem, transformer_layers)
    return problem


def _paper_slice(key: str, layers: int, *, devices: int, microbatches: int, fraction: float) -> Instance:
    name = f"{key}[:{layers}]-k{devices}"
    sliced = slice_problem(paper_workload(key), layers, name=name)
    problem = sliced.with_cluster(devices=devices, microbatches=microbatches)
    problem = problem.with_cluster(memory=binding_memory(problem, fraction))
    return Instance(name, problem, "paper-slices", f"first {layers} layers of {PAPER_FILES[key]}, memory binds")


# ---------------------------------------------------------------------------------
# suites
# ---------------------------------------------------------------------------------


def _random(suite: str, seed: int, **kwargs: Any) -> Instance:
    problem = random_problem(seed, **kwargs)
    return Instance(problem_name(problem, f"random-seed{seed}"), problem, suite)


def tiny_suite() -> list[Instance]:
    """random_problem seeds 0..11: n = 3..7, both shapes, k in 1..6, N in {1,2,4,6}
    (seeds 4 and 9 use profiler-like magnitudes)."""
    return [_random("tiny", seed) for seed in range(12)]


def small_suite() -> list[Instance]:
    out = []
    for i, (n, shape) in enumerate([(8, "chain"), (8, "branchy"), (10, "chain"), (10, "branchy")]):
        seed = 500 + i
        out.append(_random("small", seed, n=n, shape=shape, devices=4, microbatches=8, degrees=(1, 2, 4)))
    return out


def medium_suite() -> list[Instance]:
    """Feasible draws (seeds picked with CP-SAT): 902 and 938 are proven within seconds,
    910 and 924 are hard (CP-SAT had only an incumbent after 5 s)."""
    out = []
    for seed, n, shape in [(902, 12, "chain"), (910, 12, "branchy"), (924, 16, "chain"), (938, 16, "branchy")]:
        out.append(_random("medium", seed, n=n, shape=shape, devices=8, microbatches=16, degrees=(1, 2, 4)))
    return out


def paper_slices_suite() -> list[Instance]:
    """Fractions chosen (with the brute force / exact DP) so that the optimum with this
    memory is worse than with unlimited memory, i.e. memory binds."""
    return [
        _paper_slice("bert", 6, devices=4, microbatches=8, fraction=0.3),
        _paper_slice("gnmt", 8, devices=4, microbatches=8, fraction=0.3),
        _paper_slice("resnet", 8, devices=4, microbatches=8, fraction=0.1),
        _paper_slice("bert", 8, devices=4, microbatches=8, fraction=0.2),
        _paper_slice("gnmt", 12, devices=4, microbatches=8, fraction=0.3),
    ]


def _below_largest_layer(instance: Instance) -> Instance:
    """Memory just below the largest layer's least memory: that layer fits nowhere."""
    problem = instance.problem
    lo = max(_min_node_memory(problem).values())
    problem = problem.with_cluster(memory=lo * (1 - 1e-3))
    note = "provably infeasible: the largest layer does not fit on a device even alone"
    return Instance(f"{instance.name}-oom", problem, "infeasible", note)


def _too_few_devices(n: int = 4) -> Instance:
    """A chain of n identical layers; each fits alone but no two fit together, so
    every stage holds one layer and n stages need n > k = n-1 devices."""
    nodes = []
    for v in range(n):
        preds = [v - 1] if v > 0 else []
        succs = [v + 1] if v < n - 1 else []
        tmpcs = [
            {"id": "vanilla", "timePerSample": 3.0, "parameterSize": 2.0, "memoryUsageA": 1.0, "memoryUsageB": 1.0},
            {"id": "activation recomp", "timePerSample": 4.0, "parameterSize": 2.0, "memoryUsageA": 0.0, "memoryUsageB": 1.6},
        ]
        for c in tmpcs:
            c["syncTimeFw"] = {str(u): 0.0 for u in preds}
            c["syncTimeBw"] = {str(x): 0.0 for x in succs}
        nodes.append({"id": v, "name": f"layer{v}", "TMPCs": {"1": tmpcs}})
    raw = {
        "name": f"chain{n}-too-few-devices",
        "maxDevices": n - 1,
        "maxMemoryPerDevice": 3.0,
        "mbsInBatch": 1,
        "bandwidth": 8.0,
        "nodes": nodes,
        "edges": [{"sourceId": v, "destId": v + 1, "communicationCost": 1.0} for v in range(n - 1)],
    }
    note = "provably infeasible: each layer needs its own stage (memory) and there are fewer devices than layers"
    return Instance(raw["name"], problem_from_dict(raw), "infeasible", note)


def infeasible_suite() -> list[Instance]:
    return [
        _below_largest_layer(_random("infeasible", 7, n=6, shape="branchy")),
        _below_largest_layer(_paper_slice("bert", 5, devices=2, microbatches=4, fraction=0.3)),
        _too_few_devices(4),
    ]


#: the certificate reproducer of issue 18 (experiments/workloads/README.md)
REPRODUCER = "bert-op-slice-n10-k8.json"


def real_magnitude_suite(count: int = 11, first_seed: int = 0, max_layers: int = 12) -> list[Instance]:
    """``real-magnitudes[:COUNT[:FIRST[:MAXN]]]``: operator-like graphs with the
    magnitudes of real profiles (times 1e-5..1 s, bytes up to 1e10, 1e10 B/s, memory that
    binds; :func:`~experiments.lib.instances.operator_graph_problem`), seeds FIRST.. with at
    most MAXN layers (6..MAXN, k in {2, 4, 8}); the plain name adds the reproducer of a
    wrong MILP certificate (``experiments/workloads/bert-op-slice-n10-k8.json``)."""
    out = []
    suite = f"real-magnitudes:{count}:{first_seed}:{max_layers}"
    for seed in range(first_seed, first_seed + count):
        rng_n = 6 + (seed * 7919) % (max_layers - 5)
        problem = operator_graph_problem(seed, n=rng_n)
        out.append(Instance(problem_name(problem, f"realmag-seed{seed}"), problem, suite,
                            "operator-like graph, real magnitudes, memory binds"))
    return out


def _real_magnitudes_named() -> list[Instance]:
    repro = load_problem(WORKLOADS_DIR / REPRODUCER)
    note = "issue 18's reproducer: CBC certified a worse plan as optimal"
    return [Instance("bert-op-slice-n10-k8", repro, "real-magnitudes", note), *real_magnitude_suite()]


def cluster_variant(problem: Problem, seed: int, *, nodes: bool = True, sharded: bool = True) -> Problem:
    """``problem`` with version-2 cluster keys (docs/problem.md §2), drawn from ``seed``:
    with ``nodes``, G in {2, 4, 8} (below k when k allows), B_in = B x {4..20} and f in
    {2, 4}; with ``sharded``, about 60% of the TMPCs get a sharded state s of 1/16..8/16 of
    the memory limit (optimizer state split over the stage's d replicas)."""
    import random

    rng = random.Random(7919 * seed + 3)
    raw = problem_to_dict(problem)
    if nodes:
        k = int(raw["maxDevices"])
        below = [g for g in (2, 4, 8) if g < k]
        raw["devicesPerNode"] = rng.choice(below or [2, 4, 8])
        raw["intraNodeBandwidth"] = raw["bandwidth"] * rng.randint(4, 20)
        raw["allReduceFactor"] = rng.choice((2, 4))
    if sharded:
        m = raw["maxMemoryPerDevice"]
        for nd in raw["nodes"]:
            for lst in nd["TMPCs"].values():
                for c in lst:
                    if rng.random() < 0.6:
                        c["memoryUsageShardedB"] = float(rng.randint(1, 8)) * m / 16
    raw["name"] = f"{raw.get('name', 'instance')}-{'nodes' if nodes else ''}{'+' if nodes and sharded else ''}{'sharded' if sharded else ''}"
    return problem_from_dict(raw)


def cluster_suite(count: int = 4, first_seed: int = 40) -> list[Instance]:
    """Random tiny DAGs (``random_problem``) in three version-2 families: nodes of G devices
    with a faster intra-node link, sharded optimizer state, and both; plus uniform plans
    (every stage the same (d, t)) on the version-1 instance."""
    out = []
    for seed in range(first_seed, first_seed + count):
        base = random_problem(seed, shape=("chain", "branchy")[seed % 2], devices=4 + seed % 5)
        base = witness_memory(base, seed) or base
        for nodes, sharded in ((True, False), (False, True), (True, True)):
            p = cluster_variant(base, seed, nodes=nodes, sharded=sharded)
            p = witness_memory(p, seed) or p  # feasible by construction, memory binds
            out.append(Instance(problem_name(p), p, "cluster", "version-2 keys (docs/problem.md §2), memory binds"))
        out.append(Instance(f"{problem_name(base)}-uniform", base, "cluster", "uniform plans", uniform=True))
    return out


#: tiny transformers for the ``models`` suite: (layers, hidden, heads, kv heads, ffn kind,
#: nodes, devices per node, memory per device in bytes)
MODEL_CASES: tuple[tuple[int, int, int, int, str, int, int, float], ...] = (
    (2, 1024, 8, 8, "gelu", 1, 8, 2e9),
    (3, 2048, 16, 16, "gelu", 2, 4, 2e9),
    (2, 1024, 8, 2, "swiglu", 1, 8, 1.5e9),
    (4, 1024, 8, 8, "gelu", 2, 8, 1.2e9),
    (3, 1536, 12, 4, "swiglu", 2, 4, 2e9),
    (2, 2048, 16, 16, "gelu", 1, 4, 3e9),
)


def models_suite(count: int = len(MODEL_CASES)) -> list[Instance]:
    """Workloads of the model front end (``piper.frontend``) for tiny transformers: 2-4
    layers (GELU, and SwiGLU with grouped-query attention), 1-2 nodes, up to 16 devices,
    small memory limits (1.2-3 GB), every version-2 key, six TMPCs per layer and degree."""
    from piper.frontend.config import TransformerConfig
    from piper.frontend.hardware import hardware
    from piper.frontend.workload import TrainingSetup, build_workload

    out = []
    for layers, hidden, heads, kv, ffn, nodes, per_node, memory in MODEL_CASES[:count]:
        cfg = TransformerConfig(name=f"toy-l{layers}-h{hidden}-{ffn}", layers=layers, hidden_size=hidden,
                                attention_heads=heads, kv_heads=kv, ffn_hidden_size=4 * hidden if ffn == "gelu" else 3 * hidden,
                                vocab_size=32000, seq_length=2048, ffn_kind=ffn)
        hw = hardware("a100-80gb", None, devices_per_node=per_node, memory_bytes=memory)
        problem = problem_from_dict(build_workload(cfg, hw, TrainingSetup(nodes=nodes, global_batch=16)))
        name = f"{cfg.name}-{nodes}x{per_node}"
        out.append(Instance(name, problem, "models", "model front end workload (piper.frontend)"))
    return out


def frontier_models_suite() -> list[Instance]:
    """Front-end workloads of issue 31's two layouts, tiny enough for every exact solver: a 2-layer
    mixture-of-experts transformer (4 experts, top-2; one workload per expert-parallel size, as
    ``plan`` builds them), a 2-layer transformer at sequence 8,192 with context-parallel size 2
    (the degree keys are t x c, docs/problem.md §11), and the MoE transformer at sequence 8,192 with
    both (c = 2, e = 2: rule 6 over the width), at c = 2 an MLA transformer and one with a
    sliding-window layer, and at c = 4 the dense one with the all-gather and with a2a+p2p, one node
    of 8 devices, memory that binds."""
    from dataclasses import replace as _replace

    from piper.frontend.config import TransformerConfig
    from piper.frontend.hardware import hardware
    from piper.frontend.moe import MLAConfig, MoEConfig
    from piper.frontend.workload import TrainingSetup, build_workload

    hw = hardware("h100-sxm-80gb", None, devices_per_node=8, memory_bytes=3e9)
    base = TransformerConfig(name="toy-l2-h1024", layers=2, hidden_size=1024, attention_heads=8, kv_heads=8,
                             ffn_hidden_size=3 * 1024, vocab_size=32000, seq_length=2048, ffn_kind="swiglu")
    out = []
    moe = _replace(base, name="toy-moe-l2-e4", moe=MoEConfig(experts=4, top_k=2, expert_ffn_hidden_size=1024))
    for e in (2, 4):
        workload = build_workload(moe, hw, TrainingSetup(nodes=1, global_batch=16, expert_parallel=e))
        out.append(Instance(f"{moe.name}-ep{e}", problem_from_dict(workload), "frontier-models",
                            f"mixture of experts from the front end, expert-parallel size {e}"))
    long = _replace(base, name="toy-l2-s8192", seq_length=8192)
    hw_long = hardware("h100-sxm-80gb", None, devices_per_node=8, memory_bytes=6e9)
    workload = build_workload(long, hw_long, TrainingSetup(nodes=1, global_batch=8, context_parallel=2))
    out.append(Instance(f"{long.name}-cp2", problem_from_dict(workload), "frontier-models",
                        "long context from the front end, context-parallel size 2"))
    long_moe = _replace(moe, name="toy-moe-l2-e4-s8192", seq_length=8192)
    workload = build_workload(long_moe, hw_long, TrainingSetup(nodes=1, global_batch=8, context_parallel=2,
                                                               expert_parallel=2))
    out.append(Instance(f"{long_moe.name}-cp2-ep2", problem_from_dict(workload), "frontier-models",
                        "mixture of experts at long context from the front end, context-parallel size 2, "
                        "expert-parallel size 2"))
    # MLA's ring passes its decompressed K and V; a sliding-window layer runs the all-to-all
    # (piper/frontend/context.py)
    mla = _replace(long, name="toy-mla-l2-s8192", attention_heads=4, kv_heads=4, hidden_size=512,
                   ffn_hidden_size=1536, mla=MLAConfig(q_lora_rank=0, kv_lora_rank=128, qk_nope_head_dim=64,
                                                       qk_rope_head_dim=32, v_head_dim=64))
    windowed = _replace(long, name="toy-window-l2-s8192", kv_heads=4, sliding_window=512, sliding_window_layers=(0,))
    for cfg, what in ((mla, "multi-head latent attention (ring of its decompressed K, V)"),
                      (windowed, "a sliding-window layer (all-to-all) and a full one (ring)")):
        workload = build_workload(cfg, hw_long, TrainingSetup(nodes=1, global_batch=8, context_parallel=2))
        out.append(Instance(f"{cfg.name}-cp2", problem_from_dict(workload), "frontier-models",
                            f"long context from the front end, context-parallel size 2: {what}"))
    # Llama 3's all-gather of K, V, and the all-to-all in pairs around a ring (c = 4 = 2 x 2)
    for scheme, size, what in (("allgather", None, "the all-gather of K, V"),
                               ("a2a+p2p", 2, "the all-to-all in pairs around a ring of 2")):
        workload = build_workload(long, hw_long, TrainingSetup(nodes=1, global_batch=8, context_parallel=4,
                                                               cp_comm_type=scheme, cp_a2a_size=size))
        out.append(Instance(f"{long.name}-cp4-{scheme}", problem_from_dict(workload), "frontier-models",
                            f"long context from the front end, context-parallel size 4: {what}"))
    return out


#: seeds of :func:`schedules_suite`, chosen (by brute force, at this suite's parameters) so that on
#: each an interleaved plan beats every 1F1B plan on batch time, and on the first eight the
#: batch-time optimum is another plan than the TPS optimum
SCHEDULE_SEEDS = (33, 183, 202, 225, 280, 155, 186, 215, 31, 52, 115, 266)


def schedules_suite(count: int = len(SCHEDULE_SEEDS)) -> list[Instance]:
    """Tiny random chains and DAGs (5-7 layers, k in 2..4) with few micro-batches (N in {2, 4}) and
    memory that forces a pipeline, where the fill and drain decide the iteration (docs/problem.md
    §9): each under the batch-time objective with 1F1B plans, and with interleaved plans allowed
    (up to 3 virtual stages); every third also under TPS with interleaved plans allowed."""
    out = []
    for i, seed in enumerate(SCHEDULE_SEEDS[:count]):
        rng = random.Random(seed)
        problem = random_problem(seed, n=rng.randint(5, 7), shape=("chain", "branchy")[seed % 2],
                                 devices=rng.choice([2, 3, 4]), microbatches=rng.choice([2, 4]),
                                 memory_tightness=rng.uniform(1.2, 2.5))
        name = problem_name(problem, f"random-seed{seed}")
        out.append(Instance(f"{name}-batch", problem, "schedules", "batch time, 1F1B plans", objective="batch-time"))
        out.append(Instance(f"{name}-batch-v3", problem, "schedules", "batch time, interleaved up to v = 3",
                            objective="batch-time", max_virtual_stages=3))
        if i % 3 == 0:
            out.append(Instance(f"{name}-tps-v2", problem, "schedules", "TPS, interleaved up to v = 2",
                                objective="tps", max_virtual_stages=2))
    return out


#: seeds of :func:`moe_suite`, chosen (by brute force, each under its own objective and plan space)
#: so that the optimum uses a TMPC with e e_t > 1 and every exact solver proves it within seconds
MOE_SEEDS = (5, 4, 17, 18, 11, 22, 36, 39, 32, 37, 50, 52)
#: the objective and plan space of the i-th MoE instance, by i mod 4
_MOE_VARIANTS = (("tps", False, None), ("batch-time", False, None), ("tps", True, None), ("batch-time", True, None))


def moe_suite(count: int = len(MOE_SEEDS)) -> list[Instance]:
    """Tiny random MoE instances (:func:`~experiments.lib.instances.random_moe_problem`: 3-5
    layers, k in {4, 8}, some layers' TMPCs with e in {2, 4}, e_t in {1, 2}, expert weights and
    state; docs/problem.md §11, rule 6), by turns under TPS, batch time, and both with uniform
    plans; seeds after the first eight also with interleaved plans (v <= 2; the exact models skip
    those)."""
    out = []
    for i, seed in enumerate(MOE_SEEDS[:count]):
        problem = random_moe_problem(seed)
        objective, uniform, _ = _MOE_VARIANTS[i % 4]
        name = problem_name(problem, f"random-moe-seed{seed}")
        label = f"{objective}{', uniform' if uniform else ''}"
        out.append(Instance(f"{name}-{objective}{'-uniform' if uniform else ''}", problem, "moe",
                            f"expert parallelism (rule 6), {label}", uniform=uniform, objective=objective))
        if i >= 8:
            out.append(Instance(f"{name}-{objective}-v2", problem, "moe", f"expert parallelism, {objective}, "
                                "interleaved up to v = 2", objective=objective, max_virtual_stages=2))
    return out


#: (seed, inner layers, devices, micro-batches, memory) of :func:`identical_chains_suite`, the
#: memory chosen (by brute force) so that it binds: the optimum is worse than with unlimited memory
IDENTICAL_CHAIN_CASES = ((7, 4, 4, 4, 0.3), (2, 5, 4, 8, 0.25), (3, 3, 6, 4, 0.35), (4, 4, 3, 2, 0.35))


def identical_chains_suite(count: int = len(IDENTICAL_CHAIN_CASES)) -> list[Instance]:
    """Chains of identical layers (1 head, 3-5 identical, 2 tail layers; k in 3..6; memory binds)
    for solver ``aggregate`` (docs/formulations.md §10), each under TPS with free plans, under
    the batch time with free plans and under the batch time with uniform plans, so that compare
    holds the aggregated model against brute force, the DP and the per-layer exact models."""
    out = []
    for seed, n_inner, devices, n_mb, memory in IDENTICAL_CHAIN_CASES[:count]:
        problem = identical_chain_problem(seed, n_inner=n_inner, devices=devices, microbatches=n_mb, memory=memory)
        name = problem_name(problem, f"identical-chain-seed{seed}")
        out.append(Instance(f"{name}-tps", problem, "identical-chains", "identical chain, TPS", objective="tps"))
        out.append(Instance(f"{name}-batch", problem, "identical-chains", "identical chain, batch time",
                            objective="batch-time"))
        out.append(Instance(f"{name}-batch-uniform", problem, "identical-chains",
                            "identical chain, batch time, uniform plans", uniform=True, objective="batch-time"))
    return out


def iteration_suite(count: int = 4) -> list[Instance]:
    """Instances with the iteration keys of docs/problem.md §10 (the resync's overlap and the
    optimizer step): ``count`` tiny front-end transformers (:data:`MODEL_CASES`) built with
    ``--overlap-grad-reduce``, ``--overlap-param-gather`` and the step (the workloads ``plan``
    solves; batch time, the last one TPS), and ``count`` tiny random DAGs with random keys
    (:func:`~experiments.lib.instances.with_iteration_keys`; every other one with TMPCs of a layer
    that differ in h, which Piper's DP refuses and the exact models and brute force take)."""
    from piper.frontend.config import TransformerConfig
    from piper.frontend.hardware import hardware
    from piper.frontend.workload import TrainingSetup, build_workload

    out = []
    for i, (layers, hidden, heads, kv, ffn, nodes, per_node, memory) in enumerate(MODEL_CASES[:count]):
        cfg = TransformerConfig(name=f"toy-l{layers}-h{hidden}-{ffn}", layers=layers, hidden_size=hidden,
                                attention_heads=heads, kv_heads=kv,
                                ffn_hidden_size=4 * hidden if ffn == "gelu" else 3 * hidden,
                                vocab_size=32000, seq_length=2048, ffn_kind=ffn)
        hw = hardware("a100-80gb", None, devices_per_node=per_node, memory_bytes=memory)
        setup = TrainingSetup(nodes=nodes, global_batch=16, overlap_grad_reduce=True, overlap_param_gather=True,
                              optimizer_step=True)
        problem = problem_from_dict(build_workload(cfg, hw, setup))
        objective = "tps" if i == count - 1 else "batch-time"
        out.append(Instance(f"{cfg.name}-{nodes}x{per_node}-iteration-{objective}", problem, "iteration",
                            "model front end workload with the resync's overlap and the optimizer step",
                            objective=objective))
    for seed in range(count):
        rng = random.Random(7000 + seed)
        base = random_problem(300 + seed)
        problem = with_iteration_keys(base, rng)
        if seed % 2:
            # a layer whose TMPCs differ in h: outside what the DP prices (it refuses)
            raw = problem_to_dict(problem)
            for nd in raw["nodes"]:
                for lst in nd["TMPCs"].values():
                    for j, c in enumerate(lst):
                        c["resyncOverlapTime"] = c.get("resyncOverlapTime", 0.0) * (1 + j)
            problem = problem_from_dict(raw)
        out.append(Instance(problem_name(problem, f"random-seed{300 + seed}") + "-iteration", problem, "iteration",
                            "random DAG with the iteration keys" + (", h differing per TMPC" if seed % 2 else ""),
                            objective="batch-time" if seed % 2 == 0 else None))
    return out


#: (layers, N, k, w) of :func:`window_suite`: chains where the window changes brute force's optimum
#: (batch time, uniform, v <= 3; checked when the suite was made, 2026-12-04)
WINDOW_CASES = ((4, 4, 4, 1.1), (6, 4, 4, 1.4), (8, 8, 8, 1.8), (6, 8, 4, 1.1))


def window_suite() -> list[Instance]:
    """Chains of identical layers (p = 1, h = 1, w bytes, B = 1) with ``resyncOverlapWindow``
    "schedule" (docs/problem.md §10.1), batch time, uniform, interleaved plans up to v = 3: Piper's
    DP against brute force on the window's pricing (the exact models plan 1F1B only and skip them)."""
    out = []
    for n, n_mb, k, w in WINDOW_CASES:
        tmpc = {"id": "a", "timePerSample": 1.0, "parameterSize": w, "memoryUsageA": 0.0, "memoryUsageB": 0.0,
                "resyncOverlapTime": 1.0}
        nodes = [{"id": i, "TMPCs": {"1": [{**tmpc, "syncTimeFw": {str(i - 1): 0.0} if i else {},
                                            "syncTimeBw": {str(i + 1): 0.0} if i + 1 < n else {}}]}}
                 for i in range(n)]
        raw = {"name": f"window-chain-n{n}-N{n_mb}-k{k}-w{w}", "maxDevices": k, "maxMemoryPerDevice": 1e12,
               "mbsInBatch": n_mb, "bandwidth": 1.0, "resyncOverlapWindow": "schedule", "nodes": nodes,
               "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 0.0} for i in range(n - 1)]}
        out.append(Instance(raw["name"], problem_from_dict(raw), "window",
                            "a chain whose optimum the interleaved schedule's overlap window decides",
                            uniform=True, objective="batch-time", max_virtual_stages=3))
    return out


def default_suite() -> list[Instance]:
    """The embedded default: tiny + small + paper-slices + infeasible + two rounds of the
    version-2 families + two model front end workloads + 4 seeds of the schedules suite + 4 MoE
    instances + the front end's tiny MoE and long-context workloads + one identical chain in three
    settings + 2 front-end and 2 random instances with the iteration keys (59 instances, all proven by the
    exact solvers within seconds each)."""
    return [*tiny_suite(), *small_suite(), *paper_slices_suite(), *infeasible_suite(), *cluster_suite(2),
            *models_suite(2), *schedules_suite(4), *moe_suite(4), *frontier_models_suite(), *identical_chains_suite(1),
            *iteration_suite(2)]


SUITES: dict[str, tuple[str, Callable[[], list[Instance]]]] = {
    "default": ("the embedded default: tiny + small + paper-slices + infeasible + 8 version-2 + 2 models + 10 schedules"
                " + 4 MoE + 4 front-end MoE / long-context + 3 identical-chains + 4 iteration", default_suite),
    "tiny": ("12 random DAGs, 3-7 layers, k <= 6", tiny_suite),
    "small": ("4 random DAGs, 8-10 layers, k = 4, N = 8, t in {1,2,4}", small_suite),
    "paper-slices": ("5 slices: first 6-12 layers of BERT-32, GNMT, ResNet-50; k = 4, memory binds", paper_slices_suite),
    "infeasible": ("3 provably infeasible instances", infeasible_suite),
    "medium": ("4 random DAGs, 12-16 layers, k = 8, N = 16 (exact solvers may time out)", medium_suite),
    "models": ("6 tiny transformers from the model front end, 1-2 nodes, up to 16 devices", models_suite),
    "cluster": ("16 tiny DAGs: nodes of G devices, sharded optimizer state, both, and uniform plans", cluster_suite),
    "schedules": ("12 tiny chains and DAGs with N in {2, 4}: batch time, 1F1B and interleaved (v <= 3), and TPS "
                  "with interleaved plans", schedules_suite),
    "moe": ("16 tiny MoE DAGs (expert parallelism, rule 6): TPS and batch time, free and uniform, 4 interleaved",
            moe_suite),
    "frontier-models": ("8 front-end workloads: a tiny MoE transformer at expert-parallel sizes 2 and 4, "
                        "2-layer transformers at sequence 8,192 with context-parallel size 2 (dense, MLA, a "
                        "sliding-window layer) and 4 (the all-gather, a2a+p2p), the MoE one at 8,192 with both "
                        "(c = 2, e = 2)",
                        frontier_models_suite),
    "identical-chains": ("4 chains of identical layers (6-8 layers) x {TPS free, batch time free, batch time "
                         "uniform}: the aggregated model against the others", identical_chains_suite),
    "iteration": ("8 instances with the iteration keys (docs/problem.md §10): 4 tiny front-end transformers with "
                  "the resync's overlap and the optimizer step, 4 random DAGs with random keys (2 the DP refuses; "
                  "every other solver takes them all)",
                  iteration_suite),
    "window": ("4 chains with resyncOverlapWindow 'schedule' (docs/problem.md §10.1), batch time, uniform, "
               "v <= 3: the DP against brute force (the exact models plan 1F1B only)", window_suite),
    "real-magnitudes": ("issue 18's reproducer + 11 operator-like graphs with real magnitudes, 6-12 layers; "
                        "real-magnitudes:COUNT[:FIRST[:MAXN]] for more", _real_magnitudes_named),
}


def suite_names() -> list[str]:
    return list(SUITES)


def random_suite(count: int, first_seed: int = 0) -> list[Instance]:
    """``random:COUNT[:FIRST]``: random_problem(seed) for COUNT seeds from FIRST (the
    generator's own draws: 3-7 layers, both shapes, k <= 6)."""
    return [_random(f"random:{count}:{first_seed}", seed) for seed in range(first_seed, first_seed + count)]


def _parse_random(name: str) -> tuple[int, int] | None:
    parts = name.split(":")
    if parts[0] != "random" or len(parts) not in (2, 3):
        return None
    try:
        count, first = int(parts[1]), int(parts[2]) if len(parts) == 3 else 0
    except ValueError:
        return None
    return (count, first) if count >= 1 and first >= 0 else None


def _parse_real(name: str) -> tuple[int, int, int] | None:
    parts = name.split(":")
    if parts[0] != "real-magnitudes" or len(parts) not in (2, 3, 4):
        return None
    try:
        count = int(parts[1])
        first = int(parts[2]) if len(parts) >= 3 else 0
        max_layers = int(parts[3]) if len(parts) == 4 else 12
    except ValueError:
        return None
    return (count, first, max_layers) if count >= 1 and first >= 0 and 6 <= max_layers <= 24 else None


#: the most instances ``random:COUNT`` and ``real-magnitudes:COUNT`` may ask for, summed over one run's
#: suites: each is built before the first solve (measured: 10,000 random ones 4 s and 130 MB,
#: real-magnitudes with MAXN 24 16 s and 400 MB), and 10,000 instances of a few solvers at the default
#: 10 s limit are days of runs; a larger sweep is several runs (FIRST seeds apart)
MAX_SUITE_INSTANCES = 10_000


def suite_count(name: str) -> int | None:
    """The COUNT of ``random:COUNT[:FIRST]`` or ``real-magnitudes:COUNT[...]``; None for another name."""
    parsed = _parse_random(name) or _parse_real(name)
    return None if parsed is None else parsed[0]


def is_suite(name: str) -> bool:
    return name in SUITES or _parse_random(name) is not None or _parse_real(name) is not None


def build_suite(name: str) -> list[Instance]:
    """The instances of a named suite (or ``random:COUNT[:FIRST]``,
    ``real-magnitudes:COUNT[:FIRST[:MAXN]]``); KeyError (naming the known suites) otherwise."""
    parsed = _parse_random(name)
    if parsed is not None:
        return random_suite(*parsed)
    real = _parse_real(name)
    if real is not None:
        return real_magnitude_suite(*real)
    try:
        _, builder = SUITES[name]
    except KeyError:
        raise KeyError(f"unknown suite {name!r}; known: {', '.join(SUITES)}, random:COUNT[:FIRST_SEED], "
                       "real-magnitudes:COUNT[:FIRST[:MAXN]] (MAXN 6..24)") from None
    return builder()


def unique_names(instances: Iterable[Instance]) -> list[Instance]:
    """Rename repeated instance names to name#2, name#3, ... (reports key on the name)."""
    seen: dict[str, int] = {}
    out = []
    for inst in instances:
        count = seen.get(inst.name, 0) + 1
        seen[inst.name] = count
        if count > 1:
            inst = Instance(f"{inst.name}#{count}", inst.problem, inst.suite, inst.note)
        out.append(inst)
    return out
