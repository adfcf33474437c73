"""Context parallelism of multi-head latent attention and of sliding-window layers (issue 31;
piper/frontend/context.py): MLA's ring passes the decompressed K and V; the all-to-all scheme
(``--cp-comm-type a2a``, the only one Transformer Engine runs a sliding window with) trades each
device's s / c tokens of all heads for all s tokens of a / (t c) heads. Each layer's time is checked
against a hand-built sum of its parts, the all-to-all's attention against the layer's whole FLOPs,
the refusals name their flag, and DP and brute force agree on tiny workloads of both."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piper.cli.common import run_main
from piper.cli.main import main
from piper.core.errors import FrontendError
from piper.core.options import Options
from piper.export import ExportError, export_plan
from piper.frontend.config import TransformerConfig
from piper.frontend.context import (
    hierarchical_attention,
    all_gather_attention,
    all_to_all_attention,
    all_to_all_heads_ok,
    attention_widths,
    context_resync_s,
    kv_block_bytes,
    layer_comm_type,
    ring_attention,
)
from piper.frontend.hardware import hardware
from piper.frontend.moe import MLAConfig
from piper.frontend.moe_costs import layer_tmpc_ops
from piper.frontend.operations import all_to_all_time_s, collective_time_s, node_ops
from piper.frontend.presets import preset
from piper.frontend.workload import (
    TrainingSetup,
    all_reduce_factor,
    build_workload,
    effective_hardware,
    offered_degrees,
    resync_bandwidths,
)
from piper.io.workload import load_problem
from piper.solvers.registry import solve
from tests.export_cases import args_dict, chain_plan

H100 = hardware("h100")
MLA = MLAConfig(q_lora_rank=0, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)
TOY_MLA = TransformerConfig(name="toy-mla", layers=2, hidden_size=512, attention_heads=4, kv_heads=4,
                            ffn_hidden_size=1536, vocab_size=32000, seq_length=8192, ffn_kind="swiglu",
                            norm="rmsnorm", linear_bias=False, learned_positions=False, tied_embeddings=False,
                            dropout=False, mla=MLA)
# layer 0 windowed (512 tokens), layer 1 full attention; 8 query and 4 key/value heads
TOY_WINDOW = TransformerConfig(name="toy-window", layers=2, hidden_size=1024, attention_heads=8, kv_heads=4,
                               ffn_hidden_size=3072, vocab_size=32000, seq_length=8192, ffn_kind="swiglu",
                               norm="rmsnorm", linear_bias=False, learned_positions=False, tied_embeddings=False,
                               dropout=False, sliding_window=512, sliding_window_layers=(0,))


def _layers(cfg, setup, width):
    problem = load_problem(build_workload(cfg, H100, setup, degrees=(width,)), strict=True)
    return problem, [nd for nd in problem.nodes if nd.kind == "transformer"]


def _flash(ops):
    fwd = [o for o in ops if o.kind == "attention" and o.phase == "forward"]
    bwd = [o for o in ops if o.kind == "attention" and o.phase == "backward"]
    return fwd[0], bwd[0]


def _resync(cfg, setup, width, c, tm_at_one):
    """f (c - 1) w / (c N B_c), with the bandwidth the workload uses for the width."""
    network, intra = resync_bandwidths(effective_hardware(H100, setup), setup, width)
    bandwidth = intra if width <= H100.devices_per_node else network
    return context_resync_s(all_reduce_factor(cfg, setup), tm_at_one.parameter_size, c,
                            setup.global_batch // cfg.micro_batch, bandwidth)


def _hf_config(tmp_path, *, hidden: int, heads: int, kv_heads: int, ffn: int, positions: int = 65536,
               window: bool = False) -> str:
    """A 2-layer Llama-style Hugging Face config.json in ``tmp_path`` (``window``: layer 0 attends within
    128 tokens, layer 1 fully), its path."""
    raw = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": hidden, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "intermediate_size": ffn, "vocab_size": 1000,
           "max_position_embeddings": positions, "hidden_act": "silu"}
    if window:
        raw.update(sliding_window=128, layer_types=["sliding_attention", "full_attention"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


# ---- the widths and bytes ----------------------------------------------------------------------


def test_mla_passes_its_decompressed_k_and_v_around_the_ring() -> None:
    v3 = preset("deepseek-v3").with_changes(seq_length=32768, micro_batch=1)
    # 128 heads of d_qk = 128 + 64 and d_v = 128; 2 bytes x 8,192 tokens x 128 x 320 / t_tensor 2
    assert attention_widths(v3) == (128 * 192, 128 * 192, 128 * 128, 128 * 128)
    assert kv_block_bytes(v3, 4, 2) == 2 * 8192 * 128 * 320 / 2 == 335_544_320
    llama = preset("llama3-8b").with_changes(seq_length=32768, micro_batch=2)
    # GQA: 8 key/value heads of 128: 2 bytes x 2 sequences x 16,384 tokens x 2 x 1,024 / 1
    assert kv_block_bytes(llama, 2, 1) == 2 * 2 * 16384 * 2 * 1024


def test_which_layers_run_which_scheme() -> None:
    assert layer_comm_type(None, None) == "p2p" and layer_comm_type(None, 128) == "a2a"
    assert layer_comm_type("a2a", None) == "a2a" and layer_comm_type("p2p", None) == "p2p"
    oss = preset("gpt-oss-120b")  # 64 query, 8 key/value heads
    assert all_to_all_heads_ok(oss, 8, 1) and not all_to_all_heads_ok(oss, 16, 1) and not all_to_all_heads_ok(oss, 4, 4)
    v3 = preset("deepseek-v3")  # MLA: the 128 heads are both
    assert all_to_all_heads_ok(v3, 16, 8) and not all_to_all_heads_ok(v3, 32, 8)


@pytest.mark.parametrize("window", [None, 64, 512, 4096, 8192, 20000])
@pytest.mark.parametrize(("c", "tt"), [(2, 1), (2, 2), (4, 1)])
def test_the_all_to_all_attention_does_a_cth_of_the_layers_attention(window, c, tt) -> None:
    """c devices of a / (t c) heads over all s tokens execute exactly the layer's FLOPs at c = 1."""
    cfg = (TOY_WINDOW.with_changes(sliding_window=window) if window
           else TOY_WINDOW.with_changes(sliding_window=None, sliding_window_layers=()))
    hw = H100.with_changes(kernel_overhead_s=0.0)
    local = cfg.with_changes(seq_length=cfg.seq_length // c)
    f_loc, b_loc = _flash(node_ops("transformer", local, hw, tt, "none", tt > 1, window=window))
    f_one, b_one = _flash(node_ops("transformer", cfg, hw, tt, "none", tt > 1, window=window))
    scheme = all_to_all_attention(hw, cfg, c, tt, f_loc.flops, b_loc.flops, window)
    per_flop = 1.0 / (hw.peak_flops * hw.flash_attention_efficiency)
    assert c * scheme.attention_fwd_s == pytest.approx(f_one.flops * per_flop, rel=1e-12)
    assert c * scheme.attention_bwd_s == pytest.approx(b_one.flops * per_flop, rel=1e-12)
    assert scheme.exposed_fwd_s == scheme.transfer_fwd_s > 0  # nothing hides the exchanges
    assert scheme.forward_s == scheme.attention_fwd_s + scheme.transfer_fwd_s


# ---- whole layers against the sum of their parts ------------------------------------------------


def test_an_mla_layer_at_c_is_its_local_layer_plus_the_ring() -> None:
    c, tt = 2, 2
    setup = TrainingSetup(nodes=1, global_batch=16, context_parallel=c)
    at_one = TrainingSetup(nodes=1, global_batch=16)
    local = TOY_MLA.with_changes(seq_length=TOY_MLA.seq_length // c)
    _, layers = _layers(TOY_MLA, setup, tt * c)
    _, local_layers = _layers(local, at_one, tt)
    _, whole_layers = _layers(TOY_MLA, at_one, tt)
    kv = 2 * 4096 * 4 * (96 + 64) / tt  # bytes: 4 heads of d_qk 96 and d_v 64
    x_f = collective_time_s(H100, "p2p", kv, c)
    x_b = collective_time_s(H100, "p2p", 2 * kv, c)
    for tm in layers[0].tmpcs[tt * c]:
        loc = next(x for x in local_layers[0].tmpcs[tt] if x.id == tm.id)
        whole = next(x for x in whole_layers[0].tmpcs[tt] if x.id == tm.id)
        f_op, b_op = _flash(layer_tmpc_ops(local, H100, setup, tt, "mla", tm.id))
        recomputes = tm.id.startswith(("full", "selective"))
        ring_f = (c - 1) * max(f_op.time_s, x_f)
        # backward at c = 2: K, V out, dK, dV back, each during a step: 2 max(A_b, X_f) (x_b: c > 2 only)
        ring_b = 2 * max(b_op.time_s, x_f) + (c - 2) * max(b_op.time_s, x_b) - b_op.time_s
        expected = (loc.time_per_sample + ring_f + ring_b + recomputes * ring_f
                    + _resync(TOY_MLA, setup, tt * c, c, whole))
        assert tm.time_per_sample == pytest.approx(expected, rel=1e-12), tm.id
        assert tm.memory_a == pytest.approx(loc.memory_a, rel=1e-12)  # s / c tokens' activations
        assert tm.parameter_size == whole.parameter_size  # the weights whole on every rank


@pytest.mark.parametrize("comm_type", [None, "a2a"])
def test_a_windowed_layer_runs_the_all_to_all_and_a_full_one_the_ring_unless_told(comm_type) -> None:
    c, tt = 2, 2
    setup = TrainingSetup(nodes=1, global_batch=16, context_parallel=c, cp_comm_type=comm_type)
    at_one = TrainingSetup(nodes=1, global_batch=16)
    local = TOY_WINDOW.with_changes(seq_length=4096)
    _, layers = _layers(TOY_WINDOW, setup, tt * c)
    _, local_layers = _layers(local, at_one, tt)
    _, whole_layers = _layers(TOY_WINDOW, at_one, tt)
    per_width = 2 * 4096 / tt  # bytes per unit of width: 4,096 tokens of one sequence, 2 bytes, over t
    widths = (1024, 512, 512, 1024)  # Q (8 x 128), K, V (4 x 128), the output
    exchange = sum(all_to_all_time_s(H100, per_width * w, c, tt * c) for w in widths)
    per_flop = 1.0 / (H100.peak_flops * H100.flash_attention_efficiency)
    for index, window in ((0, 512), (1, None)):
        share = (512 / 8192 - 512 ** 2 / (2 * 8192 ** 2)) if window else 0.5  # of 4 b s^2 q_dim
        flops = share * 4 * 8192 ** 2 * 1024 / (tt * c)  # the whole sequence, a / (t c) heads
        for tm in layers[index].tmpcs[tt * c]:
            loc = next(x for x in local_layers[index].tmpcs[tt] if x.id == tm.id)
            whole = next(x for x in whole_layers[index].tmpcs[tt] if x.id == tm.id)
            recompute, sp = tm.id.split("+")[0], tm.id.endswith("+sp")
            f_op, b_op = _flash(node_ops("transformer", local, H100, tt, recompute, sp, window=window))
            runs = 1 + (recompute in ("full", "selective"))  # forward passes of the attention
            if window is not None or comm_type == "a2a":
                a_f = flops * per_flop + H100.kernel_overhead_s
                a_b = 2.5 * flops * per_flop + H100.kernel_overhead_s
                extra = runs * (a_f - f_op.time_s + exchange) + (a_b - b_op.time_s + exchange)
            else:
                kv = 2 * 4096 * 2 * 512 / tt
                x_f = collective_time_s(H100, "p2p", kv, c)
                extra = ((runs * (c - 1)) * max(f_op.time_s, x_f)
                         + 2 * max(b_op.time_s, x_f) + (c - 2) * max(b_op.time_s, collective_time_s(
                             H100, "p2p", 2 * kv, c)) - b_op.time_s)
            expected = loc.time_per_sample + extra + _resync(TOY_WINDOW, setup, tt * c, c, whole)
            assert tm.time_per_sample == pytest.approx(expected, rel=1e-12), (index, tm.id)
            assert tm.memory_a == pytest.approx(loc.memory_a, rel=1e-12)


def test_the_all_gather_scheme_is_its_local_layer_plus_the_exposed_gathers() -> None:
    """Llama 3's scheme on both layers of the toy (the windowed one too): the kernel's share as the
    all-to-all's, the two all-gathers of K and V forward, again backward with the reduce-scatters of
    dK and dV, all exposed; priced by hand from the collective formula."""
    c, tt = 2, 2
    setup = TrainingSetup(nodes=1, global_batch=16, context_parallel=c, cp_comm_type="allgather")
    at_one = TrainingSetup(nodes=1, global_batch=16)
    local = TOY_WINDOW.with_changes(seq_length=4096)
    _, layers = _layers(TOY_WINDOW, setup, tt * c)
    _, local_layers = _layers(local, at_one, tt)
    _, whole_layers = _layers(TOY_WINDOW, at_one, tt)
    whole_kv = 2 * 8192 * 512 / tt  # bytes of the gathered K (and of V): all 8,192 tokens of 2 kv heads of 128
    bus = H100.link_bandwidth("nvlink")
    gather = 2 * (H100.link_latency_s("nvlink")
                  + 0.5 * whole_kv / (bus * H100.collective_efficiency("nvlink", "all_gather")))
    scatter = 2 * (H100.link_latency_s("nvlink")
                   + 0.5 * whole_kv / (bus * H100.collective_efficiency("nvlink", "reduce_scatter")))
    per_flop = 1.0 / (H100.peak_flops * H100.flash_attention_efficiency)
    for index, window in ((0, 512), (1, None)):
        share = (512 / 8192 - 512 ** 2 / (2 * 8192 ** 2)) if window else 0.5
        flops = share * 4 * 8192 ** 2 * 1024 / (tt * c)  # a c-th of the layer's causal (or banded) pairs
        for tm in layers[index].tmpcs[tt * c]:
            loc = next(x for x in local_layers[index].tmpcs[tt] if x.id == tm.id)
            whole = next(x for x in whole_layers[index].tmpcs[tt] if x.id == tm.id)
            recompute, sp = tm.id.split("+")[0], tm.id.endswith("+sp")
            f_op, b_op = _flash(node_ops("transformer", local, H100, tt, recompute, sp, window=window))
            runs = 1 + (recompute in ("full", "selective"))
            a_f = flops * per_flop + H100.kernel_overhead_s
            a_b = 2.5 * flops * per_flop + H100.kernel_overhead_s
            extra = runs * (a_f - f_op.time_s + gather) + (a_b - b_op.time_s + gather + scatter)
            expected = loc.time_per_sample + extra + _resync(TOY_WINDOW, setup, tt * c, c, whole)
            assert tm.time_per_sample == pytest.approx(expected, rel=1e-12), (index, tm.id)
            assert tm.memory_a == pytest.approx(loc.memory_a, rel=1e-12)
    # no requirement on the heads: t 2 x c 4 splits 4 key/value heads half a head each, and still runs
    scheme = all_gather_attention(H100, TOY_WINDOW, 4, 2, 1e12, 2.5e12, "nvlink", 512)
    assert scheme.exposed_bwd_s == scheme.transfer_bwd_s > scheme.transfer_fwd_s > 0


def test_the_hierarchical_scheme_is_an_all_to_all_around_a_shorter_ring() -> None:
    """a2a+p2p at c = 4 = c1 2 x c2 2 on the toy's full-attention layer (8 query, 4 key/value heads,
    t = 2): the all-to-all of Q, K, V, O among 2 devices, then a ring of 2 steps of twice the local
    kernel each, passing the plain ring's K, V block; priced by hand."""
    dense = TOY_WINDOW.with_changes(sliding_window=None, sliding_window_layers=())
    c, c1, tt = 4, 2, 2
    setup = TrainingSetup(nodes=1, global_batch=16, context_parallel=c, cp_comm_type="a2a+p2p", cp_a2a_size=c1)
    hw = hardware("h100-sxm-80gb", None, devices_per_node=8)
    local = dense.with_changes(seq_length=8192 // c)
    problem = load_problem(build_workload(dense, hw, setup, degrees=(tt * c,)), strict=True)
    layer = [nd for nd in problem.nodes if nd.kind == "transformer"][0].tmpcs[tt * c]
    local_layer = [nd for nd in load_problem(build_workload(local, hw, TrainingSetup(nodes=1, global_batch=16),
                                                            degrees=(tt,)), strict=True).nodes
                   if nd.kind == "transformer"][0].tmpcs[tt]
    whole = [nd for nd in load_problem(build_workload(dense, hw, TrainingSetup(nodes=1, global_batch=16),
                                                      degrees=(tt,)), strict=True).nodes
             if nd.kind == "transformer"][0].tmpcs[tt]
    per_width = 2 * 2048 / tt  # bytes per unit of width: 2,048 tokens of one sequence, 2 bytes, over t
    exchange = sum(all_to_all_time_s(hw, per_width * w, c1, tt * c1) for w in (1024, 512, 512, 1024))
    kv = 2 * 2048 * 2 * 512 / tt  # the plain ring's block at c = 4: K and V of 2,048 tokens
    x_f, x_b = collective_time_s(hw, "p2p", kv, 2), collective_time_s(hw, "p2p", 2 * kv, 2)
    per_flop = 1.0 / (hw.peak_flops * hw.flash_attention_efficiency)
    for tm in layer:
        loc = next(x for x in local_layer if x.id == tm.id)
        who = next(x for x in whole if x.id == tm.id)
        recompute, sp = tm.id.split("+")[0], tm.id.endswith("+sp")
        f_op, b_op = _flash(node_ops("transformer", local, hw, tt, recompute, sp))
        step_f = c1 * f_op.flops * per_flop + hw.kernel_overhead_s
        step_b = c1 * b_op.flops * per_flop + hw.kernel_overhead_s
        fwd = exchange + step_f + (c // c1 - 1) * max(step_f, x_f)
        bwd = exchange + 2 * max(step_b, x_f) + (c // c1 - 2) * max(step_b, x_b)
        runs = 1 + (recompute in ("full", "selective"))
        extra = runs * (fwd - f_op.time_s) + (bwd - b_op.time_s)
        network, intra = resync_bandwidths(effective_hardware(hw, setup), setup, tt * c)
        resync = context_resync_s(all_reduce_factor(dense, setup), who.parameter_size, c, 16, intra)
        assert tm.time_per_sample == pytest.approx(loc.time_per_sample + extra + resync, rel=1e-12), tm.id
    assert problem.extra["model"]["cpCommTypes"] == ["a2a+p2p"] * 2 and problem.extra["model"]["cpA2aSize"] == 2
    a = args_dict(export_plan(problem, chain_plan(problem, [2], 1, tt * c, "none+sp", other="none+sp"),
                              "megatron").data["args"])
    assert a["--cp-comm-type"] == "a2a+p2p" and a["--context-parallel-size"] == "4"
    argv = export_plan(problem, chain_plan(problem, [2], 1, tt * c, "none+sp", other="none+sp"), "megatron").data["args"]
    at = argv.index("--hierarchical-context-parallel-sizes")
    assert argv[at + 1:at + 3] == ["2", "2"]
    with pytest.raises(ExportError, match="an all-to-all scheme \\(--cp-comm-type a2a\\+p2p\\)"):
        export_plan(problem, chain_plan(problem, [2], 1, tt * c, "none+sp", other="none+sp"), "torchtitan")
    # the heads: 4 key/value heads at t 4 do not split c1 = 2 ways; sizes that do not divide c; no window
    with pytest.raises(FrontendError, match="must divide by t x c1 = 8"):
        hierarchical_attention(hw, dense, c, c1, 4, 1e12, 2.5e12, "nvlink")
    for size, match in ((3, "must divide --cp 4"), (4, "strictly between 1 and 4"), (None, "needs "
                         "--hierarchical-context-parallel-sizes")):
        with pytest.raises(FrontendError, match=match):
            build_workload(dense, hw, TrainingSetup(nodes=1, global_batch=16, context_parallel=c,
                                                    cp_comm_type="a2a+p2p", cp_a2a_size=size))
    with pytest.raises(FrontendError, match="--cp-comm-type a2a\\+p2p: toy-window's layer 0"):
        build_workload(TOY_WINDOW, hw, setup)
    with pytest.raises(FrontendError, match="needs --cp-comm-type a2a\\+p2p"):
        build_workload(dense, hw, TrainingSetup(nodes=1, global_batch=16, context_parallel=c, cp_a2a_size=2))


# ---- refusals ----------------------------------------------------------------------------------


def test_the_ring_is_refused_for_a_sliding_window_and_the_all_to_all_for_heads_that_do_not_split() -> None:
    with pytest.raises(FrontendError, match="--cp-comm-type p2p: toy-window's layer 0 .*sliding window of 512"):
        build_workload(TOY_WINDOW, H100, TrainingSetup(nodes=1, global_batch=8, context_parallel=2,
                                                       cp_comm_type="p2p"))
    with pytest.raises(FrontendError, match="cp_comm_type must be one of p2p, a2a, allgather, a2a\\+p2p or None, got 'ring'"):
        TrainingSetup(cp_comm_type="ring")
    # 4 key/value heads: t 2 x c 4 leaves half a head per device
    with pytest.raises(FrontendError, match="--cp 4 by all-to-all .*the sliding-window layers need it.* "
                                            "8 query and 4 key/value heads must divide by t x c = 8"):
        build_workload(TOY_WINDOW, H100, TrainingSetup(nodes=1, global_batch=8, context_parallel=4), degrees=(8,))
    with pytest.raises(FrontendError, match="use --cp-comm-type allgather, or a smaller --cp or --tp$"):  # windows
        all_to_all_attention(H100, TOY_WINDOW, 8, 1, 1e12, 2.5e12, 512)
    with pytest.raises(FrontendError, match="use --cp-comm-type p2p or allgather, or a smaller --cp or --tp$"):
        all_to_all_attention(H100, TOY_MLA, 8, 1, 1e12, 2.5e12)
    # the search's workload offers only the degrees whose heads split: t 1 x c 4
    problem = load_problem(build_workload(TOY_WINDOW, H100, TrainingSetup(nodes=1, global_batch=8,
                                                                          context_parallel=4)), strict=True)
    assert sorted(problem.degrees) == [4]


def test_the_command_line_names_the_flag(capsys) -> None:
    common = ["gpt-oss-120b", "--gpu", "h100", "--nodes", "8", "--global-batch", "64"]
    assert run_main(main, ["score", *common, "--tp", "1", "--pp", "4", "--ep", "8", "--cp-comm-type", "a2a"]) == 2
    err = capsys.readouterr().err
    assert "--cp-comm-type a2a needs context parallelism: give --cp C > 1" in err and err.count("\n") == 1
    assert run_main(main, ["score", *common, "--seq", "65536", "--tp", "1", "--cp", "16", "--pp", "4", "--ep", "8",
                           "--recompute", "full"]) == 2
    err = capsys.readouterr().err
    assert "--cp 16 by all-to-all" in err and "8 key/value heads" in err and err.count("\n") == 1
    assert run_main(main, ["plan", *common, "--cp-comm-type", "a2a"]) == 2  # 4,096 tokens: c = 1 only
    err = capsys.readouterr().err
    assert "no context-parallel size above 1 is searched" in err and err.count("\n") == 1
    llama = ["llama3-8b", "--gpu", "h100", "--nodes", "2", "--global-batch", "16", "--seq", "32768"]
    assert run_main(main, ["score", *llama, "--tp", "2", "--cp", "8", "--cp-comm-type", "a2a+p2p",
                           "--hierarchical-context-parallel-sizes", "2", "2"]) == 2
    err = capsys.readouterr().err
    assert "their product 4 must be --cp 8" in err and err.count("\n") == 1
    assert run_main(main, ["score", *llama, "--tp", "2", "--cp", "8", "--cp-comm-type", "a2a+p2p"]) == 2
    err = capsys.readouterr().err
    assert "needs --hierarchical-context-parallel-sizes" in err and err.count("\n") == 1
    # a level of one device: the flag is named (was the setup's field, "cp_a2a_size must be ...")
    for cmd in ("score", "plan"):
        for sizes in (["1", "8"], ["8", "1"]):
            assert run_main(main, [cmd, *llama, "--tp", "2", "--cp", "8", "--cp-comm-type", "a2a+p2p",
                                   "--hierarchical-context-parallel-sizes", *sizes]) == 2
            err = capsys.readouterr().err
            assert "argument --hierarchical-context-parallel-sizes: must be >= 2, got 1" in err, err
            assert err.count("\n") == 1
    # the sizes fix c for plan: 2 x 4 = 8, the search's only c
    assert run_main(main, ["plan", *llama, "--uniform", "--json", "--cp-comm-type", "a2a+p2p",
                           "--hierarchical-context-parallel-sizes", "2", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context_parallel_searched"] == [8] and set(out["cp_comm_types"]) == {"a2a+p2p"}
    assert out["hierarchical_context_parallel_sizes"] == [2, 4]
    # score echoes the sizes (JSON and the context line); other schemes carry none
    score = ["score", *llama, "--tp", "1", "--cp", "8", "--pp", "1", "--recompute", "full"]
    assert run_main(main, [*score, "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "4", "2",
                           "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hierarchical_context_parallel_sizes"] == [4, 2]
    assert run_main(main, [*score, "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "4", "2"]) == 0
    assert "C1 x C2 = 4 x 2" in capsys.readouterr().out
    assert run_main(main, [*score, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hierarchical_context_parallel_sizes"] is None


def test_score_prices_gpt_oss_at_long_context(capsys) -> None:
    args = ["score", "gpt-oss-120b", "--gpu", "h100", "--nodes", "8", "--global-batch", "64", "--seq", "65536",
            "--tp", "1", "--cp", "8", "--pp", "4", "--ep", "8", "--recompute", "full", "--json"]
    assert run_main(main, args) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert run_main(main, [*args, "--cp-comm-type", "a2a"]) == 0
    all_a2a = json.loads(capsys.readouterr().out)
    assert mixed["fits"] and all_a2a["fits"]
    assert mixed["cp_comm_types"] == ["a2a", "p2p"] * 18 and all_a2a["cp_comm_types"] == ["a2a"] * 36
    # the full-attention layers differ only in their scheme: the ring hides its transfers here
    assert mixed["batch_time_s"] < all_a2a["batch_time_s"]
    assert mixed["max_memory_bytes"] == pytest.approx(all_a2a["max_memory_bytes"], rel=1e-12)


# ---- the solvers agree; the export writes the schemes ------------------------------------------


@pytest.mark.parametrize("cfg", [TOY_MLA, TOY_WINDOW], ids=["mla", "window"])
def test_dp_and_brute_force_agree_with_context_parallelism(cfg) -> None:
    hw = hardware("h100-sxm-80gb", None, devices_per_node=8, memory_bytes=6e9)
    problem = load_problem(build_workload(cfg, hw, TrainingSetup(nodes=1, global_batch=8, context_parallel=2)),
                           strict=True)
    for options in (Options(uniform=True), Options()):
        dp, brute = solve(problem, options, "dp"), solve(problem, options, "brute")
        assert dp.plan is not None and dp.status.value == "optimal"
        assert dp.value == pytest.approx(brute.value, rel=1e-9)


def test_the_megatron_export_writes_each_layers_scheme() -> None:
    setup = TrainingSetup(nodes=1, global_batch=32, context_parallel=2)
    problem = load_problem(build_workload(TOY_WINDOW, H100, setup), strict=True)
    assert problem.extra["model"]["cpCommTypes"] == ["a2a", "p2p"]
    plan = chain_plan(problem, [1, 1], 1, 4, "none+sp", other="none+sp")
    argv = export_plan(problem, plan, "megatron").data["args"]
    at = argv.index("--cp-comm-type")
    assert argv[at + 1:at + 3] == ["a2a", "p2p"] and argv[at + 3].startswith("--")
    with pytest.raises(ExportError, match="an all-to-all scheme .*on 1 of 2 layers.*--cp-comm-type allgather, or export"):
        export_plan(problem, plan, "torchtitan")
    every = load_problem(build_workload(TOY_WINDOW, H100, TrainingSetup(nodes=1, global_batch=32, context_parallel=2,
                                                                        cp_comm_type="a2a")), strict=True)
    a = args_dict(export_plan(every, chain_plan(every, [1, 1], 1, 4, "none+sp", other="none+sp"), "megatron")
                  .data["args"])
    assert a["--cp-comm-type"] == "a2a"
    plain = load_problem(build_workload(TOY_WINDOW.with_changes(sliding_window=None, sliding_window_layers=()), H100,
                                        setup), strict=True)
    assert "cpCommTypes" not in plain.extra["model"]  # the ring everywhere: the workload as before


def test_torchtitan_writes_the_rotate_method_of_the_one_scheme() -> None:
    import tomllib

    dense = TOY_WINDOW.with_changes(sliding_window=None, sliding_window_layers=())
    for comm, rotate in ((None, "alltoall"), ("allgather", "allgather")):
        setup = TrainingSetup(nodes=1, global_batch=32, context_parallel=2, cp_comm_type=comm)
        problem = load_problem(build_workload(dense, H100, setup), strict=True)
        ex = export_plan(problem, chain_plan(problem, [1, 1], 1, 4, "none+sp", other="none+sp"), "torchtitan")
        par = tomllib.loads(ex.text)["parallelism"]
        assert (par["context_parallel_degree"], par["context_parallel_rotate_method"]) == (2, rotate)
        argv = export_plan(problem, chain_plan(problem, [1, 1], 1, 4, "none+sp", other="none+sp"),
                           "megatron").data["args"]
        assert args_dict(argv)["--cp-comm-type"] == {None: "p2p", "allgather": "all_gather"}[comm]  # TE's name
    # a workload whose layers mix the all-gather and the ring (written by hand: the front end gives one
    # scheme, or the all-to-all on windows): two settings torchtitan cannot express
    workload = build_workload(TOY_WINDOW, H100, TrainingSetup(nodes=1, global_batch=32, context_parallel=2,
                                                              cp_comm_type="allgather"))
    assert workload["model"]["cpCommTypes"] == ["allgather", "allgather"]
    workload["model"]["cpCommTypes"] = ["allgather", "p2p"]
    mixed = load_problem(workload, strict=True)
    with pytest.raises(ExportError, match="mixes schemes over its layers \\(allgather, p2p\\)"):
        export_plan(mixed, chain_plan(mixed, [1, 1], 1, 4, "none+sp", other="none+sp"), "torchtitan")
    argv = export_plan(mixed, chain_plan(mixed, [1, 1], 1, 4, "none+sp", other="none+sp"), "megatron").data["args"]
    at = argv.index("--cp-comm-type")
    assert argv[at + 1:at + 3] == ["all_gather", "p2p"]  # Transformer Engine's name
    workload["model"]["cpCommTypes"] = ["ring", "p2p"]
    with pytest.raises(ExportError, match="cpCommTypes must be a list of 2 of p2p, a2a, allgather"):
        export_plan(load_problem(workload, strict=True), chain_plan(mixed, [1, 1], 1, 4, "none+sp", other="none+sp"),
                    "megatron")


def test_plan_searches_only_the_degrees_whose_heads_split(tmp_path, capsys) -> None:
    """``plan`` builds one workload per degree: with 2 key/value heads and c = 2 only t_tensor = 1
    is offered (t_tensor = 2 would leave half a head per device); it used to stop with an error."""
    oss = preset("gpt-oss-120b")
    assert offered_degrees(oss, H100, TrainingSetup(nodes=8, context_parallel=2)) == [2, 4, 8]  # 8 kv heads
    path = _hf_config(tmp_path, hidden=256, heads=4, kv_heads=2, ffn=512, positions=16384, window=True)
    assert run_main(main, ["plan", path, "--gpu", "h100", "--nodes", "1", "--seq", "16384", "--global-batch",
                           "8", "--cp", "2", "--uniform", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context_parallel"] == 2
    assert {st["tensorParallelDegree"] for st in out["plan"]["stages"]} == {2}  # t_tensor 1 x c 2


def test_plan_searches_the_schemes_with_any(tmp_path, capsys) -> None:
    """``--cp-comm-type any``: one workload per scheme at c > 1 (a2a+p2p: one per all-to-all size C1);
    the answer is the best of the searches made with each scheme fixed (a2a+p2p with each of its
    sizes), and names its scheme; ``--cp-comm-type a2a+p2p`` without sizes is the best of its sizes."""
    path = _hf_config(tmp_path, hidden=512, heads=8, kv_heads=8, ffn=1024)
    # 1 GB per device: the 65,536-token sequence needs context parallelism (c = 4)
    common = ["plan", path, "--gpu", "h100", "--nodes", "1", "--seq", "65536", "--global-batch", "8",
              "--memory", "1GB", "--uniform", "--json"]
    values = {}
    for scheme in ("p2p", "a2a", "allgather"):
        assert run_main(main, [*common, "--cp-comm-type", scheme]) == 0
        values[scheme] = json.loads(capsys.readouterr().out)["batch_time_s"]
    # c = 4 and 8 on one node of 8 (c = 2 has no C1 strictly between 1 and 2)
    for sizes in ((2, 2), (2, 4), (4, 2)):
        assert run_main(main, [*common, "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes",
                               *map(str, sizes)]) == 0
        one = json.loads(capsys.readouterr().out)
        assert one["hierarchical_context_parallel_sizes"] == list(sizes)
        values[sizes] = one["batch_time_s"]
    assert run_main(main, [*common, "--cp-comm-type", "a2a+p2p"]) == 0
    hier = json.loads(capsys.readouterr().out)
    assert hier["cp_comm_type_searched"] == ["a2a+p2p"]
    assert {(c["context_parallel"], c["cp_a2a_size"]) for c in hier["candidates"] if c["context_parallel"] > 1} == {
        (4, 2), (8, 2), (8, 4)}
    # the best of its sizes, or c = 1 (searched too)
    hier_best = min(v for k, v in values.items() if isinstance(k, tuple))
    assert hier["batch_time_s"] <= hier_best * (1 + 1e-12)
    if hier["context_parallel"] > 1:
        assert hier["batch_time_s"] == pytest.approx(hier_best, rel=1e-12)
        assert tuple(hier["hierarchical_context_parallel_sizes"]) == min(
            (k for k in values if isinstance(k, tuple)), key=values.get)
    assert run_main(main, [*common, "--cp-comm-type", "any"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cp_comm_type_searched"] == ["default", "a2a", "allgather", "a2a+p2p"]
    assert {c["cp_comm_type"] for c in out["candidates"] if c["context_parallel"] > 1} == {
        None, "a2a", "allgather", "a2a+p2p"}
    assert {c["cp_a2a_size"] for c in out["candidates"] if c["cp_comm_type"] == "a2a+p2p"} == {2, 4}
    assert out["batch_time_s"] == pytest.approx(min(values.values()), rel=1e-12)
    winner = min(values, key=values.get)
    assert out["context_parallel"] > 1
    if isinstance(winner, tuple):
        assert set(out["cp_comm_types"]) == {"a2a+p2p"}
        assert out["hierarchical_context_parallel_sizes"] == list(winner)
    else:
        assert set(out["cp_comm_types"]) == {winner} and out["hierarchical_context_parallel_sizes"] is None
    assert len(set(values.values())) == len(values)  # the schemes and sizes price differently here


def test_hierarchical_sizes_searched_and_refused(tmp_path, capsys) -> None:
    """The C1 a search of a2a+p2p tries: the divisors of c strictly between 1 and c, none for a model
    with sliding-window layers; ``plan --cp-comm-type a2a+p2p`` without sizes refuses, in one line
    naming the flag, a windowed model and a c with no such divisor."""
    from piper.frontend.context import hierarchical_a2a_sizes

    full = TOY_WINDOW.with_changes(sliding_window=None, sliding_window_layers=())
    assert hierarchical_a2a_sizes(full, 2) == [] and hierarchical_a2a_sizes(full, 4) == [2]
    assert hierarchical_a2a_sizes(full, 16) == [2, 4, 8] and hierarchical_a2a_sizes(full, 12) == [2, 3, 4, 6]
    assert hierarchical_a2a_sizes(TOY_WINDOW, 16) == []
    path = _hf_config(tmp_path, hidden=256, heads=4, kv_heads=2, ffn=512)
    common = ["plan", path, "--gpu", "h100", "--nodes", "1", "--seq", "65536", "--global-batch", "8",
              "--uniform", "--cp-comm-type", "a2a+p2p"]
    assert run_main(main, [*common, "--cp", "2"]) == 2
    assert "--cp-comm-type a2a+p2p at --cp 2: no all-to-all size C1" in capsys.readouterr().err
    assert _hf_config(tmp_path, hidden=256, heads=4, kv_heads=2, ffn=512, window=True) == path  # rewritten
    assert run_main(main, common) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cp-comm-type a2a+p2p" in err and "sliding window" in err


@settings(max_examples=60, deadline=None)
@given(heads=st.sampled_from([4, 8, 16, 32]), kv_share=st.sampled_from([1, 2, 4, 8]),
       seq=st.sampled_from([4096, 8192, 32768, 131072]), window=st.one_of(st.none(), st.integers(1, 200_000)),
       c=st.sampled_from([2, 4, 8, 16]), tt=st.sampled_from([1, 2, 4]), b=st.sampled_from([1, 2]))
def test_exchanged_schemes_do_a_cth_of_the_attention_and_cost_at_least_it(heads, kv_share, seq, window, c, tt,
                                                                          b) -> None:
    """For any shape: c devices of the all-to-all or the all-gather execute exactly the layer's
    attention FLOPs at c = 1; their exchanges take time; the ring's step never beats its attention."""
    kv = max(1, heads // kv_share)
    cfg = TOY_WINDOW.with_changes(attention_heads=heads, kv_heads=kv, hidden_size=64 * heads, seq_length=seq,
                                  micro_batch=b, sliding_window=window, sliding_window_layers=(0,) if window else ())
    if seq % (2 * c) or heads % tt:
        return
    hw = H100.with_changes(kernel_overhead_s=0.0)
    local = cfg.with_changes(seq_length=seq // c)
    f_loc, b_loc = _flash(node_ops("transformer", local, hw, tt, "none", tt > 1, window=window))
    f_one, b_one = _flash(node_ops("transformer", cfg, hw, tt, "none", tt > 1, window=window))
    per_flop = 1.0 / (hw.peak_flops * hw.flash_attention_efficiency)
    gather = all_gather_attention(hw, cfg, c, tt, f_loc.flops, b_loc.flops, "nvlink", window)
    schemes = [gather]
    if all_to_all_heads_ok(cfg, c, tt):
        schemes.append(all_to_all_attention(hw, cfg, c, tt, f_loc.flops, b_loc.flops, window))
    for scheme in schemes:
        assert c * scheme.attention_fwd_s == pytest.approx(f_one.flops * per_flop, rel=1e-9)
        assert c * scheme.attention_bwd_s == pytest.approx(b_one.flops * per_flop, rel=1e-9)
        assert scheme.forward_s > scheme.attention_fwd_s and scheme.backward_s > scheme.attention_bwd_s
    assert gather.transfer_bwd_s > gather.transfer_fwd_s  # the gathers again, then the reduce-scatters
    ring = ring_attention(hw, c, f_loc.time_s, b_loc.time_s, kv_block_bytes(cfg, c, tt), "nvlink")
    assert ring.forward_s >= c * f_loc.time_s and ring.exposed_fwd_s >= 0


def test_search_plans_solves_each_scheme_free_and_uniform() -> None:
    """The free searches run per scheme too, ordered by the uniform values of the same (c, scheme, e,
    b, recomputation); every candidate's workload records its scheme."""
    from piper.frontend.planner import search_plans
    from piper.solvers.registry import get_solver

    cfg = TOY_WINDOW.with_changes(sliding_window=None, sliding_window_layers=(), seq_length=16384)
    hw = hardware("h100-sxm-80gb", None, devices_per_node=8, memory_bytes=3e9)
    setup = TrainingSetup(nodes=1, global_batch=8)
    search = search_plans(cfg, hw, setup, get_solver("dp"), Options(objective="batch-time", progress=False),
                          micro_batches=(1,), free=True, context_parallels=(1, 2), cp_comm_types=(None, "allgather"))
    seen = {(c.context_parallel, c.cp_comm_type, c.uniform) for c in search.candidates}
    assert seen == {(1, None, True), (1, None, False), (2, None, True), (2, None, False),
                    (2, "allgather", True), (2, "allgather", False)}
    for c in search.candidates:
        recorded = c.workload["model"].get("cpCommTypes")
        assert recorded == (["allgather"] * 2 if c.cp_comm_type == "allgather" else None)


def test_mla_under_an_unchecked_scheme_carries_a_caveat() -> None:
    from piper.frontend.caveats import mla_context_caveat, prediction_caveats

    assert mla_context_caveat(TOY_MLA, 2, None) is None and mla_context_caveat(TOY_MLA, 2, "p2p") is None
    # Transformer Engine runs MLA under the hierarchical scheme (its ring class), so no caveat there
    assert mla_context_caveat(TOY_MLA, 4, "a2a+p2p") is None
    assert mla_context_caveat(TOY_MLA, 1, "a2a") is None and mla_context_caveat(TOY_WINDOW, 2, "a2a") is None
    for scheme in ("a2a", "allgather"):
        line = mla_context_caveat(TOY_MLA, 2, scheme)
        assert line is not None and f"--cp-comm-type {scheme}" in line and "p2p or a2a+p2p" in line
        assert line in prediction_caveats(TOY_MLA, H100, 2, scheme)


@settings(max_examples=40, deadline=None)
@given(heads=st.sampled_from([2, 4, 8, 16]), kv_share=st.sampled_from([1, 2, 4, 8]), mla=st.booleans(),
       window=st.booleans(), scheme=st.sampled_from([None, "p2p", "a2a", "allgather"]),
       nodes=st.sampled_from([1, 2]), per_node=st.sampled_from([2, 4, 8]))
def test_every_searched_c_and_degree_builds(heads, kv_share, mla, window, scheme, nodes, per_node) -> None:
    """What the planner searches can be built: for every c of context_parallel_choices and every
    degree offered_degrees gives, the per-degree workload builds (the bug this guards: GPT-OSS's plan
    stopped on a degree whose heads did not split c ways)."""
    from piper.core.errors import ModelConfigError
    from piper.frontend.planner import context_parallel_choices

    try:
        cfg = TOY_WINDOW.with_changes(
            attention_heads=heads, kv_heads=heads if mla else max(1, heads // kv_share), hidden_size=64 * heads,
            seq_length=32768, mla=MLA if mla else None, sliding_window=512 if window else None,
            sliding_window_layers=(0,) if window else ())
    except ModelConfigError:
        return  # MLA with a sliding window: refused by the config (tested elsewhere)
    hw = hardware("h100-sxm-80gb", None, devices_per_node=per_node)
    setup = TrainingSetup(nodes=nodes, global_batch=8, cp_comm_type=scheme)
    if scheme == "p2p" and window:
        with pytest.raises(FrontendError, match="--cp-comm-type p2p"):
            build_workload(cfg, hw, replace(setup, context_parallel=2))
        return
    for c in context_parallel_choices(cfg, hw, setup, None):
        at_c = replace(setup, context_parallel=c)
        degrees = offered_degrees(cfg, hw, at_c)
        assert degrees, c
        for t in degrees:
            load_problem(build_workload(cfg, hw, at_c, degrees=(t,), recompute=("none",)), strict=True)


def test_any_searches_each_schemes_own_context_sizes(tmp_path, capsys) -> None:
    """A sliding-window model with 2 key/value heads: its default scheme (the all-to-all on the
    windowed layer) allows c = 2 only; the all-gather has no bound on the heads, so ``any`` also
    searches c = 4 and 8 (8 devices)."""
    path = _hf_config(tmp_path, hidden=256, heads=4, kv_heads=2, ffn=512, window=True)
    common = ["plan", path, "--gpu", "h100", "--nodes", "1", "--seq", "65536", "--global-batch", "8",
              "--uniform", "--json"]
    assert run_main(main, common) == 0
    assert json.loads(capsys.readouterr().out)["context_parallel_searched"] == [1, 2]
    assert run_main(main, [*common, "--cp-comm-type", "any"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context_parallel_searched"] == [1, 2, 4, 8]
    at = {(c["context_parallel"], c["cp_comm_type"]) for c in out["candidates"]}
    assert (4, "allgather") in at and (8, "allgather") in at and (4, None) not in at and (4, "a2a") not in at
