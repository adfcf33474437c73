"""A small MoE model planned end to end (issue 31): the DP and brute force agree on the front end's
workload with expert layouts (uniform and free plans), and the plan keeps rule 6."""

import pytest

from piper.core.evaluate import check_plan, evaluate
from piper.core.options import Options
from piper.frontend.hardware import hardware
from piper.frontend.hf import config_from_hf
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from piper.solvers.registry import solve

#: 2 layers (5 nodes: brute force's limit is 8), 8 experts, top-2, h 1024
TINY = {"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 2048,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 1024, "num_local_experts": 8, "num_experts_per_tok": 2,
        "tie_word_embeddings": False}


@pytest.mark.parametrize("nodes, uniform", [(1, True), (2, False)])
def test_dp_and_brute_agree_on_a_tiny_moe_model(nodes, uniform):
    cfg = config_from_hf(TINY, name="tiny-moe")
    problem = load_problem(build_workload(cfg, hardware("h100"), TrainingSetup(nodes=nodes, global_batch=32)),
                           strict=True)
    options = Options(uniform=uniform)
    dp, brute = solve(problem, options, "dp"), solve(problem, options, "brute")
    assert dp.plan is not None and brute.plan is not None
    # the objective (TPS by default): equal optima; the plans may differ where they tie
    assert evaluate(problem, dp.plan).tps == pytest.approx(evaluate(problem, brute.plan).tps, rel=1e-9)
    chosen = check_plan(problem, dp.plan)  # rule 6 included
    widths = {c.expert_width for c in chosen.values() if c.has_expert_terms}
    assert widths  # the MoE layers use expert layouts
    for stage in dp.plan.stages:
        for v in stage.nodes:
            assert (stage.d * stage.t) % chosen[v].expert_width == 0


def test_the_planner_searches_one_expert_layout_per_workload():
    from piper.frontend.planner import search_plans
    from piper.solvers.registry import get_solver

    cfg = config_from_hf(TINY, name="tiny-moe")
    search = search_plans(cfg, hardware("h100"), TrainingSetup(nodes=1, global_batch=32), get_solver("dp"),
                          Options(), micro_batches=(1,), free=False)
    assert sorted(c.expert_parallel for c in search.candidates) == [1, 2, 4, 8]
    for c in search.candidates:  # each workload offers its e only
        ids = {tm.id for nd in c.problem.nodes for lst in nd.tmpcs.values() for tm in lst if "+ep" in tm.id}
        assert ids and all(i.endswith(f"+ep{c.expert_parallel}") for i in ids)
    best = search.runnable
    assert best is not None and best.value == min(c.value for c in search.candidates)
