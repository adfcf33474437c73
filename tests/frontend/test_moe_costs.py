"""MoE and MLA layer costs (piper/frontend/moe_costs.py): each formula on a hand-computed case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from piper.frontend import costs
from piper.frontend.hardware import hardware
from piper.frontend.moe import MLAConfig, MoEConfig
from piper.frontend.moe_costs import (
    ATTENTION_OP_PREFIXES,
    MLP_OP_PREFIXES,
    all_to_all_time_s,
    expert_layouts,
    layer_costs,
    moe_activation_bytes,
    special_layer_ops,
)
from piper.frontend.operations import layer_ops
from piper.frontend.presets import PRESETS
from piper.frontend.tmpc import expert_layout, parse_tmpc_id
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import problem_from_dict

H100 = hardware("h100")  # NVLink 450e9 B/s, network 50e9 B/s per GPU, all-to-all efficiency 0.77 / 0.86, 8 per node
MIXTRAL = PRESETS["mixtral-8x7b"]


def test_all_to_all_inside_and_across_nodes():
    msg = 1e9
    # the all-to-all's own bus efficiencies (DeepEP's H800 figures: 153 of 200 GB/s NVLink, 43 of 50 GB/s RDMA)
    assert (H100.nvlink_all_to_all_efficiency, H100.network_all_to_all_efficiency) == (0.77, 0.86)
    inside = 15e-6 + 7 / 8 * msg / (450e9 * 0.77)
    assert all_to_all_time_s(H100, msg, 8) == pytest.approx(inside)
    # 16 ranks over 2 nodes: 7/16 over NVLink and 8/16 over the network, concurrently
    across = 30e-6 + max(7 / 16 * msg / (450e9 * 0.77), 8 / 16 * msg / (50e9 * 0.86))
    assert all_to_all_time_s(H100, msg, 16) == pytest.approx(across)
    assert all_to_all_time_s(H100, msg, 1) == 0.0
    # 8 ranks 2 apart over 16 devices: 4 per node, 3/8 over NVLink, 4/8 over the network
    spread = 30e-6 + max(3 / 8 * msg / (450e9 * 0.77), 4 / 8 * msg / (50e9 * 0.86))
    assert all_to_all_time_s(H100, msg, 8, span=16) == pytest.approx(spread)
    assert all_to_all_time_s(H100, msg, 4, span=8) == pytest.approx(15e-6 + 3 / 4 * msg / (450e9 * 0.77))
    # the point-to-point efficiency no longer enters
    assert all_to_all_time_s(H100.with_changes(nvlink_p2p_efficiency=0.1), msg, 8) == pytest.approx(inside)


def test_expert_layouts():
    assert expert_layouts(MIXTRAL, 2, 16) == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 2)]
    assert expert_layouts(MIXTRAL, 1, 4) == [(1, 1), (2, 1), (4, 1)]
    assert expert_layouts(MIXTRAL, 2, 16, tensor_parallel_experts=False) == [(1, 1), (2, 1), (4, 1), (8, 1)]
    ds = PRESETS["deepseek-v3"]
    assert [e for e, et in expert_layouts(ds, 1, 1024)] == [1, 2, 4, 8, 16, 32, 64]


def _sum(ops, prefix, phase, field="flops"):
    return sum(getattr(o, field) for o in ops if o.name.startswith(prefix) and o.phase == phase)


@pytest.mark.parametrize("t, e, et", [(1, 1, 1), (1, 8, 1), (2, 4, 2), (4, 2, 1)])
def test_routed_expert_flops_and_dispatch_bytes(t, e, et):
    # Mixtral, b = 1, s = 4096: each device's T/t tokens, k = 2 experts of 3 h F weights (SwiGLU)
    T, k, h, F = 4096, 2, 4096, 14336
    ops = special_layer_ops(MIXTRAL, H100, t, "none", t > 1, "moe", e, et)
    fwd = T / t * k * 2 * 3 * h * F
    assert _sum(ops, "experts.", "forward") == pytest.approx(fwd)
    assert _sum(ops, "experts.", "backward") == pytest.approx(2 * fwd)
    assert _sum(ops, "router", "forward") == pytest.approx(2 * T / t * h * 8)
    assert _sum(ops, "a2a.dispatch", "forward", "bytes") == pytest.approx((e - 1) / e * T / t * k * h * 2)
    assert _sum(ops, "ag.experts", "forward", "bytes") == pytest.approx((et - 1) / et * T / t * k * et * h * 2)
    # the attention part is the dense layer's
    dense = layer_ops(MIXTRAL, H100, t, "none", t > 1)
    assert _sum(ops, "qkv", "forward") == _sum(dense, "qkv", "forward") > 0


def test_dropped_dense_ops_are_exactly_the_mlp_and_the_attention():
    """Guards the op names moe_costs filters on (piper/frontend/operations.py)."""
    for t, sp in ((1, False), (2, False), (2, True)):
        for recompute in ("none", "selective", "full"):
            ops = layer_ops(MIXTRAL, H100, t, recompute, sp)
            mlp = {o.name for o in ops if o.name.startswith(MLP_OP_PREFIXES)}
            assert mlp and all("fc" in n or "swiglu" in n for n in mlp)
            att = {o.name for o in ops if o.name.startswith(ATTENTION_OP_PREFIXES)}
            assert att and not any(n.startswith(("ar.", "rs.", "ag.")) for n in att)
            left = {o.name for o in ops} - mlp - att
            assert all(n.startswith(("norm", "bias_dropout_add", "ar.", "rs.", "ag.")) for n in left), left


def test_mixtral_tmpcs_weights_and_state_by_hand():
    setup = TrainingSetup(nodes=2, grad_bytes=4)
    costs_t1 = layer_costs(MIXTRAL, H100, setup, 1, "moe", 16)
    by_id = {c.tmpc_id: c for c in costs_t1}
    assert set(by_id) == {f"{r}+ep{e}" for r in ("none", "selective", "full") for e in (1, 2, 4, 8)}
    one_expert = 3 * 4096 * 14336
    c = by_id["none+ep8"]
    assert c.expert_parallel == 8 and c.expert_tensor_parallel == 1
    assert c.expert_param_bytes == 4 * one_expert  # 8 / 8 experts per device, g = 4 bytes
    assert c.expert_sharded_bytes == 12 * one_expert
    non_expert = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 2 * 4096 + 4096 * 8
    assert c.gradient_bytes == 4 * non_expert
    assert c.state_bytes == (2 + 4) * (non_expert + one_expert)
    assert by_id["none+ep2"].expert_param_bytes == 4 * 4 * one_expert
    assert not any("x2" in c.tmpc_id for c in layer_costs(MIXTRAL, H100, setup, 2, "moe", 16))  # e_t = 1 by default
    costs_t2 = layer_costs(MIXTRAL, H100, replace(setup, expert_tensor_parallel=True), 2, "moe", 16)
    assert all(c.tmpc_id.split("+ep")[0].endswith("+sp") for c in costs_t2)  # MoE with t > 1 needs SP
    c2 = {c.tmpc_id: c for c in costs_t2}["none+sp+ep4x2"]
    assert c2.expert_param_bytes == 4 * 2 * one_expert / 2  # 8/4 experts, each split 2 ways


def test_moe_activation_by_hand():
    # tiny model: h 8, s 4, b 1, SwiGLU, dense FFN 16, E 4 experts of F 8, k 2, bf16; t 1, e 2, e_t 1
    cfg = PRESETS["mixtral-8x7b"].with_changes(
        name="tiny", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_hidden_size=16, vocab_size=32,
        seq_length=4, moe=MoEConfig(experts=4, top_k=2, expert_ffn_hidden_size=8))
    T, p = 4, 2
    dense_mlp = T * (2 * p + p) * 16
    rows = T * 2
    # router scores (fp32, E wide), FC1's input, SwiGLU's two inputs and FC2's input, each row's fp32
    # probability (Megatron-Core 0.13+: multiplied in the activation; no expert output kept for the combine)
    routed = 4 * T * 4 + rows * 8 * p + rows * (2 * p + p) * 8 + rows * 4
    assert moe_activation_bytes(cfg, 1, 2, 1) == routed - dense_mlp
    capped = cfg.with_changes(moe=MoEConfig(experts=4, top_k=2, expert_ffn_hidden_size=8, capacity_factor=2.0))
    routed2 = 4 * T * 4 + 2 * (rows * 8 * p + rows * (2 * p + p) * 8 + rows * 4)
    assert moe_activation_bytes(capped, 1, 2, 1) == routed2 - dense_mlp


def test_mla_flops():
    ds = PRESETS["deepseek-v3"]
    ops = special_layer_ops(ds, H100, 1, "none", False, "mla")
    T, h, a = 4096, 7168, 128
    mla = ds.mla
    assert isinstance(mla, MLAConfig)
    proj = 2 * T * (h * 1536 + 1536 * a * 192 + h * 576 + 512 * a * 256 + a * 128 * h)
    assert _sum(ops, "mla.", "forward") - _sum(ops, "mla.flash", "forward") == pytest.approx(proj)
    assert _sum(ops, "mla.flash", "forward") == pytest.approx(0.5 * 2 * T * T * a * (192 + 128))
    assert not any(o.name.startswith(("qkv", "proj", "flash")) for o in ops)
    # per-layer params of the dense MLA layer: MLA attention + dense SwiGLU + norms
    assert costs.layer_params(ds).matmul == proj / (2 * T) + 3 * h * 18432


def test_tmpc_ids_round_trip():
    assert expert_layout("full+sp+ep8x2") == (8, 2) and parse_tmpc_id("full+sp+ep8x2") == ("full", True)
    assert expert_layout("none") == (1, 1) and parse_tmpc_id("selective+ep4") == ("selective", False)


def test_workload_carries_the_expert_keys_and_loads():
    cfg = MIXTRAL.with_changes(layers=2)
    w = build_workload(cfg, H100, TrainingSetup(nodes=1, global_batch=16))
    layer = w["nodes"][1]["TMPCs"]["1"]
    ep8 = next(c for c in layer if c["id"] == "none+ep8")
    assert ep8["expertParallel"] == 8 and ep8["expertParameterSize"] == 4 * 3 * 4096 * 14336
    ep1 = next(c for c in layer if c["id"] == "none+ep1")  # experts replicated: all 8 on each device
    assert ep1["expertParallel"] == 1 and ep1["expertParameterSize"] == 8 * ep8["expertParameterSize"]
    assert all("expertParallel" not in c for c in w["nodes"][0]["TMPCs"]["1"])  # the embedding has none
    problem = problem_from_dict(w, strict=True)
    tm = next(c for c in problem.nodes[1].tmpcs[1] if c.id == "none+ep8")
    assert tm.expert_parallel == 8 and tm.memory_sharded_expert == 12 * 3 * 4096 * 14336


def test_expert_parallel_setting_keeps_dense_layers():
    ds = PRESETS["deepseek-v3"].with_changes(layers=4)
    setup = TrainingSetup(nodes=1, expert_parallel=8)
    dense = layer_costs(ds, H100, setup, 1, "mla", 8)  # layer 0: dense MLP, MLA attention
    assert [c.tmpc_id for c in dense] == ["none", "selective", "full"]
    moe = layer_costs(ds, H100, setup, 1, "moe", 8)
    assert [c.tmpc_id for c in moe] == ["none+ep8", "selective+ep8", "full+ep8"]


def test_mla_memory_ignores_the_unfused_attention_setting():
    ds = PRESETS["deepseek-v3"].with_changes(layers=4)
    fused = layer_costs(ds, H100, TrainingSetup(nodes=1), 1, "mla", 8)
    unfused = layer_costs(ds, H100, TrainingSetup(nodes=1, flash_attention=False), 1, "mla", 8)
    assert [c.activation_bytes for c in fused] == [c.activation_bytes for c in unfused]
    assert [c.time_per_sample_s for c in fused] == pytest.approx([c.time_per_sample_s for c in unfused])


def test_biased_experts_get_no_expert_tensor_parallelism():
    """Megatron-Core's TransformerConfig: "Bias in MoE is only supported when ETP==1" (add_bias_linear)."""
    assert not MIXTRAL.linear_bias and (1, 2) in expert_layouts(MIXTRAL, 2, 16)
    biased = MIXTRAL.with_changes(linear_bias=True)
    assert expert_layouts(biased, 2, 16) == [(1, 1), (2, 1), (4, 1), (8, 1)]
    oss = PRESETS["gpt-oss-120b"]
    assert oss.linear_bias and all(et == 1 for _, et in expert_layouts(oss, 8, 64))


def test_flex_dispatcher_offers_no_unsplit_experts():
    """Megatron-Core's flex dispatcher asserts "Flex token dispatcher requires TPxEP > 1": its
    workload has no e = 1 layout, and one device alone has no TMPC for an MoE layer (one line)."""
    from piper.core.errors import FrontendError

    cfg = MIXTRAL.with_changes(layers=2)
    flex = layer_costs(cfg, H100, TrainingSetup(nodes=1, token_dispatcher="flex"), 1, "moe", 8)
    assert flex and all(expert_layout(c.tmpc_id)[0] > 1 for c in flex)
    one = H100.with_changes(devices_per_node=1)
    with pytest.raises(FrontendError, match=r"node 1 \(transformer layer 0\) has no TMPC at degree 1: .*flex"):
        build_workload(cfg, one, TrainingSetup(nodes=1, global_batch=16, token_dispatcher="flex"))


def test_moe_workload_without_sequence_parallelism_offers_t_1_only():
    """An MoE model runs sequence parallelism at t > 1 (Megatron-Core), so with it off the workload
    offers t = 1 alone (it once wrote empty TMPC lists at t > 1, which load_problem refused); a
    degree asked for by name is one line naming the node."""
    from piper.core.errors import FrontendError

    cfg = MIXTRAL.with_changes(layers=2, seq_length=1024)
    setup = TrainingSetup(nodes=1, global_batch=16, sequence_parallel=False)
    w = build_workload(cfg, H100, setup)
    assert all(list(n["TMPCs"]) == ["1"] for n in w["nodes"])
    problem_from_dict(w, strict=True)
    with pytest.raises(FrontendError, match=r"no TMPC at degree 2: sequence parallelism, which an MoE model"):
        build_workload(cfg, H100, setup, degrees=(2,))


def test_planner_with_the_flex_dispatcher_searches_e_above_1():
    from piper.core.errors import FrontendError
    from piper.core.options import BATCH_TIME, Options
    from piper.frontend.planner import search_plans
    from piper.solvers.registry import get_solver

    cfg = MIXTRAL.with_changes(layers=2, seq_length=1024)
    dp = get_solver("dp")
    kw = dict(micro_batches=(1,), free=False, recomputes=(("none",),))
    runs = {d: search_plans(cfg, H100, TrainingSetup(nodes=1, global_batch=16, token_dispatcher=d), dp,
                            Options(objective=BATCH_TIME), **kw) for d in ("alltoall", "flex")}
    assert {c.expert_parallel for c in runs["alltoall"].candidates} == {1, 2, 4, 8}
    assert {c.expert_parallel for c in runs["flex"].candidates} == {2, 4, 8}
    with pytest.raises(FrontendError, match="--token-dispatcher flex needs expert parallelism e > 1"):
        search_plans(cfg, H100.with_changes(devices_per_node=1), TrainingSetup(nodes=1, global_batch=16,
                     token_dispatcher="flex"), dp, Options(objective=BATCH_TIME), **kw)
