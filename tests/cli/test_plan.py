"""``python -m piper plan``: from a model config to the best plan and its predicted speed
(issue 21)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piper import evaluate, load_problem, plan_from_dict
from piper.frontend.costs import hardware_flops_per_iteration, model_flops_per_iteration
from piper.frontend.presets import preset
from tests.commands import RunCommand


def test_plan_json_predicts_speed_from_the_evaluators_batch_time(cli: RunCommand, tmp_path: Path) -> None:
    work, plan_path = tmp_path / "w.json", tmp_path / "p.json"
    proc = cli("piper", "plan", "megatron-1.7b", "--nodes", "1", "--global-batch", "64", "--json",
               "--out", str(work), "--plan-out", str(plan_path))
    assert proc.returncode == 0, proc.stderr[-400:]
    out = json.loads(proc.stdout)
    assert out["status"] == "optimal" and out["devices_used"] <= 8
    problem = load_problem(work, strict=True)
    score = evaluate(problem, plan_from_dict(json.loads(plan_path.read_text())))
    assert out["batch_time_s"] == score.batch_time
    cfg = preset("megatron-1.7b")
    tokens = 64 * cfg.seq_length
    assert abs(out["tokens_per_s"] - tokens / score.batch_time) <= 1e-9 * out["tokens_per_s"]
    peak = 312e12  # A100 bf16 dense, the default GPU
    mfu = model_flops_per_iteration(cfg, 64) / score.batch_time / (out["devices_used"] * peak)
    assert abs(out["mfu"] - mfu) <= 1e-9 and 0 < out["mfu"] < 1
    # hardware FLOPs lie between no recomputation and full recomputation of every layer
    lo, hi = model_flops_per_iteration(cfg, 64), hardware_flops_per_iteration(cfg, 64, "full")
    assert lo <= out["hardware_flops_per_iteration"] <= hi


def test_plan_uniform_has_one_degree_pair(cli: RunCommand) -> None:
    proc = cli("piper", "plan", "megatron-1.7b", "--nodes", "1", "--global-batch", "64", "--uniform", "--json")
    assert proc.returncode == 0, proc.stderr[-400:]
    stages = json.loads(proc.stdout)["plan"]["stages"]
    assert len({(s["dataParallelDegree"], s["tensorParallelDegree"]) for s in stages}) == 1


def test_plan_bad_model_is_one_line_exit_2(cli: RunCommand) -> None:
    proc = cli("piper", "plan", "nope-model")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown model preset" in proc.stderr


@pytest.mark.parametrize("v, says", [
    # llama3-8b's workload: 32 transformer layers, the embedding, the final norm and the head
    ("36", "more than the 35 layers of llama3-8b's workload"),
    # was killed for memory after 94 s (the solvers listed every v up to it)
    ("2147483647", "must be <= 65536"),
])
def test_plan_refuses_more_virtual_stages_than_layers(cli: RunCommand, v: str, says: str) -> None:
    proc = cli("piper", "plan", "llama3-8b", "--nodes", "2", "--max-virtual-stages", v)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--max-virtual-stages" in proc.stderr
    assert says in proc.stderr, proc.stderr


def test_plan_flags_an_moe_prediction_without_fitted_moe_constants(cli: RunCommand) -> None:
    """plan's answer carries score's caveat (tests/cli/test_score_moe.py) in --json and the text."""
    args = ["piper", "plan", "mixtral-8x7b", "--gpu", "a100-80gb", "--nodes", "2", "--uniform", "--micro-batch", "1"]
    proc = cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr[-400:]
    caveats = json.loads(proc.stdout)["caveats"]
    assert len(caveats) == 1 and "a100-80gb has no fitted MoE-block constants" in caveats[0]
    proc = cli(*args)
    assert proc.returncode == 0 and "caveat        a100-80gb has no fitted MoE-block constants" in proc.stdout


def test_the_runnable_plan_exports_as_it_is(cli: RunCommand, tmp_path: Path) -> None:
    """Llama 3 70B on 8 nodes. Each layer choosing its sequence parallelism (--sequence-parallel
    per-layer), the best plan keeps the embedding without it (15 us cheaper) and the layers with it,
    which no framework runs (export rule E5); each layer choosing its recomputation
    (--recompute-per-layer), it recomputes 5 of 9 layers in one stage and 4 in another, which
    Megatron-LM cannot say (rule E6: its best block setting costs 8.9%). plan's default fixes both
    for the whole model, and its plan exports as it is, within 1.1% of the per-layer optimum."""
    from piper.core.errors import ExportError
    from piper.export import export_plan

    answers = {}
    for mode in ("default", "--sequence-parallel=per-layer", "--recompute-per-layer"):
        plan_file, workload_file = tmp_path / "plan.json", tmp_path / "workload.json"
        args = ["piper", "plan", "llama3-70b", "--gpu", "h100", "--nodes", "8", "--uniform", "--json",
                "--plan-out", str(plan_file), "--out", str(workload_file)]
        proc = cli(*args, *([] if mode == "default" else [mode]))
        assert proc.returncode == 0, proc.stderr[-400:]
        answers[mode] = (load_problem(str(workload_file)), plan_from_dict(json.loads(plan_file.read_text())),
                         json.loads(proc.stdout))
    problem, plan, out = answers["default"]
    assert {tid.endswith("+sp") for st in plan.stages for tid in st.tmpcs.values()} == {True}
    assert len({tid.split("+")[0] for st in plan.stages for tid in st.tmpcs.values() if "+" in tid}) == 1
    assert "--sequence-parallel" in export_plan(problem, plan, "megatron").data["args"]
    assert out["megatron"]["exports"] and out["megatron"]["batch_time_s"] == out["batch_time_s"]
    per_layer = out["recompute_per_layer"]
    assert per_layer["batch_time_s"] <= out["batch_time_s"] <= per_layer["batch_time_s"] * 1.02

    problem, plan, mixed = answers["--sequence-parallel=per-layer"]
    with pytest.raises(ExportError, match="mixes sequence parallelism"):
        export_plan(problem, plan, "megatron", fit_recompute=True)
    assert mixed["megatron"]["setting"] is None and "mixes sequence parallelism" in mixed["megatron"]["reason"]

    problem, plan, each = answers["--recompute-per-layer"]
    with pytest.raises(ExportError, match="recomputes"):
        export_plan(problem, plan, "megatron")
    assert not each["megatron"]["exports"] and "--recompute-method block" in each["megatron"]["setting"]
    assert each["megatron"]["batch_time_s"] == pytest.approx(each["batch_time_s"] * (1 + each["megatron"]["change"]))
    # plan's per-layer figure is the --recompute-per-layer answer; the one-setting plan beats that
    # optimum run Megatron's way
    assert per_layer["batch_time_s"] == pytest.approx(each["batch_time_s"])
    assert out["batch_time_s"] < each["megatron"]["batch_time_s"]


def test_plan_minimizes_piper_tps_too(cli: RunCommand) -> None:
    """--objective tps with the default schedules (1F1B and interleaved): the search passed its
    cutoffs to Piper's 1F1B DP for the TPS, which refuses them, and plan failed with that refusal."""
    proc = cli("piper", "plan", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--uniform", "--objective", "tps",
               "--json")
    assert proc.returncode == 0, proc.stderr[-400:]
    out = json.loads(proc.stdout)
    assert out["status"] == "optimal" and out["objective"] == "tps"
    assert out["search"]["cut_solves"] == 0


def test_why_no_plan_says_each_kind_of_reason_once() -> None:
    from piper.cli.plan import why_no_plan

    short = "layer 1 (ParallelTransformerLayer) does not fit in memory: its least a + b is {} bytes > M = 7.9e+10 bytes"
    messages = [short.format("1.01688e+11"), "", short.format("8.3766e+10"), short.format("1.01688e+11"),
                "time limit hit before this workload was solved", "time limit hit before this workload was solved",
                "no plan fits in memory on the available devices"]
    assert why_no_plan(messages) == "; ".join([
        short.format("1.01688e+11") + " (3 solves said this, with their own figures)",
        "no plan fits in memory on the available devices",
        "time limit hit before this workload was solved (2 solves)"])
    assert why_no_plan(["", ""]) == ""
