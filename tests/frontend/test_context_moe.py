"""Context parallelism of mixture-of-experts models (issue 31): an MoE layer at width t_tensor x c
holds the activations of s / c tokens and its experts' weights, state and copies as at c = 1
(Megatron-Core lays expert parallelism over the data- and context-parallel ranks); the solvers
agree on a tiny MoE model with c = 2; the planner searches c for MoE, MLA and sliding-window models
(tests/frontend/test_context_schemes.py prices the last two)."""

from __future__ import annotations

import pytest

from piper.core.evaluate import check_plan
from piper.core.options import Options
from piper.frontend.hardware import hardware
from piper.frontend.hf import config_from_hf
from piper.frontend.planner import context_parallel_choices
from piper.frontend.presets import preset
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from piper.solvers.registry import solve
from tests.frontend.test_moe_plan import TINY

H100 = hardware("h100")


def _layer(cfg, c: int, width: int, e: int = 8):
    setup = TrainingSetup(nodes=2, global_batch=64, context_parallel=c, expert_parallel=e, distributed_optimizer=True)
    p = load_problem(build_workload(cfg, H100, setup, degrees=(width,)), strict=True)
    return [nd for nd in p.nodes if nd.kind == "transformer"][-1].tmpcs[width]


@pytest.mark.parametrize("c", [2, 4])
def test_an_moe_layer_at_c_holds_a_cth_of_the_activations_and_all_of_its_experts(c: int) -> None:
    cfg = preset("qwen3-30b-a3b").with_changes(seq_length=32768, micro_batch=1)
    for tt in (1, 2):
        at_one = {tm.id: tm for tm in _layer(cfg, 1, tt)}
        at_c = {tm.id: tm for tm in _layer(cfg, c, tt * c)}
        assert set(at_c) == set(at_one) and at_c
        for tid, tm in at_c.items():
            one = at_one[tid]
            # activations: linear in the tokens (flash attention, the experts' routed rows): exactly 1 / c
            assert tm.memory_a == pytest.approx(one.memory_a / c, rel=1e-12)
            # the dense weights are whole on every context-parallel rank, their optimizer state split over c
            assert tm.parameter_size == one.parameter_size
            assert tm.memory_sharded == pytest.approx(one.memory_sharded / c, rel=1e-12)
            # the experts as at c = 1: the evaluator splits their state over the r = d t_tensor c / (e e_t) copies
            assert (tm.expert_parallel, tm.expert_tensor_parallel, tm.expert_parameter_size,
                    tm.memory_sharded_expert) == (one.expert_parallel, one.expert_tensor_parallel,
                                                  one.expert_parameter_size, one.memory_sharded_expert)
            # less work per device, never below a c-th (the ring's exposed transfers and the weights' reduction)
            assert one.time_per_sample / c <= tm.time_per_sample < one.time_per_sample


def test_the_dp_and_brute_force_agree_on_a_tiny_moe_model_with_context_parallelism() -> None:
    cfg = config_from_hf(TINY, name="tiny-moe").with_changes(seq_length=4096)
    setup = TrainingSetup(nodes=1, global_batch=16, context_parallel=2)
    problem = load_problem(build_workload(cfg, H100, setup), strict=True)
    assert set(problem.degrees) <= {2, 4, 8}  # widths t_tensor x 2
    for options in (Options(uniform=True), Options()):
        dp, brute = solve(problem, options, "dp"), solve(problem, options, "brute")
        assert dp.plan is not None and dp.status.value == "optimal"
        assert dp.value == pytest.approx(brute.value, rel=1e-9)
        chosen = check_plan(problem, dp.plan)  # rule 6 over the width
        assert any(c.has_expert_terms for c in chosen.values())


def test_the_planner_searches_context_parallelism_for_moe_mla_and_windows() -> None:
    long = TrainingSetup(nodes=8, global_batch=64, flash_attention=True)
    assert context_parallel_choices(preset("qwen3-30b-a3b").with_changes(seq_length=65536), H100, long, None)[1:]
    assert context_parallel_choices(preset("mixtral-8x7b").with_changes(seq_length=65536), H100, long, None)[1:]
    # MLA: the ring, every power of two leaving >= 4,096 tokens per device
    assert context_parallel_choices(preset("deepseek-v3").with_changes(seq_length=65536), H100, long,
                                    None) == (1, 2, 4, 8, 16)
    # sliding windows: the all-to-all, whose c must split GPT-OSS's 8 key/value heads
    assert context_parallel_choices(preset("gpt-oss-120b").with_changes(seq_length=65536), H100, long,
                                    None) == (1, 2, 4, 8)
