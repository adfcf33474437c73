"""Export of a context-parallel plan (issue 31): the workload's model.contextParallel c turns a
stage's degree t into tensor-parallel t / c and context-parallel c in each target's flags."""

from __future__ import annotations

import pytest

from piper.export import ExportError, export_plan
from piper.frontend import hardware
from piper.frontend.config import TransformerConfig
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from tests.export_cases import args_dict, chain_plan

# 8 layers, 4 heads, seq 256 (a multiple of 2c for c = 2), one node of 8 A100s, 32 sequences per batch
LLAMA = TransformerConfig(name="tiny-llama", layers=8, hidden_size=64, attention_heads=4, kv_heads=2,
                          ffn_hidden_size=160, vocab_size=1000, seq_length=256, ffn_kind="swiglu", norm="rmsnorm",
                          linear_bias=False, learned_positions=False, tied_embeddings=False, micro_batch=1)


def cp_problem(c):
    w = build_workload(LLAMA, hardware("a100-80gb"), TrainingSetup(nodes=1, global_batch=32, context_parallel=c))
    return load_problem(w, strict=True)


def test_megatron_context_parallel_flags():
    problem = cp_problem(2)
    # two stages of d = 1 at degree key 4 = tensor 2 x context 2: 8 GPUs
    ex = export_plan(problem, chain_plan(problem, [4, 4], 1, 4, "none+sp", other="none+sp"), "megatron")
    a = args_dict(ex.data["args"])
    assert a["--tensor-model-parallel-size"] == "2" and a["--context-parallel-size"] == "2"
    assert a["--cp-comm-type"] == "p2p" and a["--pipeline-model-parallel-size"] == "2"
    assert "--sequence-parallel" in a
    assert ex.data["world_size"] == 8 and (ex.data["tensor_parallel"], ex.data["context_parallel"]) == (2, 2)
    assert "d 1 x t 2 x c 2 x p 2" in ex.text


def test_megatron_without_context_parallel_has_no_cp_flags():
    problem = cp_problem(1)
    ex = export_plan(problem, chain_plan(problem, [4, 4], 2, 2, "none+sp", other="none+sp"), "megatron")
    assert "--context-parallel-size" not in ex.data["args"] and "--cp-comm-type" not in ex.data["args"]
    assert ex.data["context_parallel"] == 1


def test_torchtitan_context_parallel_degree():
    import tomllib

    problem = cp_problem(2)
    ex = export_plan(problem, chain_plan(problem, [4, 4], 1, 4, "full+sp", other="none+sp"), "torchtitan")
    par = tomllib.loads(ex.text)["parallelism"]
    assert (par["tensor_parallel_degree"], par["context_parallel_degree"], par["pipeline_parallel_degree"]) == (2, 2, 2)
    problem = cp_problem(1)
    ex = export_plan(problem, chain_plan(problem, [4, 4], 2, 2, "full+sp", other="none+sp"), "torchtitan")
    assert "context_parallel_degree" not in tomllib.loads(ex.text)["parallelism"]


def test_deepspeed_refuses_context_parallelism():
    problem = cp_problem(2)
    # tensor 1 x context 2, no sequence parallelism, full recomputation: DeepSpeed could run it but for c
    with pytest.raises(ExportError, match="Ulysses") as info:
        export_plan(problem, chain_plan(problem, [4, 4], 2, 2, "full", other="none"), "deepspeed")
    assert "\n" not in str(info.value) and "c=2" in str(info.value) and "--cp-comm-type p2p" in str(info.value)
