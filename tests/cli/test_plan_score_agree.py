"""`plan` and `score` price the same layout the same way: the answer's iteration (the search's own
figure: its workloads carry the optimizer step and, when asked, the resync's overlap, docs/problem.md
§10) is what `score` prints for that layout, with and without --overlap-grad-reduce."""

from __future__ import annotations

import json

import pytest

from piper.cli.common import run_main
from piper.cli.main import main


def _run(capsys, args: list[str]) -> dict:
    assert run_main(main, args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("overlap", [[], ["--overlap-grad-reduce", "--overlap-param-gather"]])
def test_the_plans_layout_scores_to_its_predicted_iteration(capsys, overlap) -> None:
    common = ["llama3-8b", "--gpu", "h100", "--nodes", "1", "--global-batch", "64", "--seq", "4096", "--json",
              *overlap]
    plan = _run(capsys, ["plan", *common, "--uniform", "--max-virtual-stages", "1"])
    assert plan["iteration_keys_in_search"] is True
    (stage, *rest) = plan["plan"]["stages"]
    assert not rest and plan["virtual_stages"] == 1  # one stage: a layout score takes as it is
    t, b = stage["tensorParallelDegree"], plan["micro_batch"]
    recompute = plan["recompute"][0]
    layers = {tid for v, tid in stage["TMPCids"].items()}
    sp = ["--sequence-parallel"] if any(tid.endswith("+sp") for tid in layers) else []
    score = _run(capsys, ["score", *common, "--tp", str(t), "--pp", "1", "--micro-batch", str(b),
                          "--recompute", recompute, *sp])
    assert score["bottleneck"]["seconds"]["optimizer_step"] > 0
    assert plan["batch_time_s"] == pytest.approx(score["batch_time_s"], rel=1e-9)
    assert plan["batch_time_with_optimizer_step_s"] == pytest.approx(score["batch_time_s"], rel=1e-9)
    # both say what fills the fullest stage, the same way (piper.frontend.metrics.memory_breakdown)
    assert plan["memory_breakdown"] == pytest.approx(score["memory_breakdown"], rel=1e-9)
    b = plan["memory_breakdown"]
    assert b["activations_bytes"] + b["state_bytes"] + b["sharded_state_bytes"] + b["expert_bytes"] == pytest.approx(
        plan["max_memory_per_device_bytes"], rel=1e-12)
