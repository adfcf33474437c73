"""A picture of a plan (issue 22, piper.render.picture). The layout the drawing reports
(stages, device -> stage, node boundaries, the bottleneck marked) is checked against the
plan and the evaluator, and the PNG against its signature and size. The commands that draw
it (``show``, ``solve --png``): tests/cli/test_show.py."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from piper import Plan, Stage, evaluate, load_problem
from piper.render.picture import PlanPicture, draw_plan, place_stages, stage_colours
from tests.picture_cases import chain_workload, one_layer_per_stage, png_size


def check_layout(picture: PlanPicture, plan: Plan, k: int, G: int) -> None:
    """Every stage holds exactly its d*t devices, no device is used twice, nodes are G wide."""
    counts = [0] * len(plan.stages)
    for st in picture.device_stage:
        if st >= 0:
            counts[st] += 1
    assert counts == [s.d * s.t for s in plan.stages]
    assert len(picture.device_stage) == k
    assert picture.node_size == min(G, k)
    assert picture.node_boundaries == tuple(range(G, k, G))


# ---------------------------------------------------------------------------------
# the drawing and its layout
# ---------------------------------------------------------------------------------


def test_four_stages_on_nodes_of_8(tmp_path: Path) -> None:
    problem = load_problem(chain_workload(4, k=64, G=8, N=64, hot=2))
    plan = one_layer_per_stage(4, d=2, t=8)
    out = tmp_path / "four.png"
    picture = draw_plan(problem, plan, out, title="four")
    assert picture.stages == 4 and picture.path == str(out)
    check_layout(picture, plan, 64, 8)
    # 16 devices each: every stage fills two whole nodes, none straddles a boundary
    for i in range(4):
        nodes = {dev // 8 for dev, st in enumerate(picture.device_stage) if st == i}
        assert len(nodes) == 2
    assert picture.straddling == () and picture.oom_stages == ()
    assert picture.bottleneck == 2 == evaluate(problem, plan).bottleneck  # the hot layer's stage
    assert picture.labelled_stages == (0, 1, 2, 3)
    assert png_size(out) == (1320, 1298)
    # the device map (top left of the picture) shows every stage's colour
    import matplotlib.image

    pixels = (matplotlib.image.imread(out)[..., :3] * 255).round().astype(int)
    h, w = pixels.shape[:2]
    region = pixels[int(0.08 * h):int(0.34 * h), int(0.08 * w):int(0.7 * w)]
    for colour in stage_colours(4):
        rgb = np.round(np.array(colour[:3]) * 255).astype(int)
        assert (np.abs(region - rgb).sum(axis=2) <= 3).sum() >= 100


def test_sixty_four_stages_on_2048_devices_in_nodes_of_8(tmp_path: Path) -> None:
    problem = load_problem(chain_workload(64, k=2048, G=8, N=512, hot=37))
    plan = one_layer_per_stage(64, d=4, t=8)
    out = tmp_path / "sixty-four.png"
    picture = draw_plan(problem, plan, out)
    assert picture.stages == 64
    check_layout(picture, plan, 2048, 8)
    assert len(picture.node_boundaries) == 255
    assert picture.bottleneck == 37 == evaluate(problem, plan).bottleneck
    # compact labels: every few stages, always the first, the last and the bottleneck
    labels = picture.labelled_stages
    assert 8 <= len(labels) <= 20 and {0, 37, 63} <= set(labels)
    # stage i sits on nodes 4i..4i+3 (equal sizes: placed in pipeline order)
    for i in (0, 37, 63):
        assert {dev // 8 for dev, st in enumerate(picture.device_stage) if st == i} == set(range(4 * i, 4 * i + 4))
    assert picture.straddling == ()
    assert png_size(out) == (1320, 1298)
    # 64 stage colours, neighbours distinct
    colours = stage_colours(64)
    assert all(colours[i] != colours[i + 1] for i in range(63))


def test_out_of_memory_plan_marks_the_first_oom_stage(tmp_path: Path) -> None:
    # memory a*y + b per device: y = 4, 3, 2, 1 (d = 2 everywhere), a = 1e8, 2e8, 3e8, 1e8,
    # b = 1e9/8: 5.25e8, 7.25e8, 7.25e8, 2.25e8 bytes; with M = 7e8 stages 2 and 3 are over
    problem = load_problem(chain_workload(4, k=64, G=8, N=64, hot=0, M=7e8))
    plan = one_layer_per_stage(4, d=2, t=8)
    score = evaluate(problem, plan)
    picture = draw_plan(problem, plan, tmp_path / "oom.png", score=score)
    assert score.oom and picture.oom_stages == (1, 2)
    assert picture.bottleneck == 1  # the first stage out of memory, not the slowest (stage 1, hot)


def test_power_of_two_stages_never_straddle_a_node() -> None:
    rng = random.Random(3)
    for _ in range(200):
        G = rng.choice([1, 2, 4, 8, 16])
        k = G * rng.randint(1, 16)
        sizes = []
        while True:
            size = 2 ** rng.randint(0, 6)
            if sum(sizes) + size > k:
                break
            sizes.append(size)
        if not sizes:
            continue
        plan = Plan(tuple(Stage((i,), size, 1, {i: "vanilla"}) for i, size in enumerate(sizes)))
        where = place_stages(plan, k, G)
        for i, size in enumerate(sizes):
            devs = [dev for dev, st in enumerate(where) if st == i]
            assert len(devs) == size and devs == list(range(devs[0], devs[0] + size))  # contiguous
            if size <= G:
                assert devs[0] // G == devs[-1] // G


def test_a_stage_that_cannot_sit_in_a_node_is_reported(tmp_path: Path) -> None:
    """Sizes 6, 5, 5 on two nodes of 8: after 6 and 5 no node has 5 free devices."""
    problem = load_problem(chain_workload(3, k=16, G=8, N=60, hot=1))
    plan = Plan((Stage((0,), 6, 1, {0: "vanilla"}), Stage((1,), 5, 1, {1: "vanilla"}),
                 Stage((2,), 5, 1, {2: "vanilla"})))
    picture = draw_plan(problem, plan, tmp_path / "straddle.png")
    check_layout(picture, plan, 16, 8)
    nodes = [{dev // 8 for dev, st in enumerate(picture.device_stage) if st == i} for i in range(3)]
    assert [len(n) for n in nodes] == [1, 1, 2]
    assert picture.straddling == (2,)


def test_one_node_cluster_has_no_boundaries(tmp_path: Path) -> None:
    problem = load_problem(chain_workload(2, k=8, G=None, N=8, hot=0))
    plan = Plan((Stage((0,), 2, 2, {0: "vanilla"}), Stage((1,), 1, 2, {1: "vanilla"})))
    picture = draw_plan(problem, plan, tmp_path / "one.png")
    assert picture.node_boundaries == () and picture.node_size == 8 and picture.stages == 2
    assert picture.bottleneck == 0 and picture.device_stage.count(-1) == 2
