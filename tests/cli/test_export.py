"""``python -m piper export``: writes the target's files, refuses a plan the target cannot
run (one line, exit 2), and checks the plan's madeFor record."""

from __future__ import annotations

import json

import pytest

from piper.frontend import hardware
from piper.frontend.workload import build_workload
from tests.export_cases import SETUP, TINY, chain_plan, tiny_problem


@pytest.fixture()
def files(tmp_path):
    problem = tiny_problem()
    w = tmp_path / "w.json"
    w.write_text(json.dumps(build_workload(TINY, hardware("a100-80gb"), SETUP)))
    good = tmp_path / "good.json"
    chain_plan(problem, [3, 5], 2, 1, "full").dump(good)
    bad = tmp_path / "bad.json"
    chain_plan(problem, [4, 4], [2, 1], 1).dump(bad)
    return tmp_path, w, good, bad


def test_cli_exports_and_writes(cli, files):
    tmp, w, good, _ = files
    r = cli("piper", "export", str(good), str(w), "--to", "megatron")
    assert r.returncode == 0, r.stderr
    assert "--decoder-first-pipeline-num-layers 3 \\" in r.stdout and r.stdout.startswith("# Megatron-LM")
    r = cli("piper", "export", str(good), str(w), "--to", "deepspeed", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # exactly one object
    assert doc["target"] == "deepspeed" and doc["pipeline"]["parts"] == [0, 4, 10]
    out = tmp / "ds_config.json"
    r = cli("piper", "export", str(good), str(w), "--to", "deepspeed", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["gradient_accumulation_steps"] == 8
    assert json.loads((tmp / "ds_config.pipeline.json").read_text())["parts"] == [0, 4, 10]
    r = cli("piper", "export", str(good), str(w), "--to", "torchtitan")
    assert r.returncode == 0 and "[parallelism]" in r.stdout


@pytest.mark.parametrize("case", ["bad target", "refused plan", "missing plan"])
def test_cli_errors_are_one_line_exit_2(cli, files, case):
    tmp, w, good, bad = files
    argv = {
        "bad target": [str(good), str(w), "--to", "jax"],
        "refused plan": [str(bad), str(w), "--to", "megatron"],
        "missing plan": [str(tmp / "nope.json"), str(w), "--to", "torchtitan"],
    }[case]
    r = cli("piper", "export", *argv)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    if case == "refused plan":
        assert "stage 2" in r.stderr and "rule E3" in r.stderr and "--uniform" in r.stderr


def test_cli_checks_the_plan_record(cli, files):
    """A plan made for another cluster: a warning line; --strict refuses."""
    from piper.io.provenance import plan_document

    tmp, w, good, _ = files
    problem = tiny_problem()
    other = problem.with_cluster(memory=40e9)
    doc = plan_document(chain_plan(problem, [3, 5], 2, 1, "full"), other)
    rec = tmp / "recorded.json"
    rec.write_text(json.dumps(doc))
    r = cli("piper", "export", str(rec), str(w), "--to", "megatron", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["target"] == "megatron"
    assert "warning" in r.stderr and "M=" in r.stderr
    r = cli("piper", "export", str(rec), str(w), "--to", "megatron", "--strict")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_a_bad_model_record_is_the_one_line_before_the_plans_record(cli, files):
    """A plan made for the workload before its model record was edited: the record's error, alone
    (the madeFor check warned first, about "a different layer graph or costs", and then the error
    came: two lines; with --strict the error named the madeFor mismatch, not the field)."""
    from piper.io.provenance import plan_document
    from piper.io.workload import load_problem

    tmp, w, _, _ = files
    raw = json.loads(w.read_text())
    doc = plan_document(chain_plan(tiny_problem(), [3, 5], 2, 1, "full"), load_problem(raw))
    plan = tmp / "recorded.json"
    plan.write_text(json.dumps(doc))
    raw["model"]["recomputeModules"] = ["bogus"]
    edited = tmp / "edited.json"
    edited.write_text(json.dumps(raw))
    for extra in ([], ["--strict"], ["--json"]):
        r = cli("piper", "export", str(plan), str(edited), "--to", "megatron", *extra)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.strip().splitlines() == [
            "piper: error: cannot export to Megatron-LM: the workload's model.recomputeModules: unknown module "
            "'bogus'; known: core_attn, layernorm, moe_act, mlp, moe, shared_experts, mla_up_proj"]
    raw["model"]["recomputeModules"] = ["core_attn", "mlp"]  # a valid edit: the madeFor warning names the record
    edited.write_text(json.dumps(raw))
    r = cli("piper", "export", str(plan), str(edited), "--to", "megatron")
    assert r.returncode == 0 and "(a different layer graph, costs or model record)" in r.stderr
