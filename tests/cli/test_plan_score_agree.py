"""`plan` and `score` price the same layout the same way: the answer's iteration with the optimizer
step (``batch_time_with_optimizer_step_s``, which the solvers do not take) is what `score` prints for
that layout, and the search's own figure differs from it by exactly the step."""

from __future__ import annotations

import json

import pytest

from piper.cli.common import run_main
from piper.cli.main import main


def _run(capsys, args: list[str]) -> dict:
    assert run_main(main, args) == 0
    return json.loads(capsys.readouterr().out)


def test_the_plans_layout_scores_to_its_predicted_iteration(capsys) -> None:
    common = ["llama3-8b", "--gpu", "h100", "--nodes", "1", "--global-batch", "64", "--seq", "4096", "--json"]
    plan = _run(capsys, ["plan", *common, "--uniform"])
    (stage, *rest) = plan["plan"]["stages"]
    assert not rest and plan["virtual_stages"] == 1  # one stage: a layout score takes as it is
    t, b = stage["tensorParallelDegree"], plan["micro_batch"]
    recompute = plan["recompute"][0]
    layers = {tid for v, tid in stage["TMPCids"].items()}
    sp = ["--sequence-parallel"] if any(tid.endswith("+sp") for tid in layers) else []
    score = _run(capsys, ["score", *common, "--tp", str(t), "--pp", "1", "--micro-batch", str(b),
                          "--recompute", recompute, *sp])
    assert plan["batch_time_with_optimizer_step_s"] == pytest.approx(score["batch_time_s"], rel=1e-9)
    step = score["bottleneck"]["seconds"]["optimizer_step"]
    assert step > 0
    assert plan["batch_time_with_optimizer_step_s"] - plan["batch_time_s"] == pytest.approx(step, rel=1e-6)
