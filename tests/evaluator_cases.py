"""A three-layer chain on a cluster of nodes, and two plans of it, whose evaluator numbers
tests/core/test_evaluate.py computes by hand (docs/problem.md §2)."""

from __future__ import annotations

from typing import Any

from tests.helpers import plan, tmpc, workload


def cluster_chain(**top: Any) -> dict[str, Any]:
    """0 -> 1 -> 2 (k = 8, N = 4, B = 2); node 2 also has a t = 2 TMPC.

    edge 0->1: c = 3, node 0 adds sbw = 1, node 1 adds sfw = 2
    edge 1->2: c = 5, node 1 adds sbw = 0, node 2 adds sfw = 0 at t = 1 and 1 at t = 2
    """
    nodes = {
        0: {1: [tmpc(p=4.0, w=8.0, a=1.0, b=2.0, bw={"1": 1.0})]},
        1: {1: [tmpc(p=6.0, w=4.0, a=2.0, b=1.0, fw={"0": 2.0}, bw={"2": 0.0})]},
        2: {1: [tmpc(p=5.0, w=2.0, a=1.0, b=0.0, fw={"1": 0.0})],
            2: [tmpc(p=3.0, w=2.0, a=1.0, b=0.0, fw={"1": 1.0})]},
    }
    raw = workload(nodes, [(0, 1, 3.0), (1, 2, 5.0)], k=8, N=4, B=2.0)
    raw.update(top)
    return raw


def with_sharded_state(raw: dict[str, Any], s0: float = 16.0, s1: float = 8.0, s2: float = 4.0) -> dict[str, Any]:
    """``raw`` with sharded optimizer state of s0, s1, s2 bytes: on the t = 1 TMPC of layers 0
    and 1, and on the t = 2 TMPC of layer 2."""
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = s0
    raw["nodes"][1]["TMPCs"]["1"][0]["memoryUsageShardedB"] = s1
    raw["nodes"][2]["TMPCs"]["2"][0]["memoryUsageShardedB"] = s2
    return raw


#: nodes of 4 devices, intra-node bandwidth 10 bytes/s, all-reduce factor 2
CLUSTER_KEYS = {"devicesPerNode": 4, "intraNodeBandwidth": 10.0, "allReduceFactor": 2}

#: three stages, 2 + 1 + 2 = 5 devices > G = 4: the plan spans nodes
SPANS = plan(([0], 2, 1, "vanilla"), ([1], 1, 1, "vanilla"), ([2], 1, 2, "vanilla"))
#: two stages, 2 + 2 = 4 devices <= G = 4: the plan fits in one node
FITS = plan(([0, 1], 2, 1, "vanilla"), ([2], 1, 2, "vanilla"))
