"""Export of interleaved plans (docs/problem.md §9, docs/export.md): Megatron-LM's virtual
pipeline flags, torchtitan's Interleaved1F1B, DeepSpeed's refusal (rule E8). Expected values
come from the stated chunks (layers per chunk, p, v), not from the export code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.export import ExportError, export_plan
from piper.frontend import hardware
from piper.frontend.config import TransformerConfig
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from tests.export_cases import args_dict

#: 8 transformer layers, 1 node of 8 A100s, 32 sequences per batch of micro-batches of 2: N = 16
TINY = TransformerConfig(name="tiny", layers=8, hidden_size=64, attention_heads=4, kv_heads=4, ffn_hidden_size=256,
                         vocab_size=1000, seq_length=128, micro_batch=2)


def problem():
    return load_problem(build_workload(TINY, hardware("a100-80gb"), TrainingSetup(nodes=1, global_batch=32)),
                        strict=True)


def interleaved(prob, sizes: list[int], v: int, d: int = 1, t: int = 1) -> Plan:
    """Chunks of ``sizes`` transformer layers in pipeline order; the embedding joins the first
    chunk, the final norm and head the last; every node's TMPC "none"."""
    kind = {nd.id: nd.kind for nd in prob.nodes}
    layers = sorted((u for u in kind if kind[u] == "transformer"), key=lambda u: prob.node_by_id[u].layer_index)
    pre = [u for u in kind if kind[u] == "embedding"]
    post = [u for u in kind if kind[u] in ("final_norm", "output_head")]
    chunks, at = [], 0
    for n in sizes:
        chunks.append(layers[at:at + n])
        at += n
    chunks[0] = pre + chunks[0]
    chunks[-1] = chunks[-1] + post
    return Plan(tuple(Stage(tuple(c), d, t, {u: "none" for u in c}) for c in chunks), Schedule(INTERLEAVED, v))


def test_equal_chunks_are_megatrons_layers_per_virtual_stage() -> None:
    prob = problem()
    ex = export_plan(prob, interleaved(prob, [2, 2, 2, 2], 2), "megatron")
    args = args_dict(ex.data["args"])
    assert args["--pipeline-model-parallel-size"] == "2"  # 4 chunks, v = 2: 2 device groups
    assert args["--num-layers-per-virtual-pipeline-stage"] == "2"
    assert "--pipeline-model-parallel-layout" not in args
    assert ex.data["virtual_stages"] == 2 and ex.data["world_size"] == 2
    assert "per chunk" in ex.text


def test_uneven_chunks_are_a_layout_in_pipeline_order() -> None:
    prob = problem()
    ex = export_plan(prob, interleaved(prob, [1, 2, 3, 2], 2), "megatron")
    args = args_dict(ex.data["args"])
    # virtual stage j runs on pipeline rank j mod p: the layout lists the chunks in pipeline order
    assert args["--pipeline-model-parallel-layout"] == "Et|t*2|t*3|t*2L"
    assert "--num-layers-per-virtual-pipeline-stage" not in args


def test_torchtitan_runs_interleaved_1f1b_with_one_model_part_per_chunk() -> None:
    prob = problem()
    ex = export_plan(prob, interleaved(prob, [2, 2, 2, 2], 2), "torchtitan")
    par = ex.data["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B" and par["pipeline_parallel_degree"] == 2
    parts = par["module_fqns_per_model_part"]
    assert len(parts) == 4
    assert parts[0] == ["tok_embeddings", "layers.0", "layers.1"] and parts[-1] == ["layers.6", "layers.7", "norm", "output"]


def test_deepspeed_refuses_the_interleaved_schedule() -> None:
    prob = problem()
    with pytest.raises(ExportError, match="rule E8") as info:
        export_plan(prob, interleaved(prob, [2, 2, 2, 2], 2), "deepspeed")
    assert "--schedule 1f1b" in str(info.value)


def test_a_1f1b_plan_exports_as_before() -> None:
    prob = problem()
    plan = interleaved(prob, [4, 4], 2)
    one = Plan(plan.stages)  # the same two stages as a 1F1B plan
    ex = export_plan(prob, one, "megatron")
    args = args_dict(ex.data["args"])
    assert "--num-layers-per-virtual-pipeline-stage" not in args and args["--pipeline-model-parallel-size"] == "2"
    assert export_plan(prob, one, "torchtitan").data["parallelism"]["pipeline_parallel_schedule"] == "1F1B"


def test_fit_recompute_keeps_the_schedule() -> None:
    prob = problem()
    plan = interleaved(prob, [2, 2, 2, 2], 2)
    kinds = ["none", "full"]
    mixed = Plan(tuple(replace(s, tmpcs={u: (kinds[j % 2] if prob.node_by_id[u].kind == "transformer" else "none")
                                         for u in s.nodes}) for j, s in enumerate(plan.stages)), plan.schedule)
    ex = export_plan(prob, mixed, "megatron", fit_recompute=True)
    assert args_dict(ex.data["args"])["--num-layers-per-virtual-pipeline-stage"] == "2"
