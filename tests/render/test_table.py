"""The readable table of a plan (piper.render.table): stage ranges, degrees, TPS, memory,
the node column and the batch time."""

import re

from piper import evaluate, problem_from_dict, render_plan
from tests.evaluator_cases import CLUSTER_KEYS, FITS, cluster_chain, with_sharded_state
from tests.helpers import plan, problem, tmpc


def test_render_shows_ranges_degrees_tps_and_memory():
    nodes = {v: {1: [tmpc(p=1.0, a=2.0 ** 30)]} for v in range(5)}
    prob = problem(nodes, [(v, v + 1, 0.0) for v in range(4)], M=2.0 ** 33)
    p = plan(([0, 1, 2], 1, 1, "vanilla"), ([3, 4], 1, 1, "vanilla"))
    text = render_plan(prob, p, evaluate(prob, p))
    assert "0-2" in text and "3-4" in text and "3x vanilla" in text
    # stage 1: y = ceil(2/1) = 2, 3 layers x 1 GiB x 2
    assert "6.00 GiB / 8.00 GiB" in text and "TPS 3" in text and "bottleneck stage 1" in text


def test_render_plan_shows_node_column_and_batch_time():
    p = problem_from_dict(with_sharded_state(cluster_chain(**CLUSTER_KEYS))).with_cluster(devices_per_node=1)
    text = render_plan(p, FITS, evaluate(p, FITS))
    header, _, row1, row2, footer = text.splitlines()
    assert "node" in header.split()
    assert " spans " in row1 and " spans " in row2
    assert "batch time 45" in footer
    q = p.with_cluster(devices_per_node=4)
    text = render_plan(q, FITS, evaluate(q, FITS))
    assert re.search(r"\s+in\s+", text.splitlines()[2]) and "fits in one node" in text.splitlines()[-1]
