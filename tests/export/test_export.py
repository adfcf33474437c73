"""Export of plans to Megatron-LM, DeepSpeed and torchtitan (issue 22, docs/export.md).

Expected values come from the stated plan (stage sizes, d, t, TMPCs), the workload's setup
and, for the SC'21 configurations, from the published table (experiments/data) and the
paper's script examples/sc21/run_table_1.sh (t, p, micro-batch, global batch, full
recomputation with ``--recompute-method uniform``) -- never from the export code. The
``export`` command: tests/cli/test_export.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from piper.core.plan import Plan, Stage
from piper.core.problem import ACTIVATION_RECOMP
from piper.export import ExportError, export_plan, map_layers
from piper.export.common import prepare
from piper.frontend import hardware, preset
from piper.frontend.config import TransformerConfig
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from tests.export_cases import SETUP, TINY, args_dict, chain_plan, tiny_problem

ROOT = Path(__file__).resolve().parents[2]
SC21 = ROOT / "experiments" / "data" / "megatron_sc21_table1.csv"
BERT = ROOT / "experiments" / "workloads" / "bert32a100.json"

TINY_LLAMA = TransformerConfig(name="tiny-llama", layers=8, hidden_size=64, attention_heads=4, kv_heads=2,
                               ffn_hidden_size=160, vocab_size=1000, seq_length=256, ffn_kind="swiglu", norm="rmsnorm",
                               linear_bias=False, learned_positions=False, tied_embeddings=False, micro_batch=1)


# ---------------------------------------------------------------------------------
# the workload records what the export needs
# ---------------------------------------------------------------------------------


def test_workload_records_micro_batch_global_batch_and_shape():
    w = build_workload(TINY, hardware("a100-80gb"), SETUP)
    m = w["model"]
    assert (m["microBatch"], m["globalBatch"], m["hiddenSize"], m["layers"], m["seqLength"]) == (2, 32, 64, 8, 128)
    assert m["distributedOptimizer"] is True and w["mbsInBatch"] * m["microBatch"] == m["globalBatch"]
    p = load_problem(w, strict=True)  # a known key: no warning, kept
    assert p.unknown_keys == () and p.extra["model"] == m


# ---------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------


def _sc21_rows():
    with open(SC21, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("row", _sc21_rows(), ids=lambda r: r["model"])
def test_megatron_sc21_configurations(row):
    """Megatron's own configuration of each SC'21 Table 1 row, exported, gives the arguments of
    the paper's script: t, p, micro-batch, global batch, layers, hidden size, heads, sequence
    2048, full recomputation with the uniform method (one layer per recomputed chunk)."""
    t, p, gpus = int(row["tensor_parallel"]), int(row["pipeline_parallel"]), int(row["gpus"])
    layers, mb, gb = int(row["layers"]), int(row["micro_batch"]), int(row["global_batch"])
    cfg = preset(row["model"]).with_changes(micro_batch=mb, seq_length=2048)
    setup = TrainingSetup(nodes=gpus // 8, global_batch=gb, distributed_optimizer=False)
    problem = tiny_problem(cfg, setup)
    plan = chain_plan(problem, [layers // p] * p, gpus // (t * p), t, "full")
    ex = export_plan(problem, plan, "megatron")
    a = args_dict(ex.data["args"])
    assert a["--tensor-model-parallel-size"] == str(t)
    assert a["--pipeline-model-parallel-size"] == str(p)
    assert a["--micro-batch-size"] == str(mb)
    assert a["--global-batch-size"] == str(gb)
    assert a["--num-layers"] == str(layers)
    assert a["--hidden-size"] == row["hidden_size"] and a["--num-attention-heads"] == row["attention_heads"]
    assert a["--seq-length"] == "2048"
    assert (a["--recompute-granularity"], a["--recompute-method"], a["--recompute-num-layers"]) == ("full", "uniform", "1")
    # an even split needs no layer flags; SC'21 predates sequence parallelism and the distributed optimizer
    for flag in ("--decoder-first-pipeline-num-layers", "--pipeline-model-parallel-layout", "--sequence-parallel",
                 "--use-distributed-optimizer"):
        assert flag not in a
    assert ex.data["world_size"] == gpus
    assert f"launch on world size {gpus} " in ex.text


@pytest.mark.parametrize("sizes, first, last", [
    ([2, 3, 3], "2", None),
    ([3, 3, 2], None, "2"),
    ([1, 3, 3, 1], "1", "1"),
    ([3, 5], "3", None),
])
def test_megatron_uneven_first_last(sizes, first, last):
    problem = tiny_problem()
    a = args_dict(export_plan(problem, chain_plan(problem, sizes, 1, 1), "megatron").data["args"])
    assert a.get("--decoder-first-pipeline-num-layers") == first
    assert a.get("--decoder-last-pipeline-num-layers") == last
    assert "--pipeline-model-parallel-layout" not in a
    assert a["--pipeline-model-parallel-size"] == str(len(sizes))


@pytest.mark.parametrize("sizes, kwargs, layout", [
    ([2, 3, 1, 2], {}, "Et*2|t*3|t|t*2L"),
    ([4, 4], {"embedding_alone": True}, "E|t*4|t*4L"),
    ([4, 4], {"head_alone": True}, "Et*4|t*4|L"),
])
def test_megatron_layout_when_stages_differ(sizes, kwargs, layout):
    problem = tiny_problem()
    ex = export_plan(problem, chain_plan(problem, sizes, 1, 1, **kwargs), "megatron")
    a = args_dict(ex.data["args"])
    assert a["--pipeline-model-parallel-layout"] == layout
    assert "--decoder-first-pipeline-num-layers" not in a
    assert f"'{layout}'" in ex.text  # shell-quoted ('|' and '*')


def test_megatron_sequence_parallel_distributed_optimizer_and_model_shape():
    problem = tiny_problem(TINY_LLAMA)
    ex = export_plan(problem, chain_plan(problem, [4, 4], 2, 2, "selective+sp", other="none+sp"), "megatron")
    a = args_dict(ex.data["args"])
    assert "--sequence-parallel" in a and "--use-distributed-optimizer" in a
    assert a["--recompute-granularity"] == "selective" and "--recompute-method" not in a
    assert a["--num-query-groups"] == "2" and "--group-query-attention" in a
    assert "--swiglu" in a and a["--normalization"] == "RMSNorm" and "--disable-bias-linear" in a
    assert a["--position-embedding-type"] == "rope" and "--untie-embeddings-and-output-weights" in a
    assert a["--micro-batch-size"] == "1" and a["--global-batch-size"] == "32"
    assert ex.data["world_size"] == 8 and "d 2 x t 2 x p 2" in ex.text


def test_megatron_block_recomputation_same_count_per_stage():
    problem = tiny_problem()
    tm = ["full", "none", "none", "none", "full", "none", "none", "none"]
    ex = export_plan(problem, chain_plan(problem, [4, 4], 1, 1, tm), "megatron")
    a = args_dict(ex.data["args"])
    assert (a["--recompute-granularity"], a["--recompute-method"], a["--recompute-num-layers"]) == ("full", "block", "1")
    assert not any("block method" in n for n in ex.notes)  # the first layer of each stage: exactly Megatron's
    tm = ["none", "full", "none", "none", "none", "none", "full", "none"]
    ex = export_plan(problem, chain_plan(problem, [4, 4], 1, 1, tm), "megatron")
    assert args_dict(ex.data["args"])["--recompute-num-layers"] == "1"
    assert sum("block method" in n for n in ex.notes) == 2  # said, not silently moved


def test_megatron_refusals():
    problem = tiny_problem()
    with pytest.raises(ExportError, match=r"stage 2 .*rule E3.*--uniform") as e:
        export_plan(problem, chain_plan(problem, [4, 4], [2, 1], 1), "megatron")
    assert e.value.rule == "E3" and e.value.stage == 2 and "\n" not in str(e.value)
    with pytest.raises(ExportError, match=r"stage 2 recomputes 1 of its 4 .*rule E6"):
        tm = ["full", "full", "none", "none", "full", "none", "none", "none"]
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1, tm), "megatron")
    with pytest.raises(ExportError, match=r"selective.*rule E6"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1, ["selective"] * 4 + ["full"] * 4), "megatron")
    with pytest.raises(ExportError, match=r"sequence parallelism.*rule E5"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 2, ["full+sp"] * 4 + ["full"] * 4), "megatron")
    with pytest.raises(ExportError, match=r"micro-batch.*rule E7"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1), "megatron", micro_batch=3)


def test_bert_layers_map_and_export_with_micro_batch():
    problem = load_problem(BERT)
    lm = map_layers(problem)
    assert len(lm.layers) == 32
    assert all(problem.node_by_id[v].name == "ParallelTransformerLayer" for v in lm.layers)
    assert lm.pre == {0, 1, 2, 4} and lm.post == {36}
    first = [v for v in problem.topological_order if v not in lm.layers[12:] and v != 36]
    rest = [v for v in problem.topological_order if v not in first]
    plan = Plan((Stage(tuple(first), 2, 2, {v: "vanilla" for v in first}),
                 Stage(tuple(rest), 2, 2, {v: "vanilla" for v in rest})))
    with pytest.raises(ExportError, match=r"micro-batch.*--micro-batch"):
        export_plan(problem, plan, "megatron")
    a = args_dict(export_plan(problem, plan, "megatron", micro_batch=8).data["args"])
    assert a["--num-layers"] == "32" and a["--decoder-first-pipeline-num-layers"] == "12"
    assert a["--micro-batch-size"] == "8" and a["--global-batch-size"] == str(8 * problem.microbatches)
    assert "--recompute-granularity" not in a
    # the first stage keeps all 12 layers' activations, the second recomputes its 20: no one Megatron setting
    recomp = Plan((plan.stages[0], Stage(tuple(rest), 2, 2, {v: ACTIVATION_RECOMP if v in lm.layers else "vanilla"
                                                           for v in rest})))
    with pytest.raises(ExportError, match=r"stage 1 recomputes 0 of its 12 .*rule E6"):
        export_plan(problem, recomp, "megatron", micro_batch=8)
    # recomputing a non-layer node has no counterpart
    pooler = Plan((plan.stages[0], Stage(tuple(rest), 2, 2, {**plan.stages[1].tmpcs, 36: ACTIVATION_RECOMP})))
    with pytest.raises(ExportError, match=r"node 36 \(Pooler\) in stage 2 is not a transformer layer.*rule E4"):
        export_plan(problem, pooler, "torchtitan", micro_batch=8)
    # --fit-recompute keeps the pooler's activations instead, and says so
    ex = export_plan(problem, pooler, "megatron", micro_batch=8, fit_recompute=True)
    assert "--recompute-granularity" not in args_dict(ex.data["args"])
    assert any(n.startswith("--fit-recompute") and "no recomputation" in n for n in ex.notes)


def test_embedding_side_must_be_in_the_first_stage():
    """BERT's attention-mask input (node 4) feeds every layer: a plan may put it in stage 2
    behind an embedding-only stage 1, which no target can build as it is; the export moves it to
    stage 1 (piper/export/ends.py) and says so with the evaluator's scores of both."""
    problem = load_problem(BERT)
    lm = map_layers(problem)
    first = [0, 1, 2]
    rest = [v for v in problem.topological_order if v not in first]
    plan = Plan((Stage(tuple(first), 1, 1, {v: "vanilla" for v in first}),
                 Stage(tuple(rest), 1, 1, {v: "vanilla" for v in rest})))
    assert 4 in lm.pre
    with pytest.raises(ExportError, match=r"node 4 \(tensor\) comes before the first transformer layer but is in "
                                          r"stage 2, not stage 1 \(rule E2"):
        prepare(problem, plan, "megatron", micro_batch=1)
    ex = export_plan(problem, plan, "megatron", micro_batch=1)
    assert any(n.startswith("rule E2: moved node 4 (") and "from stage 2 to 1" in n for n in ex.notes)


@pytest.mark.parametrize("name", ["gnmt.json", "resnet.json"])
def test_other_graphs_say_why_layers_do_not_map(name):
    problem = load_problem(ROOT / "experiments" / "workloads" / name)
    with pytest.raises(ExportError, match=r"cannot map layers: no node has kind 'transformer'") as e:
        map_layers(problem)
    assert e.value.rule == "E1"


# ---------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------


def test_deepspeed_expressible():
    problem = tiny_problem()  # b = 2, global batch 32: N = 16
    ex = export_plan(problem, chain_plan(problem, [4, 4], 2, 1, "full"), "deepspeed")
    cfg = json.loads(ex.text)
    assert cfg["train_micro_batch_size_per_gpu"] == 2
    assert cfg["gradient_accumulation_steps"] == 16 // 2
    assert cfg["train_batch_size"] == 32
    assert cfg["zero_optimization"] == {"stage": 1}  # the front end shards the optimizer state by default
    pipe = json.loads(ex.extra_files["pipeline.json"])
    assert pipe["parts"] == [0, 5, 10] and pipe["num_stages"] == 2
    assert pipe["stage_layers"][0][0] == "embedding" and pipe["stage_layers"][1][-1] == "head"
    assert pipe["activation_checkpoint_interval"] == 1
    assert pipe["topology"] == {"class": "PipeDataParallelTopology", "num_pp": 2, "num_dp": 2}


def test_deepspeed_uneven_and_unsharded():
    setup = TrainingSetup(nodes=1, global_batch=32, distributed_optimizer=False)
    problem = tiny_problem(setup=setup)
    ex = export_plan(problem, chain_plan(problem, [3, 5], 1, 2), "deepspeed")
    assert json.loads(ex.text)["zero_optimization"] == {"stage": 0}
    assert "activation_checkpointing" not in json.loads(ex.text)
    pipe = ex.data["pipeline"]
    assert pipe["parts"] == [0, 4, 10] and pipe["activation_checkpoint_interval"] == 0
    assert pipe["topology"] == {"class": "PipeModelDataParallelTopology", "num_pp": 2, "num_mp": 2, "num_dp": 1}


def test_deepspeed_refusals():
    problem = tiny_problem()
    with pytest.raises(ExportError, match=r"stage 1 .*\+sp.*rule E4.*--exclude-tmpc"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 2, "full+sp", other="none+sp"), "deepspeed")
    with pytest.raises(ExportError, match=r"selective.*rule E4"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1, "selective"), "deepspeed")
    with pytest.raises(ExportError, match=r"rule E6"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1, ["full"] * 4 + ["none"] * 4), "deepspeed")
    with pytest.raises(ExportError, match=r"stage 3 .*rule E3"):
        export_plan(problem, chain_plan(problem, [2, 3, 3], [1, 1, 2], 1), "deepspeed")


# ---------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------


def _toml(text):
    import tomllib

    return tomllib.loads(text)


def test_torchtitan_expressible():
    problem = tiny_problem(TINY_LLAMA)  # b = 1, N = 32
    ex = export_plan(problem, chain_plan(problem, [4, 4], 2, 2, "full+sp", other="none+sp"), "torchtitan")
    conf = _toml(ex.text)
    par = conf["parallelism"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"]) == (2, 2)
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (2, 1)
    assert par["pipeline_parallel_microbatch_size"] == 1
    assert par["module_fqns_per_model_part"] == [["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3"],
                                                 ["layers.4", "layers.5", "layers.6", "layers.7", "norm", "output"]]
    assert conf["training"] == {"local_batch_size": 1 * 32 // 2, "global_batch_size": 32, "seq_len": 256}
    assert conf["activation_checkpoint"] == {"mode": "full"}
    assert any("FSDP" in n for n in ex.notes)  # the data-parallel scheme differs: said
    assert "pipeline_parallel_split_points = [\"layers.4\"]" in ex.text


def test_torchtitan_uneven_split_and_every_nth_layer():
    problem = tiny_problem(TINY_LLAMA)
    tm = ["none", "full", "none", "none", "full", "none", "none", "full"]  # stages of 2, 3, 3: every 2nd layer
    ex = export_plan(problem, chain_plan(problem, [2, 3, 3], 1, 1, tm), "torchtitan")
    conf = _toml(ex.text)
    assert conf["parallelism"]["module_fqns_per_model_part"][1] == ["layers.2", "layers.3", "layers.4"]
    assert ex.data["pipeline_parallel_split_points"] == ["layers.2", "layers.5"]
    assert conf["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert conf["parallelism"]["data_parallel_shard_degree"] == 1


def test_torchtitan_ddp_on_one_axis():
    setup = TrainingSetup(nodes=1, global_batch=32, distributed_optimizer=False)
    problem = tiny_problem(TINY_LLAMA, setup)
    ex = export_plan(problem, chain_plan(problem, [8], 4, 1), "torchtitan")
    par = _toml(ex.text)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (4, 1)
    assert _toml(ex.text)["activation_checkpoint"] == {"mode": "none"}


def test_torchtitan_refusals():
    problem = tiny_problem(TINY_LLAMA)
    with pytest.raises(ExportError, match=r"stage 1 runs tensor parallelism t=2 without sequence parallelism.*E4"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 2, "full"), "torchtitan")
    with pytest.raises(ExportError, match=r"selective recomputation.*E4"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1, "selective"), "torchtitan")
    with pytest.raises(ExportError, match=r"stage 1: 3 of 4, stage 2: 1 of 4.*E6"):
        tm = ["full", "full", "full", "none", "full", "none", "none", "none"]
        export_plan(problem, chain_plan(problem, [4, 4], 1, 1, tm), "torchtitan")
    with pytest.raises(ExportError, match=r"rule E3.*--uniform"):
        export_plan(problem, chain_plan(problem, [4, 4], 1, [1, 2]), "torchtitan")


# ---------------------------------------------------------------------------------
# --fit-recompute: the target's best single setting, re-scored
# ---------------------------------------------------------------------------------


def _fullest(problem, plan):
    from piper.core.evaluate import evaluate

    return max(s.memory for s in evaluate(problem, plan).stages)


MIXED = ["full", "none", "none", "none", "selective", "none", "none", "none"]


def test_fit_recompute_picks_the_fastest_setting_that_fits():
    problem = tiny_problem()
    plan = chain_plan(problem, [4, 4], 1, 1, MIXED)
    with pytest.raises(ExportError, match="--fit-recompute") as e:
        export_plan(problem, plan, "megatron")
    assert e.value.recompute
    # plenty of memory: keeping every activation is fastest, and it fits
    ex = export_plan(problem, plan, "megatron", fit_recompute=True)
    assert "--recompute-granularity" not in args_dict(ex.data["args"])
    assert any("--fit-recompute" in n and "no recomputation" in n for n in ex.notes)
    # memory between what selective-everywhere and none-everywhere need: selective (faster than full)
    none_mem = _fullest(problem, chain_plan(problem, [4, 4], 1, 1, "none"))
    sel_mem = _fullest(problem, chain_plan(problem, [4, 4], 1, 1, "selective"))
    full_mem = _fullest(problem, chain_plan(problem, [4, 4], 1, 1, "full"))
    assert full_mem < sel_mem < none_mem
    tight = problem.with_cluster(memory=(sel_mem + none_mem) / 2)
    # (a block setting, full on the first n layers of each stage, may also fit: the evaluator decides; here
    # the test only requires a setting at least as fast as selective everywhere)
    ex = export_plan(tight, plan, "megatron", fit_recompute=True)
    from piper.core.evaluate import evaluate

    sel_tps = evaluate(tight, chain_plan(tight, [4, 4], 1, 1, "selective")).tps
    a = args_dict(ex.data["args"])
    assert "--recompute-granularity" in a
    note = next(n for n in ex.notes if "--fit-recompute" in n)
    tps = float(note.split("time per sample ")[1].split()[0])
    assert tps <= sel_tps * (1 + 1e-5)
    # DeepSpeed has no selective recomputation: full on every layer
    ex = export_plan(tight, plan, "deepspeed", fit_recompute=True)
    assert ex.data["pipeline"]["activation_checkpoint_interval"] == 1
    # below what full recomputation needs: still refused, saying so
    with pytest.raises(ExportError, match="no setting of the target fits"):
        export_plan(problem.with_cluster(memory=full_mem * 0.999), plan, "deepspeed", fit_recompute=True)


def test_fit_recompute_leaves_other_refusals_alone():
    problem = tiny_problem()
    with pytest.raises(ExportError, match="rule E3"):
        export_plan(problem, chain_plan(problem, [4, 4], [2, 1], 1, MIXED), "megatron", fit_recompute=True)


def test_layers_that_are_not_a_chain_are_refused():
    w = build_workload(TINY, hardware("a100-80gb"), SETUP)
    w["nodes"][4]["kind"] = "adapter"  # node 4 is no longer a transformer layer: layers 1, 2, 3, 5, ...
    for nd in w["nodes"][5:9]:
        nd["layerIndex"] -= 1
    w["model"]["layers"] = 7
    with pytest.raises(ExportError, match=r"not a chain: no edge from transformer layer node 3 to the next one, node 5"):
        map_layers(load_problem(w, strict=True))


def test_one_stage_plan_and_a_dp_plan_export():
    """A one-stage plan needs no pipeline flags; a uniform plan from Piper's DP on a front-end
    workload exports with the plan's own (t, p, d) and layers per stage."""
    from piper import Options, solve

    problem = tiny_problem(TINY_LLAMA)
    a = args_dict(export_plan(problem, chain_plan(problem, [8], 8, 1), "megatron").data["args"])
    assert a["--pipeline-model-parallel-size"] == "1" and "--decoder-first-pipeline-num-layers" not in a
    result = solve(problem, Options(uniform=True, progress=False), "dp")
    plan = result.plan
    ex = export_plan(problem, plan, "megatron", fit_recompute=True)
    a = args_dict(ex.data["args"])
    d, t = plan.stages[0].d, plan.stages[0].t
    assert a["--tensor-model-parallel-size"] == str(t) and a["--pipeline-model-parallel-size"] == str(len(plan.stages))
    assert ex.data["world_size"] == plan.devices_used == d * t * len(plan.stages)
    kind = {nd.id: nd.kind for nd in problem.nodes}
    assert ex.data["stage_layers"] == [sum(kind[v] == "transformer" for v in s.nodes) for s in plan.stages]
