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


def test_beyond_the_moe_fit_rows_plan_prices_its_answer_with_the_runner_up_form(capsys, tmp_path) -> None:
    """At a micro-batch of more tokens than any MoE fit row, `plan` also prices its answer with the
    runner-up MoE form (FittedMoE.alternative): the same figure `score` gives that layout on a hardware
    file holding those constants."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": 64, "intermediate_size": 512, "moe_intermediate_size": 128,
        "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "hidden_act": "silu", "tie_word_embeddings": False}))
    common = [str(config), "--nodes", "1", "--global-batch", "64", "--micro-batch", "8", "--json"]
    plan = _run(capsys, ["plan", *common, "--gpu", "h100", "--uniform", "--max-virtual-stages", "1"])
    check = plan["moe_form_check"]
    assert check is not None and "ns per routed token copy" in check["form"]
    assert any(line.startswith("under the runner-up MoE form") for line in plan["caveats"])
    (stage,) = plan["plan"]["stages"]
    from piper.frontend.hardware import FITTED_MOE

    hw = tmp_path / "alt.json"
    hw.write_text(json.dumps({"gpu": "h100", **FITTED_MOE["h100-sxm-80gb"].alternative_fields()}))
    score = _run(capsys, ["score", *common, "--hardware", str(hw), "--tp", str(stage["tensorParallelDegree"]),
                          "--pp", "1", "--ep", str(plan["expert_parallel"]), "--recompute", plan["recompute"][0]])
    assert check["batch_time_s"] == pytest.approx(score["batch_time_s"], rel=1e-9)
    assert check["change"] == pytest.approx(score["batch_time_s"] / plan["batch_time_with_optimizer_step_s"] - 1)
    assert score["moe_form_check"] is None  # the hardware file's constants are the user's own
    # score of the catalog's H100 gives the same runner-up figure for the layout
    own = _run(capsys, ["score", *common, "--gpu", "h100", "--tp", str(stage["tensorParallelDegree"]), "--pp", "1",
                        "--ep", str(plan["expert_parallel"]), "--recompute", plan["recompute"][0]])
    assert own["moe_form_check"]["batch_time_s"] == pytest.approx(score["batch_time_s"], rel=1e-9)
    assert any(line.startswith("under the runner-up MoE form") for line in own["caveats"])
    # within the fit rows' micro-batches there is no such figure
    plan = _run(capsys, ["plan", *[a if a != "8" else "2" for a in common], "--gpu", "h100", "--uniform",
                         "--max-virtual-stages", "1"])
    assert plan["moe_form_check"] is None
