"""End nodes one stage off their place (export rule E2, piper/export/ends.py): the final norm left
with the last layers while the output layer sits alone in the last stage is moved to the last stage
and the plan re-scored, with a note; a chunk holding only the final norm cannot be moved away."""

from __future__ import annotations

import pytest

from piper import evaluate, load_problem, plan_from_dict
from piper.core.errors import ExportError
from piper.export import export_plan
from piper.export.common import map_layers
from piper.frontend.hardware import hardware
from piper.frontend.presets import preset
from piper.frontend.workload import TrainingSetup, build_workload


def _problem():
    cfg = preset("llama3-8b").with_changes(layers=4, micro_batch=1)
    return load_problem(build_workload(cfg, hardware("h100"), TrainingSetup(nodes=1, global_batch=16)), strict=True)


def _plan(problem, groups):
    return plan_from_dict({"stages": [{"nodes": g, "dataParallelDegree": 1, "tensorParallelDegree": 1,
                                       "TMPCids": {str(v): "none" for v in g}} for g in groups]})


def test_the_final_norm_moves_to_the_output_layers_stage() -> None:
    problem = _problem()
    lm = map_layers(problem)
    (emb,), layers = tuple(lm.pre), lm.layers
    norm, head = sorted(lm.post)
    plan = _plan(problem, [[emb, *layers[:2]], [*layers[2:], norm], [head]])
    ex = export_plan(problem, plan, "megatron")
    note = next(n for n in ex.notes if n.startswith("rule E2: moved"))
    assert f"node {norm}" in note and "from stage 2 to 3" in note
    moved = _plan(problem, [[emb, *layers[:2]], list(layers[2:]), [norm, head]])
    assert f"batch time {evaluate(problem, moved).batch_time:.6g}" in note
    assert f"the plan's {evaluate(problem, plan).batch_time:.6g}" in note


def test_a_stage_of_only_the_final_norm_runs_empty_in_megatron_and_is_refused_elsewhere() -> None:
    """Megatron-Core applies the final norm with the loss and allows empty chunks ("E||t|L"): the
    stage holding only the norm runs empty, with a note; torchtitan and DeepSpeed keep the refusal."""
    problem = _problem()
    lm = map_layers(problem)
    (emb,), layers = tuple(lm.pre), lm.layers
    norm, head = sorted(lm.post)
    plan = _plan(problem, [[emb, *layers], [norm], [head]])
    ex = export_plan(problem, plan, "megatron")
    args = ex.data["args"]
    assert args[args.index("--pipeline-model-parallel-layout") + 1] == "Et*4||L"
    assert any(n.startswith(f"rule E2: stage 2 holds only node {norm} (") for n in ex.notes)
    for target in ("torchtitan", "deepspeed"):
        with pytest.raises(ExportError, match="rule E2"):
            export_plan(problem, plan, target)
