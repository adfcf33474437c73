"""The runnable plan of ``python -m piper plan`` exports to Megatron-LM as it is (docs/frontend.md,
"What the frameworks can run"): one (d, t), one sequence-parallel switch and one recomputation
setting for the model. Presets of every kind: dense, MoE with e > 1, sliding-window attention,
MLA with interleaved chunks. The quick case runs in CI; the others are a slow sweep (``--runslow``:
about a minute)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piper import load_problem, plan_from_dict
from piper.export import export_plan
from tests.commands import RunCommand

CASES = [
    ("llama3-8b", ["--nodes", "2"]),
    pytest.param("llama3-70b", ["--nodes", "8"], marks=pytest.mark.slow),
    pytest.param("mixtral-8x7b", ["--nodes", "2"], marks=pytest.mark.slow),
    pytest.param("qwen3-30b-a3b", ["--nodes", "2"], marks=pytest.mark.slow),
    pytest.param("gpt-oss-120b", ["--nodes", "8", "--time-limit", "60"], marks=pytest.mark.slow),
    pytest.param("deepseek-v3", ["--nodes", "128"], marks=pytest.mark.slow),
]


@pytest.mark.parametrize("model, extra", CASES)
def test_the_runnable_plan_exports_to_megatron(cli: RunCommand, tmp_path: Path, model: str, extra: list[str]) -> None:
    plan_file, workload_file = tmp_path / "plan.json", tmp_path / "workload.json"
    proc = cli("piper", "plan", model, "--gpu", "h100", "--uniform", "--json", *extra,
               "--plan-out", str(plan_file), "--out", str(workload_file))
    assert proc.returncode == 0, proc.stderr[-400:]
    out = json.loads(proc.stdout)
    assert out["megatron"]["exports"], out["megatron"]
    problem = load_problem(str(workload_file))
    plan = plan_from_dict(json.loads(plan_file.read_text()))
    args = export_plan(problem, plan, "megatron").data["args"]
    # the TMPCs say one recomputation setting: the export's flags carry it without --fit-recompute
    kinds = {tid.split("+")[0] for st in plan.stages for v, tid in st.tmpcs.items()
             if problem.node_by_id[v].kind == "transformer"}
    assert len(kinds) == 1
    assert ("--recompute-granularity" in args) == (kinds != {"none"})
