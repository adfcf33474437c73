"""Context parallelism in the front end (docs/problem.md §11, piper/frontend/context.py): every
formula on a hand-computed case, and c = 1 giving the tensor-parallel workload unchanged."""

import pytest

from piper import load_problem
from piper.frontend import (
    FrontendError,
    Hardware,
    TrainingSetup,
    TransformerConfig,
    build_workload,
)
from piper.frontend.context import (
    RingAttention,
    context_link,
    context_resync_s,
    kv_block_bytes,
    model_parallel_degrees,
    ring_attention,
)
from piper.frontend.workload import model_parallel_node_costs, node_costs

# h = 8, a = kv = 2 (head_dim 4, kv_dim 8), f = 16 (GELU), biases: matrix-product weights
# M = h(h + 2 kv_dim) + h^2 + 2hf = 8*24 + 64 + 256 = 512; all params 512 + (24 + 16) + (2*16 + 16) = 600
TOY = TransformerConfig(name="toy", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_hidden_size=16,
                        vocab_size=16, seq_length=8, micro_batch=1)
# an ideal device: products and flash attention at peak, element-wise free, no latency or overhead
FAST = Hardware(name="ideal", peak_flops=1000.0, memory_bytes=1e9, devices_per_node=2,
                nvlink_bandwidth=1e6, network_bandwidth=1e3)
SLOW = Hardware(name="ideal-slow-link", peak_flops=1000.0, memory_bytes=1e9, devices_per_node=2,
                nvlink_bandwidth=100.0, network_bandwidth=10.0)


def setup(c, **kw):
    return TrainingSetup(nodes=2, global_batch=4, context_parallel=c, memory_reserve_bytes=0, **kw)


def cost(hw, c, t, tmpc="none", kind="transformer", **kw):
    return next(x for x in model_parallel_node_costs(TOY, hw, setup(c, **kw), kind, t) if x.tmpc_id == tmpc)


def test_ring_attention_steps_and_overlap():
    # forward: A_f = 2 hides X_f = 1 on the 3 steps that send: 2 + 3 * 2
    # backward (Transformer Engine's order): the first step sends K, V only and the last dK, dV only
    # (X_f = 1, hidden by A_b = 5), the 2 middle ones both (X_b = 6 > 5): 5 + 2 * 6 + 5, 2 * 1 exposed
    r = RingAttention(4, 2.0, 5.0, 1.0, 6.0)
    assert r.forward_s == 8.0 and r.exposed_fwd_s == 0.0
    assert r.backward_s == 22.0 and r.exposed_bwd_s == 2.0
    # c = 2: no middle step; X_f = 7 > A_b = 5 on both: 2 * 7, 2 * 2 exposed
    r2 = RingAttention(2, 2.0, 5.0, 7.0, 9.0)
    assert r2.backward_s == 14.0 and r2.exposed_bwd_s == 4.0
    assert RingAttention(1, 2.0, 5.0, 9.0, 9.0).forward_s == 2.0  # one device: no transfer


def test_kv_block_and_transfer_time():
    # K and V of s / c = 4 tokens, kv_dim 8, p = 2, b = 1, t_tensor 1: 2 * 2 * 1 * 4 * 8 = 128 bytes
    assert kv_block_bytes(TOY, 2, 1) == 128.0
    assert kv_block_bytes(TOY.with_changes(micro_batch=3), 4, 2) == 2 * 2 * 3 * 2 * 8 / 2
    r = ring_attention(SLOW, 2, 0.25, 0.5, 128.0, "nvlink")
    assert r.transfer_fwd_step_s == pytest.approx(1.28)  # 128 B at 100 B/s
    assert r.transfer_bwd_step_s == pytest.approx(2.56)  # K, V, dK, dV
    assert ring_attention(SLOW, 2, 0.25, 0.5, 128.0, "network").transfer_fwd_step_s == pytest.approx(12.8)
    assert context_link(SLOW, 2) == "nvlink" and context_link(SLOW, 4) == "network"


def test_resync_term():
    # f (c - 1) w / (c N B_c) = 2 * 3 * 100 / (4 * 5 * 10)
    assert context_resync_s(2.0, 100.0, 4, 5, 10.0) == pytest.approx(3.0)
    assert context_resync_s(2.0, 100.0, 1, 5, 10.0) == 0.0


def test_degrees():
    assert model_parallel_degrees([1, 2, 4, 8], 16, 64) == [16, 32, 64]
    assert model_parallel_degrees([1, 2], 1, 2) == [1, 2]


def test_layer_time_by_hand():
    # c = 1, t = 1, no recomputation, on the ideal device: 6 T M products + causal flash attention
    # forward 0.5 * 4 b s^2 h and backward 2.5 x that: (6*8*512 + 3.5 * 2 * 64 * 8) / 1000 = 28.16 s
    assert cost(FAST, 1, 1).time_per_sample_s == pytest.approx(28.16)
    # c = 2 (key t = 2, t_tensor = 1): products of 4 tokens 6*4*512/1000 = 12.288 s; A_f = 0.5*4*16*8/1000
    # = 0.256, A_b = 0.64, transfers hidden on the fast link: 2 A_f + 2 A_b = 1.792; plus the resync term
    # f (c - 1) w / (c N B_c) = 1.5 * 1 * (4 * 600) / (2 * 4 * 1e6) (f = (4 + 2) / 4, w = 4 bytes x 600)
    resync = 1.5 * 2400 / (2 * 4 * 1e6)
    fast = cost(FAST, 2, 2)
    assert fast.time_per_sample_s == pytest.approx(12.288 + 1.792 + resync)
    assert fast.time_per_sample_s - resync == pytest.approx(28.16 / 2)  # the work splits evenly
    assert fast.forward_s == pytest.approx(6 * 4 * 512 / 3 / 1000 + 0.512)
    # on the slow link the transfer is exposed: X_f = 1.28 s (B_c = 100 B/s); c = 2 backward: its
    # two steps pass K, V out and dK, dV back, X_f each: 2 max(A_b, X_f) = 2.56
    slow = cost(SLOW, 2, 2)
    assert slow.time_per_sample_s == pytest.approx(12.288 + (0.256 + 1.28) + 2 * 1.28 + 1.5 * 2400 / (2 * 4 * 100))
    assert slow.communication_s == pytest.approx((1.28 - 0.256) + 2 * (1.28 - 0.64) + 1.5 * 2400 / (2 * 4 * 100))
    # full recomputation runs the forward ring again
    full = cost(SLOW, 2, 2, "full")
    assert full.time_per_sample_s - slow.time_per_sample_s == pytest.approx(6 * 4 * 512 / 3 / 1000 + 0.256 + 1.28)


def test_memory_and_bytes_split_over_c():
    one, two = cost(FAST, 1, 1), cost(FAST, 2, 2)
    assert two.activation_bytes == pytest.approx(one.activation_bytes / 2)  # flash attention: linear in s
    assert two.p2p_bytes == one.p2p_bytes / 2 == 2 * 1 * 8 * 8 / 2
    assert two.params_per_device == one.params_per_device == 600  # replicated over c
    assert two.state_bytes == one.state_bytes and two.gradient_bytes == one.gradient_bytes == 2400
    assert two.sharded_state_bytes == one.sharded_state_bytes / 2 == 12 * 600 / 2  # over d x c
    # without the distributed optimizer the state is in memoryUsageB, unsharded
    kept = cost(FAST, 2, 2, distributed_optimizer=False)
    assert kept.sharded_state_bytes == 0 and kept.state_bytes == (2 + 4 + 12) * 600


def test_workload_keys_and_record():
    w = build_workload(TOY, FAST, setup(2))
    assert w["model"]["contextParallel"] == 2
    assert list(w["nodes"][1]["TMPCs"]) == ["2", "4"]  # t_tensor 1, 2 times c = 2
    assert w["edges"][0]["communicationCost"] == 2 * 1 * 8 * 8 / 4  # p b s h / (t_tensor c)
    load_problem(w, strict=True)


def test_c1_is_the_tensor_parallel_workload():
    assert build_workload(TOY, FAST, setup(1)) == build_workload(TOY, FAST, TrainingSetup(nodes=2, global_batch=4,
                                                                                           memory_reserve_bytes=0))
    assert "contextParallel" not in build_workload(TOY, FAST, setup(1))["model"]
    assert model_parallel_node_costs(TOY, FAST, setup(1), "transformer", 2) == node_costs(TOY, FAST, setup(1),
                                                                                          "transformer", 2)


@pytest.mark.parametrize(("c", "kw", "match"), [
    (0, {}, "context_parallel must be a whole number"),
    (3, {}, r"multiple of 2 x 3"),
    (8, {}, r"multiple of 2 x 8 = 16"),
    (2, {"flash_attention": False}, "fused"),
])
def test_bad_context_parallel(c, kw, match):
    with pytest.raises(FrontendError, match=match):
        build_workload(TOY, FAST, setup(c, **kw))


def test_context_too_wide_for_the_devices():
    with pytest.raises(FrontendError, match=r"--cp\) 4: no tensor-parallel degree"):
        build_workload(TOY, FAST, TrainingSetup(nodes=1, global_batch=4, context_parallel=4))


def test_dp_and_brute_force_agree_on_a_context_parallel_workload():
    # nothing changes in the solvers: a c = 2 workload is an ordinary workload (5 nodes, degree keys 2 and 4)
    from piper import solve

    problem = load_problem(build_workload(TOY, SLOW, setup(2)), strict=True)
    dp, brute = solve(problem, solver="dp"), solve(problem, solver="brute")
    assert dp.plan is not None and dp.tps == pytest.approx(brute.tps, rel=1e-9)
    assert all(st.t in (2, 4) for st in dp.plan.stages)
