"""Megatron-Core's --recompute-modules (piper/frontend/recompute.py): what each module frees and
recomputes, pinned on hand-computed cases of real model shapes, and the refusals."""

from __future__ import annotations

import pytest

from piper.cli.main import main as piper_main
from piper.core.errors import FrontendError
from piper.frontend import costs
from piper.frontend.hardware import hardware
from piper.frontend.moe_costs import layer_costs, moe_activation_bytes, special_layer_ops
from piper.frontend.operations import Kernels, layer_ops
from piper.frontend.presets import preset
from piper.frontend.recompute import RECOMPUTE_MODULES, check_recompute_modules
from piper.frontend.workload import TrainingSetup, build_workload, model_record
from tests.fuzz.inputs import assert_contract, call

H100 = hardware("h100")


def _by_phase(ops, phase):
    return {op.name: op for op in ops if op.phase == phase}


# ---- the module list ------------------------------------------------------------------------

def test_module_lists_are_canonical_and_checked() -> None:
    assert check_recompute_modules(["moe_act", "layernorm"]) == ("layernorm", "moe_act")
    assert check_recompute_modules(list(reversed(RECOMPUTE_MODULES))) == RECOMPUTE_MODULES
    for bad, words in (([], "give at least one module"), (["mlp", "mlp"], "module 'mlp' given twice"),
                       (["attn"], "unknown module 'attn'"), ("mlp", "must be a list"), ([3], "unknown module 3")):
        with pytest.raises(FrontendError, match=words):
            check_recompute_modules(bad)
    with pytest.raises(FrontendError, match="unknown module 'x'"):
        TrainingSetup(recompute_modules=("x",))
    assert TrainingSetup(recompute_modules=("moe_act", "layernorm")) == TrainingSetup(
        recompute_modules=("layernorm", "moe_act"))


# ---- a dense layer: mlp ---------------------------------------------------------------------

def test_mlp_frees_fc1_input_and_the_inner_tensors_of_llama3_8b() -> None:
    cfg = preset("llama3-8b")  # h 4096, SwiGLU f 14336, s 8192, b 1, BF16, no dropout
    sbh = 8192 * 4096
    base = costs.layer_activation_bytes(cfg, 1, "selective", False, True)
    with_mlp = costs.layer_activation_bytes(cfg, 1, "selective", False, True, ("core_attn", "mlp"))
    # FC1's input (2 bytes) and SwiGLU's gate and up outputs (2 x 2 bytes) and their product (2 bytes), f / h wide
    assert base - with_mlp == sbh * (2 + 6 * 14336 / 4096) == 771_751_936
    # with sequence parallelism over t = 4 both parts are split 4 ways
    sp = (costs.layer_activation_bytes(cfg, 4, "selective", True, True)
          - costs.layer_activation_bytes(cfg, 4, "selective", True, True, ("core_attn", "mlp")))
    assert sp == pytest.approx(771_751_936 / 4)
    # without core_attn the core tensors stay: flash attention's fp32 log-sum-exp, 4 a / h per s b h
    no_core = costs.layer_activation_bytes(cfg, 1, "selective", False, True, ("mlp",))
    assert no_core - with_mlp == sbh * 4 * 32 / 4096


def test_mlp_runs_the_mlps_forward_again_in_the_backward_pass() -> None:
    cfg = preset("llama3-8b")
    for t, sp in ((1, False), (4, True)):
        ops = layer_ops(cfg, H100, t, "selective", sp, Kernels(), None, ("core_attn", "mlp"))
        again, forward = _by_phase(ops, "recompute"), _by_phase(ops, "forward")
        # at t = 1 the MLP has no collective
        mlp = {"norm2", "fc1", "swiglu", "fc2"} | ({"ag.fc1", "rs.fc2"} if sp else set())
        assert set(again) == mlp | {"flash"}
        for name in again:
            assert again[name].time_s == pytest.approx(forward[name].time_s)
        plain = layer_ops(cfg, H100, t, "selective", sp, Kernels(), None, ("core_attn",))
        assert set(_by_phase(plain, "recompute")) == {"flash"}
        # and nothing else changes
        assert [o for o in ops if o.phase != "recompute"] == [o for o in plain if o.phase != "recompute"]


def test_mlp_flops_are_the_mlps_products() -> None:
    cfg = preset("llama3-8b")
    fwd = costs.layer_forward_flops(cfg)
    mlp_products = 2 * 8192 * 3 * 4096 * 14336  # three matrices of h x f per token
    assert costs.layer_train_flops(cfg, "selective", ("mlp",)) == 3 * fwd + mlp_products
    assert costs.layer_train_flops(cfg, "selective", ("core_attn", "mlp")) == (
        3 * fwd + mlp_products + 4 * 8192**2 * 4096)
    assert costs.layer_train_flops(cfg, "selective") == 3 * fwd + 4 * 8192**2 * 4096


# ---- an MoE layer: layernorm, moe_act, moe ----------------------------------------------------

def _gpt_oss_costs(modules, t=1):
    cfg = preset("gpt-oss-120b")
    setup = TrainingSetup(nodes=8, global_batch=64, recompute_modules=modules, expert_parallel=8)
    return {c.tmpc_id: c for c in layer_costs(cfg, H100, setup, t, "moe", 64)}


def test_layernorm_and_moe_act_free_the_norm_output_and_the_experts_fc2_input_of_gpt_oss() -> None:
    # GPT-OSS 120B: h 2880, expert width F 2880, top-4, s 4096, b 1, BF16, no shared experts
    with_modules = _gpt_oss_costs(("layernorm", "moe_act"))
    none = with_modules["none+ep8"].activation_bytes
    selective = with_modules["selective+ep8"].activation_bytes
    norm_output = 2 * 4096 * 2880  # the pre-MLP norm's output, the router's input
    fc2_input = 4096 * 4 * 2 * 2880  # k copies of each token, F wide, 2 bytes
    # neither module recomputes the core attention, which both TMPCs keep
    assert none - selective == norm_output + fc2_input == 117_964_800
    ops = special_layer_ops(preset("gpt-oss-120b"), H100, 1, "selective", False, "moe", 8, 1,
                            modules=("layernorm", "moe_act"))
    again, forward = _by_phase(ops, "recompute"), _by_phase(ops, "forward")
    assert set(again) == {"norm2", "experts.act"}
    assert again["experts.act"].time_s == pytest.approx(forward["experts.act"].time_s)
    assert again["norm2"].time_s == pytest.approx(forward["norm2"].time_s)


def test_moe_recomputes_the_whole_block_and_keeps_only_its_input() -> None:
    cfg = preset("gpt-oss-120b")
    ops = special_layer_ops(cfg, H100, 1, "selective", False, "moe", 8, 1, modules=("moe",))
    again = [o.name for o in ops if o.phase == "recompute"]
    block = [o.name for o in ops if o.phase == "forward" and (o.name.startswith(("moe.", "experts", "a2a.", "router",
                                                                                 "permute", "unpermute")))]
    assert again == block and "a2a.dispatch" in again and "experts.fc1" in again
    moe_only = _gpt_oss_costs(("moe",))["selective+ep8"].activation_bytes
    # the dense layer's tensors less its MLP's inner ones: the block keeps nothing of its own
    dense = costs.layer_activation_bytes(cfg, 1, "none", False, True)
    inner = 4096 * (2 * 2 + 2) * cfg.ffn_hidden_size  # SwiGLU's two inputs and FC2's input, 2 bytes each
    assert moe_only == pytest.approx(dense - inner)
    assert moe_only < _gpt_oss_costs(("moe_act",))["selective+ep8"].activation_bytes


def test_moe_act_and_layernorm_are_refused_under_fp8_and_the_norm_output_is_kept_in_bf16() -> None:
    cfg = preset("qwen3-30b-a3b").with_changes(precision="fp8", layers=4, seq_length=1024)
    for modules in (("moe_act",), ("layernorm",)):
        with pytest.raises(FrontendError, match="Megatron-Core refuses moe_act and layernorm recomputation under FP8"):
            build_workload(cfg, H100, TrainingSetup(nodes=1, global_batch=8, recompute_modules=modules))
    # under FP8 the dense terms count FC1's input as its 1-byte FP8 copy; an MoE layer's router holds the
    # pre-MLP norm's output in BF16: 1 byte more per element, T h = 1024 x 2048
    setup = TrainingSetup(nodes=1, global_batch=8, expert_parallel=8)
    none = {c.tmpc_id: c.activation_bytes for c in layer_costs(cfg, H100, setup, 1, "moe", 8)}["none+ep8"]
    counted = (costs.layer_activation_bytes(cfg, 1, "none", False, True)
               + moe_activation_bytes(cfg, 1, 8, 1))
    assert none - counted == 1024 * 2048


def test_shared_experts_recompute_their_collectives_and_free_their_inner_tensors() -> None:
    cfg = preset("deepseek-v3").with_changes(layers=4)  # shared experts 2048 wide, SwiGLU, BF16, s 4096
    for t in (1, 8):
        ops = special_layer_ops(cfg, H100, t, "selective", t > 1, "moe", 16, 1, modules=("shared_experts",))
        again, forward = _by_phase(ops, "recompute"), _by_phase(ops, "forward")
        shared = {n for n in forward if n.startswith("shared.") or n in ("ag.shared", "rs.shared")}
        assert set(again) == shared and ({"ag.shared", "rs.shared"} <= shared) == (t > 1)
        assert sum(o.time_s for o in again.values()) == pytest.approx(sum(forward[n].time_s for n in shared))
    base = TrainingSetup(nodes=2, global_batch=32, expert_parallel=16)
    with_shared = TrainingSetup(nodes=2, global_batch=32, expert_parallel=16,
                                recompute_modules=("core_attn", "shared_experts"))
    a = {c.tmpc_id: c.activation_bytes for c in layer_costs(cfg, H100, base, 1, "moe", 16)}["selective+ep16"]
    b = {c.tmpc_id: c.activation_bytes for c in layer_costs(cfg, H100, with_shared, 1, "moe", 16)}["selective+ep16"]
    # SwiGLU's two inputs and FC2's input, 2 bytes each, 2048 wide; their input (the norm's output) stays
    assert a - b == 4096 * (2 + 2 + 2) * 2048 == 50_331_648


def test_nested_checkpoints_run_the_inner_modules_a_third_time() -> None:
    # Megatron-Core nests moe's checkpoint around moe_act's and shared_experts': no saving beyond moe's,
    # one more forward run of each inner part
    cfg = preset("deepseek-v3").with_changes(layers=4)
    ops = special_layer_ops(cfg, H100, 1, "selective", False, "moe", 16, 1, modules=("moe", "moe_act", "shared_experts"))
    names = [o.name for o in ops if o.phase == "recompute"]
    assert names.count("experts.act") == 2 and names.count("shared.fc1") == 2 and names.count("a2a.dispatch") == 1
    def act(modules):
        setup = TrainingSetup(nodes=2, global_batch=32, expert_parallel=16, recompute_modules=modules)
        return {c.tmpc_id: c.activation_bytes for c in layer_costs(cfg, H100, setup, 1, "moe", 16)}["selective+ep16"]
    assert act(("moe",)) == act(("moe", "moe_act", "shared_experts"))
    shared = 2 * 4096 * 3 * 7168 * 2048
    assert costs.recomputed_forward_flops(cfg, True, ("moe", "shared_experts")) == pytest.approx(
        costs.recomputed_forward_flops(cfg, True, ("moe",)) + shared)


# ---- MLA: mla_up_proj, layernorm ---------------------------------------------------------------

def test_mla_up_proj_frees_the_per_head_q_k_v_of_deepseek_v3() -> None:
    cfg = preset("deepseek-v3").with_changes(layers=4)  # a 128 heads, d_qk 192, d_v 128, s 4096, b 1
    setup = TrainingSetup(nodes=2, global_batch=32, expert_parallel=16, recompute_modules=("core_attn",))
    up = TrainingSetup(nodes=2, global_batch=32, expert_parallel=16,
                       recompute_modules=("core_attn", "layernorm", "mla_up_proj"))
    for t in (1, 2):
        base = {c.tmpc_id: c.activation_bytes for c in layer_costs(cfg, H100, setup, t, "moe", 16)}
        more = {c.tmpc_id: c.activation_bytes for c in layer_costs(cfg, H100, up, t, "moe", 16)}
        tid = "selective+sp+ep16" if t > 1 else "selective+ep16"
        qkv = 2 * 128 * (2 * 192 + 128) * 4096 / t  # Q, K, V after the rotary embedding, 2 bytes
        latent_norms = 2 * (1536 + 512) * 4096  # the latents' norm outputs (held whole on every TP device)
        norms = 2 * (2 * 4096 * 7168) / t  # the MLA input norm's and the MoE pre-MLP norm's outputs
        assert base[tid] - more[tid] == pytest.approx(qkv + latent_norms + norms)
    ops = special_layer_ops(cfg, H100, 1, "selective", False, "moe", 16, 1, modules=("mla_up_proj",))
    assert {o.name for o in ops if o.phase == "recompute"} == {"mla.q_norm", "mla.q_up", "mla.kv_norm", "mla.kv_up",
                                                               "mla.rotary"}
    flops = costs.recomputed_forward_flops(cfg, True, ("mla_up_proj",))
    assert flops == 2 * 4096 * (1536 * 128 * 192 + 512 * 128 * (128 + 128))


# ---- refusals, record, command line -----------------------------------------------------------

@pytest.mark.parametrize("model, modules, words", [
    ("llama3-8b", ("moe_act",), "recompute module 'moe_act' recomputes nothing in llama3-8b: it has no MoE layer"),
    ("llama3-8b", ("layernorm",), "its layer norms are fused into the next product"),
    ("llama3-8b", ("mla_up_proj",), "it has no multi-latent attention"),
    ("qwen3-30b-a3b", ("mlp",), "it has no dense MLP layer"),
    ("gpt-oss-120b", ("shared_experts",), "it has no shared experts"),
])
def test_a_module_that_recomputes_nothing_is_refused(model, modules, words) -> None:
    cfg = preset(model)
    cfg = cfg.with_changes(layers=4, **({"sliding_window_layers": (0, 2)} if cfg.sliding_window else {}))
    with pytest.raises(FrontendError, match=words):
        build_workload(cfg, H100, TrainingSetup(nodes=1, global_batch=8, recompute_modules=modules))


def test_the_workload_records_modules_other_than_the_default() -> None:
    cfg = preset("gpt-oss-120b")
    assert "recomputeModules" not in model_record(cfg, TrainingSetup())
    assert model_record(cfg, TrainingSetup(recompute_modules=("moe_act", "layernorm")))["recomputeModules"] == [
        "layernorm", "moe_act"]


def test_score_refuses_modules_without_selective_recomputation() -> None:
    base = ["score", "gpt-oss-120b", "--gpu", "h100", "--nodes", "8", "--tp", "1", "--pp", "4", "--ep", "8",
            "--micro-batch", "1", "--global-batch", "64"]
    rc, out, err, _ = call(piper_main, [*base, "--recompute", "full", "--recompute-modules", "moe_act"], "piper")
    assert_contract(rc, out, err, "piper")
    assert rc == 2 and err.strip().splitlines()[-1] == (
        "piper: error: --recompute-modules names what selective recomputation recomputes: it needs --recompute "
        "selective, got --recompute full")
    rc, out, err, _ = call(piper_main, [*base, "--recompute", "selective", "--recompute-modules", "moe_act", "moe_act"],
                           "piper")
    assert rc == 2 and "--recompute-modules: module 'moe_act' given twice" in err


def test_fused_attention_keeps_its_bf16_output_under_fp8() -> None:
    # the kernel's output is read by its backward pass (FlashAttention-2, Algorithm 2); under FP8 the
    # projection keeps its own FP8 copy, so recomputing the core attention frees the BF16 output too
    cfg = preset("llama3-8b").with_changes(precision="fp8")  # s 8192, h 4096, 32 heads, q width 4096
    sbh = 8192 * 4096
    freed = (costs.layer_activation_bytes(cfg, 1, "none", False, True)
             - costs.layer_activation_bytes(cfg, 1, "selective", False, True))
    assert freed == sbh * (4 * 32 / 4096 + 2 * 4096 / 4096)
    bf16 = preset("llama3-8b")
    assert (costs.layer_activation_bytes(bf16, 1, "none", False, True)
            - costs.layer_activation_bytes(bf16, 1, "selective", False, True)) == sbh * 4 * 32 / 4096


# ---- plan --search-recompute-modules ----------------------------------------------------------

def _search(setup, module_sets=None):
    from piper.core.options import BATCH_TIME, Options
    from piper.frontend.planner import ONE_RECOMPUTE_SETTING, search_plans
    from piper.solvers.registry import get_solver

    cfg = preset("llama3-8b").with_changes(seq_length=4096)
    hw = H100.with_changes(memory_bytes=24e9)  # tight: selective recomputation decides the answer
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=4)
    return search_plans(cfg, hw, setup, get_solver("dp"), options, micro_batches=(1, 2), free=False, prune=True,
                        recomputes=ONE_RECOMPUTE_SETTING, per_degree=True, module_sets=module_sets)


def test_searching_module_lists_finds_the_best_of_the_searches_of_each_list() -> None:
    """Llama 3 8B on 8 H100 held to 24 GB: the search over three lists answers the best of the three
    searches made apart (each with its list as the setup's), exactly, with that list; the workloads
    without selective recomputation are built once, those with it once per list."""
    lists = (("core_attn",), ("core_attn", "mlp"), ("mlp",))
    setup = TrainingSetup(nodes=1, global_batch=64)
    both = _search(setup, lists)
    apart = {ms: _search(TrainingSetup(nodes=1, global_batch=64, recompute_modules=ms)) for ms in lists}
    values = {ms: s.runnable.value for ms, s in apart.items()}
    best = min(values, key=values.get)
    assert both.exact_over(True) and all(s.exact_over(True) for s in apart.values())
    assert both.runnable.value == pytest.approx(values[best], rel=1e-12)
    assert len(set(values.values())) > 1  # the list matters here (else the test proves nothing)
    assert both.runnable.recompute == ("selective",) and both.runnable.recompute_modules == best
    assert both.runnable.workload["model"].get("recomputeModules", ["core_attn"]) == list(best)
    sel = [c for c in both.candidates if c.recompute == ("selective",)]
    other = [c for c in both.candidates if c.recompute != ("selective",)]
    assert {c.recompute_modules for c in sel} == set(lists) and {c.recompute_modules for c in other} == {None}
    assert len(sel) == 3 * len([c for c in apart[lists[0]].candidates if c.recompute == ("selective",)])
    # the answer priced again as `score` prices it uses its own list (a candidate's setup_for)
    assert both.runnable.setup_for(setup).recompute_modules == best


@pytest.mark.parametrize("argv, words", [
    (["--search-recompute-modules", "core_attn", "core_attn"], "list 2 ('core_attn') is list 1 again"),
    (["--search-recompute-modules", "mlp,core_attn", "core_attn,mlp"], "list 2 ('core_attn,mlp') is list 1 again"),
    (["--search-recompute-modules", "core_attn,"], "list 1 ('core_attn,'): an empty module name"),
    (["--search-recompute-modules", "banana"], "list 1 ('banana'): unknown module 'banana'"),
    (["--search-recompute-modules", "layernorm"], "recompute module 'layernorm' recomputes nothing in llama3-8b"),
    (["--search-recompute-modules", "core_attn", "--recompute-modules", "mlp"], "give one of them"),
])
def test_plan_refuses_bad_module_lists(argv, words) -> None:
    rc, out, err, _ = call(piper_main, ["plan", "llama3-8b", "--nodes", "1", *argv], "piper")
    assert_contract(rc, out, err, "piper")
    assert rc == 2 and words in err


def test_plan_json_reports_the_lists_and_the_answers_list() -> None:
    import json

    argv = ["plan", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--global-batch", "64", "--seq", "4096",
            "--memory", "24GB", "--uniform", "--json", "--search-recompute-modules", "core_attn", "mlp"]
    rc, out, err, _ = call(piper_main, argv, "piper")
    assert_contract(rc, out, err, "piper", json_out=True)
    d = json.loads(out)
    assert d["recompute_modules_searched"] == [["core_attn"], ["mlp"]]
    assert d["status"] == "optimal" and d["recompute"] == ["selective"] and d["recompute_modules"] == ["mlp"]
    picked = [c for c in d["candidates"] if c["recompute"] == ["selective"]]
    assert {tuple(c["recompute_modules"]) for c in picked} == {("core_attn",), ("mlp",)}


def test_the_answers_list_is_its_workloads_with_the_window_check(tmp_path) -> None:
    """Per-layer recomputation with the resync overlapped: plan's window check may answer with a
    candidate solved again (its resolve); the answer's list is the one its --out workload records."""
    import json

    out = tmp_path / "w.json"
    argv = ["plan", "llama3-8b", "--gpu", "h100", "--nodes", "1", "--global-batch", "64", "--seq", "4096",
            "--memory", "24GB", "--uniform", "--recompute-per-layer", "--overlap-grad-reduce", "--overlap-param-gather",
            "--json", "--out", str(out), "--search-recompute-modules", "core_attn", "mlp"]
    rc, stdout, err, _ = call(piper_main, argv, "piper")
    assert_contract(rc, stdout, err, "piper", json_out=True)
    d = json.loads(stdout)
    assert d["window_check"] is not None and d["recompute_modules"] == ["mlp"]
    assert json.loads(out.read_text())["model"]["recomputeModules"] == d["recompute_modules"]
