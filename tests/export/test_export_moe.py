"""Export of mixture-of-experts plans (issue 31): Megatron-LM, torchtitan and DeepSpeed-MoE settings."""

import re
from dataclasses import replace

import pytest

from piper.core.errors import ExportError
from piper.core.plan import Plan
from piper.export import export_plan
from piper.export.megatron import moe_layer_pattern
from piper.frontend.hardware import hardware
from piper.frontend.presets import PRESETS
from piper.frontend.score import Layout, score_layout
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem

H100 = hardware("h100")
#: a valid MoE record (Qwen3 30B-A3B's), for the bad-record cases
PRESETS_MOE = {"experts": 128, "topK": 8, "expertFfnHiddenSize": 768, "sharedFfnHiddenSize": 0, "firstDenseLayers": 0,
               "layerFreq": 1, "layerOffset": 0, "routerScore": "softmax", "capacityFactor": None}


def _plan(cfg, nodes, **layout):
    m = score_layout(cfg, H100, TrainingSetup(nodes=nodes, global_batch=32), Layout(**layout))
    return m["problem"], m["plan"]


def _flag(args, name):
    return args[args.index(name) + 1]


def test_megatron_mixtral_flags():
    cfg = PRESETS["mixtral-8x7b"].with_changes(layers=4)
    problem, plan = _plan(cfg, 2, tp=2, pp=2, dp=4, ep=4, sequence_parallel=True)
    args = export_plan(problem, plan, "megatron").data["args"]
    assert (_flag(args, "--num-experts"), _flag(args, "--moe-router-topk"), _flag(args, "--moe-ffn-hidden-size")) == (
        "8", "2", "14336")
    assert _flag(args, "--expert-model-parallel-size") == "4" and _flag(args, "--expert-tensor-parallel-size") == "1"
    assert "--sequence-parallel" in args and "--moe-layer-freq" not in args
    assert "--moe-shared-expert-intermediate-size" not in args and "--multi-latent-attention" not in args


def test_megatron_deepseek_flags():
    cfg = PRESETS["deepseek-v3"].with_changes(layers=8)  # 3 dense + 5 MoE layers
    problem, plan = _plan(cfg, 2, tp=1, pp=2, dp=8, ep=8, recompute="full")
    ex = export_plan(problem, plan, "megatron")
    args = ex.data["args"]
    assert _flag(args, "--moe-layer-freq") == "([0]*3+[1]*5)"
    assert _flag(args, "--moe-shared-expert-intermediate-size") == "2048"
    assert _flag(args, "--moe-router-score-function") == "sigmoid" and _flag(args, "--num-experts") == "256"
    assert "--multi-latent-attention" in args
    assert [_flag(args, f) for f in ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
                                     "--v-head-dim")] == ["1536", "512", "128", "64", "128"]
    assert ex.data["expert_parallel"] == 8


def test_moe_layer_pattern():
    assert moe_layer_pattern(4, 0, 1, 0) == "([1]*4)"
    assert moe_layer_pattern(61, 3, 1, 0) == "([0]*3+[1]*58)"
    assert moe_layer_pattern(4, 0, 2, 0) == "[1,0,1,0]"
    assert moe_layer_pattern(4, 0, 2, 1) == "[0,1,0,1]"


def test_torchtitan_and_deepspeed():
    cfg = PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024)
    problem, plan = _plan(cfg, 1, tp=1, pp=1, dp=8, ep=4, recompute="none")
    tt = export_plan(problem, plan, "torchtitan").data["parallelism"]
    assert tt["expert_parallel_degree"] == 4 and tt["expert_tensor_parallel_degree"] == 1
    assert "--kv-channels" in export_plan(problem, plan, "megatron").data["args"]
    ds = export_plan(problem, plan, "deepspeed").data["moe"]
    assert ds == {"ep_size": 4, "num_experts": 128, "k": 8}


def test_deepspeed_refuses_expert_tensor_parallelism():
    cfg = PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024)
    problem, plan = _plan(cfg, 1, tp=2, pp=1, dp=4, ep=2, etp=2, sequence_parallel=True)
    with pytest.raises(ExportError, match="E4|E9"):  # its +sp TMPCs are refused first (rule E4)
        export_plan(problem, plan, "deepspeed")


def test_mixed_expert_layouts_are_refused():
    cfg = PRESETS["mixtral-8x7b"].with_changes(layers=4)
    _, plan = _plan(cfg, 1, tp=1, pp=1, dp=8, ep=8, recompute="none")
    # the workload with every expert layout (score's has only its --ep)
    problem = load_problem(build_workload(cfg, H100, TrainingSetup(nodes=1, global_batch=32), degrees=(1,)))
    st = plan.stages[0]
    layers = sorted(v for v in st.nodes if problem.node_by_id[v].kind == "transformer")
    tmpcs = dict(st.tmpcs)
    tmpcs[layers[-1]] = tmpcs[layers[-1]].replace("+ep8", "+ep4")
    mixed = Plan((replace(st, tmpcs=tmpcs),), plan.schedule)
    with pytest.raises(ExportError, match="E9"):
        export_plan(problem, mixed, "megatron")


def _window_flags(layers, windowed):
    """Megatron-Core's rule (is_layer_window_attention, 1-based n: windowed when n % N != 0, or the
    list's n-th entry is 1), applied to what the export wrote: the 0-based windowed layers."""
    cfg = PRESETS["gpt-oss-120b"].with_changes(layers=layers, sliding_window_layers=tuple(windowed))
    problem, plan = _plan(cfg, 1, tp=1, pp=1, dp=8, ep=8, recompute="full")
    ex = export_plan(problem, plan, "megatron")
    args = ex.data["args"]
    assert _flag(args, "--window-size") == "128,0"
    if "--window-attn-skip-freq" not in args:
        return list(range(layers)), ex
    freq = _flag(args, "--window-attn-skip-freq")
    if freq.startswith("["):
        flags = [int(x) for x in freq.strip("[]").split(",")]
        return [n - 1 for n in range(1, layers + 1) if flags[n - 1]], ex
    return [n - 1 for n in range(1, layers + 1) if n % int(freq)], ex


@pytest.mark.parametrize("layers, windowed", [(4, (0, 2)), (6, (0, 1, 3, 4)), (4, (0, 1, 2, 3)), (4, (1, 2))])
def test_megatron_sliding_window_layers_round_trip(layers, windowed):
    got, ex = _window_flags(layers, windowed)
    assert got == list(windowed)
    assert any("sliding window: 128 tokens" in n for n in ex.notes)


def test_gpt_oss_window_is_every_other_layer():
    # GPT-OSS (HF layer_types): sliding, full, sliding, ...: Megatron-Bridge writes --window-attn-skip-freq 2
    cfg = PRESETS["gpt-oss-120b"]
    cfg = cfg.with_changes(layers=4, sliding_window_layers=cfg.sliding_window_layers[:2])  # (0, 2)
    problem, plan = _plan(cfg, 1, tp=1, pp=1, dp=8, ep=8, recompute="full")
    args = export_plan(problem, plan, "megatron").data["args"]
    assert (_flag(args, "--window-size"), _flag(args, "--window-attn-skip-freq")) == ("128,0", "2")
    assert "--window-size" not in export_plan(*_plan(PRESETS["mixtral-8x7b"].with_changes(layers=4), 1, tp=1, pp=1,
                                                     dp=8, ep=8, recompute="full"), "megatron").data["args"]


def test_flex_dispatcher_is_exported_or_refused():
    cfg = PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024)
    setup = TrainingSetup(nodes=1, global_batch=32, token_dispatcher="flex")
    m = score_layout(cfg, H100, setup, Layout(tp=1, pp=1, dp=8, ep=4, recompute="none"))
    problem, plan = m["problem"], m["plan"]
    args = export_plan(problem, plan, "megatron").data["args"]
    assert _flag(args, "--moe-token-dispatcher-type") == "flex"
    assert _flag(args, "--moe-flex-dispatcher-backend") == "hybridep"
    assert export_plan(problem, plan, "torchtitan").data["parallelism"]["expert_parallel_comm_backend"] == "deepep"
    with pytest.raises(ExportError, match="flex.*rule E9"):
        export_plan(problem, plan, "deepspeed")
    # the default dispatcher: alltoall, no backend flag, no torchtitan key
    problem, plan = _plan(cfg, 1, tp=1, pp=1, dp=8, ep=4, recompute="none")
    args = export_plan(problem, plan, "megatron").data["args"]
    assert _flag(args, "--moe-token-dispatcher-type") == "alltoall" and "--moe-flex-dispatcher-backend" not in args
    assert "expert_parallel_comm_backend" not in export_plan(problem, plan, "torchtitan").data["parallelism"]


@pytest.mark.parametrize("record, field", [
    ({"tokenDispatcher": "nccl"}, "tokenDispatcher"),
    ({"slidingWindow": {"tokens": 0, "layers": [0]}}, "slidingWindow.tokens"),
    ({"slidingWindow": {"tokens": 128, "layers": [2, 1]}}, "slidingWindow.layers"),
    ({"slidingWindow": {"tokens": 128, "layers": [0, 99]}}, "slidingWindow.layers"),
    ({"slidingWindow": [128]}, "slidingWindow"),
    ({"precision": "fp4"}, "precision"),
    # the fuzz pass of 2026-12-04: these were exported as if valid (--swiglu or --normalization dropped,
    # --moe-router-topk 1000 of 128 experts, unknown keys ignored)
    ({"ffnKind": "relu2"}, "ffnKind"),
    ({"norm": "batchnorm"}, "norm"),
    ({"moe": {**PRESETS_MOE, "topK": 1000}}, "moe.topK"),
    ({"moe": {**PRESETS_MOE, "gate": "x"}}, "moe has an unknown key 'gate'"),
    ({"activation": "relu"}, "model record has an unknown key 'activation'"),
    # the fuzz pass of this stop: exported as given (--moe-router-score-function banana, a capacity factor of
    # 1e308, --moe-layer-freq '([0]*4+[1]*0)', --num-query-groups 64)
    ({"gradBytes": "four"}, "gradBytes must be 2 or 4"),
    ({"gradBytes": 7}, "gradBytes must be 2 or 4"),
    ({"gradBytes": 4.0}, "gradBytes must be 2 or 4"),  # a whole number, as TrainingSetup's
    ({"dropout": "yes"}, "dropout must be true or false"),
    ({"slidingWindow": {"tokens": 128, "layers": [0], "extra": 1}}, "slidingWindow has an unknown key 'extra'"),
    ({"moe": {**PRESETS_MOE, "routerScore": "banana"}}, "moe.routerScore must be one of softmax, sigmoid"),
    ({"moe": {**PRESETS_MOE, "capacityFactor": 1e308}}, "moe.capacityFactor must be in [1, 1000]"),
    ({"moe": {**PRESETS_MOE, "firstDenseLayers": 4}}, "moe makes none of its 4 layers an MoE layer"),
    ({"attentionHeads": 7}, "kvHeads (4) must divide its attentionHeads (7)"),  # Qwen3 sets its head width
    ({"attentionHeads": 48, "attentionHeadDim": None}, "attentionHeads (48) must divide its hiddenSize (2048)"),
    ({"kvHeads": 64}, "kvHeads (64) must divide its attentionHeads (32)"),
    ({"precisionBytes": 10**20}, "precisionBytes must be a whole number in 1..2147483647"),
    # the hostile-input pass of 2026-12-05: exported as given (--num-experts 1e20, --kv-channels 1e20,
    # --window-size 1e20,0, --multi-latent-attention with --window-size, a flex dispatcher on a dense model)
    ({"moe": {**PRESETS_MOE, "experts": 10**20}}, "moe.experts must be a whole number <= 2147483647"),
    ({"moe": {**PRESETS_MOE, "topK": 10**20}}, "moe.topK must be a whole number <= 2147483647"),
    ({"mla": {"qLoraRank": 0, "kvLoraRank": 10**20, "qkNopeHeadDim": 128, "qkRopeHeadDim": 64, "vHeadDim": 128}},
     "mla.kvLoraRank must be a whole number <= 2147483647"),
    ({"contextParallel": 10**20}, "contextParallel must be a whole number in 1..2147483647"),
    ({"attentionHeadDim": 10**20}, "attentionHeadDim must be a whole number in 1..2147483647"),
    ({"slidingWindow": {"tokens": 10**20, "layers": [0]}}, "slidingWindow.tokens must be a whole number in 1..2147483647"),
    ({"name": ""}, "name must be a non-empty string"),
    ({"slidingWindow": {"tokens": 128, "layers": [0]},
      "mla": {"qLoraRank": 0, "kvLoraRank": 512, "qkNopeHeadDim": 128, "qkRopeHeadDim": 64, "vHeadDim": 128}},
     "has both slidingWindow and mla"),
    ({"cpCommTypes": ["a2a"] * 4}, "cpCommTypes is given at contextParallel 1"),
    ({"contextParallel": 2, "slidingWindow": {"tokens": 128, "layers": [1]}},
     "layer 1 (0-based) attends within a sliding window but runs the p2p context-parallel scheme"),
    ({"contextParallel": 2, "slidingWindow": {"tokens": 128, "layers": [1]}, "cpCommTypes": ["a2a"] * 4},
     None),  # the all-to-all on the windowed layer: accepted
])
def test_bad_model_record_keys_are_refused(record, field):
    """Each bad key is one ExportError (rule E7) naming it."""
    from piper.export.common import model_info

    problem, _ = _plan(PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024), 1, tp=1, pp=1, dp=8, ep=4,
                       recompute="none")
    bad = replace(problem, extra={**problem.extra, "model": {**problem.extra["model"], **record}})
    if field is None:
        assert model_info(bad) is not None
        return
    with pytest.raises(ExportError, match=re.escape(field if " " in field else f"model.{field}")):
        model_info(bad)


def test_a_flex_dispatcher_on_a_dense_record_is_refused():
    from piper.export.common import model_info

    cfg = PRESETS["llama3-8b"].with_changes(layers=2, seq_length=512)
    m = score_layout(cfg, H100, TrainingSetup(nodes=1, global_batch=8), Layout(tp=1, pp=1, dp=8, recompute="none"))
    problem = m["problem"]
    bad = replace(problem, extra={**problem.extra, "model": {**problem.extra["model"], "tokenDispatcher": "flex"}})
    with pytest.raises(ExportError, match="tokenDispatcher \\('flex'\\) needs a model.moe"):
        model_info(bad)


def test_an_moe_plan_without_the_moe_record_is_refused():
    """The plan's layers carry expert keys; a workload whose model record lost 'moe' was exported as a
    dense model (no --num-experts, no expert parallelism)."""
    problem, plan = _plan(PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024), 1, tp=1, pp=1, dp=8, ep=4,
                          recompute="none")
    model = {k: v for k, v in problem.extra["model"].items() if k != "moe"}
    bad = replace(problem, extra={**problem.extra, "model": model})
    for target in ("megatron", "torchtitan", "deepspeed"):
        with pytest.raises(ExportError, match="has no 'moe': the export would write a dense model"):
            export_plan(bad, plan, target)


def test_fit_recompute_keeps_the_expert_layout_of_moe_layers():
    """A stage recomputing 1 of its 2 MoE layers and another none: Megatron's one block setting
    cannot say it, and --fit-recompute must try its settings with the layers' own expert layout
    (``full+sp+ep4``): before, it asked for ``full+sp``, which an MoE layer of this workload lacks,
    and refused with "no setting fits"."""
    cfg = PRESETS["mixtral-8x7b"].with_changes(layers=4)
    _, plan = _plan(cfg, 2, tp=2, pp=2, dp=4, ep=4, sequence_parallel=True, recompute="none")
    # the planner's workload of e = 4 (every recomputation kind), same nodes as the scored layout's
    problem = load_problem(build_workload(cfg, H100, TrainingSetup(nodes=2, global_batch=32, expert_parallel=4)),
                           strict=True)
    first = plan.stages[0]
    layer = min(v for v, tid in first.tmpcs.items() if "+ep4" in tid)
    assert first.tmpcs[layer] == "none+sp+ep4"
    mixed = Plan((replace(first, tmpcs={**first.tmpcs, layer: "full+sp+ep4"}), *plan.stages[1:]), plan.schedule)
    with pytest.raises(ExportError, match="recompute"):
        export_plan(problem, mixed, "megatron")
    ex = export_plan(problem, mixed, "megatron", fit_recompute=True)
    assert any(n.startswith("--fit-recompute") for n in ex.notes)
    assert "--recompute-granularity" not in ex.data["args"]  # no recomputation fits and is fastest here


def test_precision_the_frameworks_cannot_take_is_said():
    """A 4-byte MoE workload gets no --moe-grouped-gemm (Megatron-LM asserts --bf16 for it) and a note;
    an FP8 workload gets a note from DeepSpeed and torchtitan, which write no FP8 key."""
    cfg = PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024)
    layout = dict(tp=1, pp=1, dp=8, ep=4, recompute="none")
    ex = export_plan(*_plan(cfg.with_changes(precision_bytes=4), 1, **layout), "megatron")
    assert "--moe-grouped-gemm" not in ex.data["args"] and "--bf16" not in ex.data["args"]
    assert any("no --moe-grouped-gemm" in n for n in ex.notes)
    assert "--moe-grouped-gemm" in export_plan(*_plan(cfg, 1, **layout), "megatron").data["args"]
    problem, plan = _plan(cfg.with_changes(precision="fp8"), 1, **layout)
    assert problem.extra["model"]["precision"] == "fp8"
    for target in ("deepspeed", "torchtitan"):
        assert any(n.startswith("fp8:") for n in export_plan(problem, plan, target).notes), target
    bf16 = export_plan(*_plan(cfg, 1, **layout), "torchtitan")
    assert not any(n.startswith("fp8:") for n in bf16.notes)


@pytest.mark.parametrize("record, words", [
    ({"layers": 5}, "the workload's model record says 5 layers, its graph has 4 transformer nodes"),
    # layerFreq 2 (offset 0) makes layers 1 and 3 dense, whose TMPCs carry expert terms
    ({"moe": {**PRESETS_MOE, "layerFreq": 2}}, "node 2 (ParallelTransformerLayer) (layer 1) has expert terms in its "
                                               "TMPCs but the model record makes layer 1 a dense layer"),
])
def test_a_model_record_that_contradicts_the_graph_is_refused(record, words):
    """The record against the layer graph (export.common.check_record_graph): what export refused only for
    the plan's stages, and wrote as a dense model when firstDenseLayers or layerFreq was edited."""
    from piper.export.common import model_record_error

    problem, plan = _plan(PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024), 1, tp=1, pp=1, dp=8, ep=4,
                          recompute="none")
    assert model_record_error(problem) is None
    bad = replace(problem, extra={**problem.extra, "model": {**problem.extra["model"], **record}})
    assert words in model_record_error(bad)
    with pytest.raises(ExportError, match=re.escape(words)):
        export_plan(bad, plan, "megatron")


def test_record_and_graph_messages_name_what_is_missing_or_odd():
    from piper.export.common import map_layers, model_info

    problem, _ = _plan(PRESETS["qwen3-30b-a3b"].with_changes(layers=4, seq_length=1024), 1, tp=1, pp=1, dp=8, ep=4,
                       recompute="none")
    moe = {k: v for k, v in problem.extra["model"]["moe"].items() if k != "topK"}
    bad = replace(problem, extra={**problem.extra, "model": {**problem.extra["model"], "moe": moe}})
    with pytest.raises(ExportError, match="model.moe has no 'topK'"):
        model_info(bad)
    layer = next(nd for nd in problem.nodes if nd.kind == "transformer" and nd.layer_index == 1)
    odd = replace(problem, nodes=tuple(replace(nd, kind="banana") if nd.id == layer.id else nd for nd in problem.nodes))
    with pytest.raises(ExportError, match=f"node {layer.id} has kind 'banana', not one of embedding, transformer"):
        map_layers(odd)
