"""The workload built from a toy model: structure, every TMPC number (hand-computed),
cluster keys, loading with piper.load_problem and a one-stage evaluation."""

import pytest

from piper import evaluate, load_problem, plan_from_dict
from piper.frontend import (
    FrontendError,
    Hardware,
    TrainingSetup,
    TransformerConfig,
    all_reduce_factor,
    build_workload,
    hardware,
    parse_tmpc_id,
    preset,
    tensor_parallel_degrees,
    tmpc_id,
    tmpc_ids,
)

# toy GPT of test_frontend_costs: per-layer params 872 (460 per device at t=2), b=2, s=4, h=8
GPT = TransformerConfig(
    name="toy-gpt", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_hidden_size=32,
    vocab_size=16, seq_length=4, micro_batch=2,
)
HW = Hardware(name="toy", peak_flops=1000.0, memory_bytes=1e6, devices_per_node=2,
              nvlink_bandwidth=100.0, network_bandwidth=10.0)
# grad_bytes 2 and no reserve: the numbers below were computed for those (issue 30 changed both defaults)
SETUP = TrainingSetup(nodes=2, global_batch=6, efficiency=0.5, grad_bytes=2, memory_reserve_bytes=0,
                      flash_attention=False)


def _tmpcs(w, node, t):
    return {c["id"]: c for c in w["nodes"][node]["TMPCs"][str(t)]}


def test_parse_tmpc_id():
    assert parse_tmpc_id("none") == ("none", False)
    assert parse_tmpc_id("selective") == ("selective", False)
    assert parse_tmpc_id("full") == ("full", False)
    assert parse_tmpc_id("none+sp") == ("none", True)
    assert parse_tmpc_id("selective+sp") == ("selective", True)
    assert parse_tmpc_id("full+sp") == ("full", True)
    for tid in tmpc_ids(8):
        assert tmpc_id(*parse_tmpc_id(tid)) == tid
    with pytest.raises(FrontendError, match="activation recomp"):
        parse_tmpc_id("activation recomp")
    assert tmpc_ids(1) == ["none", "selective", "full"]


def test_chain_structure_and_cluster_keys():
    w = build_workload(GPT, HW, SETUP)
    kinds = [(n["id"], n["kind"], n["layerIndex"]) for n in w["nodes"]]
    assert kinds == [(0, "embedding", 0), (1, "transformer", 0), (2, "transformer", 1),
                     (3, "final_norm", 1), (4, "output_head", 1)]
    assert [n["name"] for n in w["nodes"]][1] == "ParallelTransformerLayer"
    assert [(e["sourceId"], e["destId"]) for e in w["edges"]] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    # the edge carries the fewest bytes a device sends: p*b*s*h / t_max = 2*2*4*8 / 2; a TMPC without
    # sequence parallelism sends the whole 128 bytes: 64 more in its syncTimeFw / syncTimeBw
    assert {e["communicationCost"] for e in w["edges"]} == {64.0}
    assert _tmpcs(w, 1, 2)["none"]["syncTimeFw"] == {"0": 64.0} and _tmpcs(w, 1, 2)["none+sp"]["syncTimeFw"] == {"0": 0.0}
    assert w["maxDevices"] == 4  # 2 nodes x 2
    assert w["devicesPerNode"] == 2
    assert w["maxMemoryPerDevice"] == 1e6
    assert w["mbsInBatch"] == 3  # 6 sequences / micro-batch 2
    assert w["bandwidth"] == 10.0 and w["intraNodeBandwidth"] == 100.0
    assert w["allReduceFactor"] == 2.0  # ring all-reduce 2(d-1)/d
    for node in w["nodes"]:
        assert sorted(node["TMPCs"]) == ["1", "2"]
    assert list(_tmpcs(w, 1, 2)) == ["none", "selective", "full", "none+sp", "selective+sp", "full+sp"]
    assert list(_tmpcs(w, 0, 2)) == ["none", "none+sp"]
    assert list(_tmpcs(w, 4, 1)) == ["none"]
    assert _tmpcs(w, 0, 1)["none"]["syncTimeFw"] == {} and _tmpcs(w, 0, 1)["none"]["syncTimeBw"] == {"1": 64.0}
    assert _tmpcs(w, 4, 1)["none"]["syncTimeFw"] == {"3": 64.0} and _tmpcs(w, 4, 1)["none"]["syncTimeBw"] == {}


def test_transformer_tmpc_numbers():
    w = build_workload(GPT, HW, SETUP)
    t2 = _tmpcs(w, 1, 2)
    # full at t=2: compute b*4*6656 / (2*1000*0.5) = 53.248 s; 6 all-reduces of 128 bytes,
    # each 2*(1/2)*128 = 128 bytes per device at 100 B/s: 7.68 s
    assert t2["full"]["timePerSample"] == pytest.approx(60.928)
    assert t2["full+sp"]["timePerSample"] == pytest.approx(60.928)
    # none at t=2: 2*19968/1000 = 39.936 s + 4 * 1.28 s
    assert t2["none"]["timePerSample"] == pytest.approx(45.056)
    assert t2["selective"]["timePerSample"] == pytest.approx(40.96 + 5.12)  # 2*20480/1000
    assert _tmpcs(w, 1, 1)["none"]["timePerSample"] == pytest.approx(79.872)  # 2*19968/500, no TP traffic
    assert t2["none"]["memoryUsageA"] == pytest.approx(1568)
    assert t2["full+sp"]["memoryUsageA"] == pytest.approx(64)
    # 460 parameters per device: bf16 weights + bf16 grads 4*460, sharded Adam 12*460, resync 2*460
    assert t2["none"]["memoryUsageB"] == pytest.approx(1840)
    assert t2["none"]["memoryUsageShardedB"] == pytest.approx(5520)
    assert t2["none"]["parameterSize"] == pytest.approx(920)


def test_other_nodes_tmpc_numbers():
    w = build_workload(GPT, HW, SETUP)
    emb, norm, head = _tmpcs(w, 0, 2), _tmpcs(w, 3, 2), _tmpcs(w, 4, 2)
    assert emb["none"]["timePerSample"] == pytest.approx(1.28)  # one all-reduce, no FLOPs
    assert emb["none"]["parameterSize"] == pytest.approx(192)  # 2*(16*8/2 + 4*8)
    assert norm["none"]["timePerSample"] == 0
    assert norm["none"]["memoryUsageB"] == pytest.approx(64)  # LayerNorm 16 params, replicated, 4 bytes each
    assert head["none"]["timePerSample"] == pytest.approx(6.144 + 1.28)  # 2*3*1024/1000 + all-reduce
    assert head["none"]["parameterSize"] == pytest.approx(128)  # tied copy: 2*16*8/2
    assert head["none"]["memoryUsageA"] == pytest.approx(384)
    assert head["none+sp"]["memoryUsageA"] == pytest.approx(320)


def test_distributed_optimizer_off():
    w = build_workload(GPT, HW, TrainingSetup(nodes=2, global_batch=6, distributed_optimizer=False))
    c = _tmpcs(w, 1, 2)["none"]
    assert c["memoryUsageB"] == pytest.approx(8280)  # 18 * 460: bf16 weights, fp32 gradients (the default), Adam 12
    assert c["memoryUsageShardedB"] == 0


def test_all_reduce_factor_with_fp32_grads():
    assert all_reduce_factor(GPT, TrainingSetup(grad_bytes=4)) == 1.5  # reduce-scatter 4 + all-gather 2 per 4
    assert all_reduce_factor(GPT, TrainingSetup(grad_bytes=4, distributed_optimizer=False)) == 2.0


def test_memory_reserve_and_batch_errors():
    w = build_workload(GPT, HW, TrainingSetup(nodes=1, global_batch=6, memory_reserve_bytes=1e5))
    assert w["maxMemoryPerDevice"] == 9e5
    with pytest.raises(FrontendError, match="multiple of the micro-batch"):
        build_workload(GPT, HW, TrainingSetup(global_batch=5))
    with pytest.raises(FrontendError, match="efficiency"):
        TrainingSetup(efficiency=1.5)
    for grad in (1, 3, 7):  # the model record's gradBytes too (export refuses the others)
        with pytest.raises(FrontendError, match=rf"grad_bytes must be 2 .* or 4 .*, got {grad}"):
            TrainingSetup(grad_bytes=grad)


def test_tensor_parallel_degrees():
    assert tensor_parallel_degrees(preset("megatron-1.7b"), hardware("a100-80gb")) == [1, 2, 4, 8]
    # 24 heads, 8 per node: 3 and 6 divide the heads but not the node
    assert tensor_parallel_degrees(preset("llama3-405b"), hardware("h100")) == [1, 2, 4, 8]
    gqa = GPT.with_changes(attention_heads=8, kv_heads=2, hidden_size=16)
    # Megatron needs t to divide the key/value heads too (no KV replication)
    assert tensor_parallel_degrees(gqa, hardware("a100-80gb")) == [1, 2]
    # a node of 2^31 - 1 devices (a hardware file's largest count, prime): only t = 1 divides it; the
    # degrees were searched one by one up to the node's size (minutes), now up to the heads
    from dataclasses import replace as _replace
    huge = _replace(hardware("h100"), devices_per_node=2**31 - 1)
    assert tensor_parallel_degrees(preset("llama3-8b"), huge) == [1]
    assert tensor_parallel_degrees(preset("llama3-8b"), _replace(huge, devices_per_node=2**30)) == [1, 2, 4, 8]


def test_loads_and_evaluates_one_stage():
    w = build_workload(GPT, HW, SETUP)
    problem = load_problem(w, strict=True)
    assert problem.n == 5 and problem.unknown_keys == ()
    plan = plan_from_dict({"stages": [{
        "nodes": [0, 1, 2, 3, 4], "dataParallelDegree": 1, "tensorParallelDegree": 2,
        "TMPCids": {"0": "none+sp", "1": "full+sp", "2": "full+sp", "3": "none+sp", "4": "none+sp"},
    }]})
    score = evaluate(problem, plan)
    assert not score.oom
    # one stage, d = 1: no edge or resync traffic, TPS = sum of times = 1.28 + 2*60.928 + 0 + 7.424
    assert score.tps == pytest.approx(130.56)


def test_preset_workload_loads_and_evaluates():
    cfg = preset("megatron-1.7b")
    w = build_workload(cfg, hardware("a100-80gb"), TrainingSetup(global_batch=512))
    problem = load_problem(w, strict=True)
    ids = {n["id"]: ("full" if n["kind"] == "transformer" else "none") for n in w["nodes"]}
    plan = plan_from_dict({"stages": [{"nodes": list(ids), "dataParallelDegree": 8, "tensorParallelDegree": 1,
                                       "TMPCids": {str(k): v for k, v in ids.items()}}]})
    score = evaluate(problem, plan)
    assert not score.oom and 0 < score.tps < 1


def test_shared_node_costs_build_the_same_workloads() -> None:
    """The planner shares the layers' cost records between the workloads of one (micro-batch, c,
    scheme, e) (``build_workload(node_costs=)``): each workload equals the one built alone, in
    whichever order the recomputation settings and degrees come."""
    cfg = preset("mixtral-8x7b").with_changes(micro_batch=2)
    hw = hardware("h100")
    setup = TrainingSetup(nodes=2, global_batch=64, expert_parallel=2, overlap_grad_reduce=True)
    shared: dict = {}
    for recompute, degrees in [(("none",), (2,)), (("full",), None), (None, (1, 4)), (("selective",), (8,))]:
        alone = build_workload(cfg, hw, setup, degrees=degrees, recompute=recompute)
        assert build_workload(cfg, hw, setup, degrees=degrees, recompute=recompute, node_costs=shared) == alone
    assert shared


def test_sequence_parallelism_needs_the_tokens_to_split_over_the_tensor_group() -> None:
    """Megatron splits each context-parallel rank's s / c tokens evenly over the tensor-parallel group
    under sequence parallelism: a search with it on offers no t_tensor the tokens do not split over,
    one choosing it per layer keeps those degrees without their +sp TMPCs, and score refuses the
    layout naming the flags (--seq 4095 --tp 2 was scored)."""
    from piper.cli.common import run_main
    from piper.cli.main import main
    from piper.frontend.workload import offered_degrees, sequence_splits
    from piper.frontend.tmpc import parse_tmpc_id

    cfg = preset("llama3-8b").with_changes(seq_length=4098)  # 2 x 3 x 683: splits over t = 2 only
    hw = hardware("h100")
    assert [sequence_splits(cfg, 1, t) for t in (1, 2, 4, 8)] == [True, True, False, False]
    assert offered_degrees(cfg, hw, TrainingSetup(sequence_parallel=True)) == [1, 2]
    assert offered_degrees(cfg, hw, TrainingSetup(sequence_parallel=None)) == [1, 2, 4, 8]
    assert offered_degrees(cfg.with_changes(seq_length=4096), hw, TrainingSetup(sequence_parallel=True)) == [1, 2, 4, 8]
    w = build_workload(cfg, hw, TrainingSetup(global_batch=8, sequence_parallel=None))
    layer = next(n for n in w["nodes"] if n["kind"] == "transformer")
    for t, sp_allowed in (("2", True), ("4", False), ("8", False)):
        sp = {parse_tmpc_id(e["id"])[1] for e in layer["TMPCs"][t]}
        assert sp == ({True, False} if sp_allowed else {False}), (t, sp)
    assert run_main(main, ["score", "llama3-8b", "--gpu", "h100", "--tp", "2", "--sequence-parallel",
                           "--seq", "4095"]) == 2


def test_mla_splits_its_heads_not_the_configs_key_value_heads() -> None:
    """An MLA layer decompresses a key and a value per head, so t divides the heads; a config's
    num_key_value_heads (2 here, which MLA does not use) refused --tp 4 while the all-to-all's
    check, which counts the heads, took c = 2 at the same degree."""
    from piper.frontend.moe import MLAConfig as MLA

    mla = GPT.with_changes(attention_heads=8, kv_heads=2, hidden_size=512, ffn_kind="swiglu", linear_bias=False,
                           mla=MLA(q_lora_rank=192, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32,
                                   v_head_dim=64))
    assert tensor_parallel_degrees(mla, hardware("h100")) == [1, 2, 4, 8]
    assert tensor_parallel_degrees(mla.with_changes(mla=None), hardware("h100")) == [1, 2]
