"""docs/problem.md §11 in the evaluator: rule 6 and the expert resync and memory terms, by hand
(the spec's worked check, an interleaved plan, e_t > 1), and bit-for-bit equality without them."""

import random

import pytest

from experiments.lib.instances import random_problem
from piper import evaluate, load_problem, problem_from_dict, problem_to_dict
from piper.core.errors import PlanError
from piper.core.plan import Plan, Schedule, Stage
from tests.helpers import tmpc, workload


def _moe(n=1, *, k=4, N=4, t=1, e=2, e_t=1, w_x=8.0, s_x=16.0, p=4.0):
    c = {**tmpc("moe", p=p), "expertParallel": e, "expertTensorParallel": e_t, "expertParameterSize": w_x,
         "memoryUsageShardedExpertB": s_x}
    return load_problem(workload({v: {t: [c]} for v in range(n)}, [(v, v + 1, 0.0) for v in range(n - 1)],
                                 k=k, N=N, B=1.0, M=1e6))


def _one_stage(nodes, d, t):
    return Plan((Stage(tuple(nodes), d, t, {v: "moe" for v in nodes}),))


def test_worked_check_of_the_spec():
    # p = 4, w = 0, w_x = 8, s_x = 16, e = 2, f = 4, N = 4, B = 1, d = 4, t = 1: r = 2
    p = _moe()
    s = evaluate(p, _one_stage([0], 4, 1))
    assert s.stages[0].resync == 4.0  # R = 4 (2 - 1) 8 / (2 4) = 4 bytes at 1 byte/s
    assert s.stages[0].compute == 1.0
    assert s.tps == 5.0
    assert s.stages[0].memory == 8.0  # s_x / r
    assert s.batch_time == 4 * 5.0  # one stage: N TPS
    # d = 2: r = 1, no expert resync, all of s_x on each device
    s2 = evaluate(p, _one_stage([0], 2, 1))
    assert (s2.tps, s2.stages[0].resync, s2.stages[0].memory) == (2.0, 0.0, 16.0)


def test_rule_6_names_node_tmpc_and_degrees():
    with pytest.raises(PlanError, match=r"rule 6 \(expert parallelism\): node 0 in stage 1 has TMPC 'moe' with "
                                        r"e\*e_t = 2\*1 = 2, which does not divide the stage's d\*t = 1\*1 = 1"):
        evaluate(_moe(), _one_stage([0], 1, 1))
    with pytest.raises(PlanError, match=r"e\*e_t = 4\*2 = 8, which does not divide the stage's d\*t = 2\*2 = 4"):
        evaluate(_moe(k=8, N=8, t=2, e=4, e_t=2), _one_stage([0], 2, 2))


def test_expert_tensor_parallel_and_tensor_degree():
    # e = 2, e_t = 2 (e e_t = 4) at t = 2: d = 2 gives r = 1, d = 4 gives r = 2
    p = _moe(k=8, N=8, t=2, e=2, e_t=2, w_x=8.0, s_x=16.0, p=8.0)
    s = evaluate(p, _one_stage([0], 2, 2))
    assert (s.stages[0].resync, s.stages[0].memory, s.tps) == (0.0, 16.0, 4.0)
    s = evaluate(p, _one_stage([0], 4, 2))
    # R = 4 (2 - 1) 8 / (2 8) = 2; compute 8 / 4 = 2
    assert (s.stages[0].resync, s.stages[0].memory, s.tps) == (2.0, 8.0, 4.0)


def test_interleaved_group_by_hand():
    # 4 layers p = 1, w_x = 8, s_x = 16, e = 2; k = 8, N = 8; L = 2 groups, v = 2, d = 4, t = 1:
    # r = 2; per layer R = 4 (1) 8 / (2 8) = 2 bytes, each group 2 layers: 4 s; compute 2 / 4
    p = _moe(4, k=8, N=8, p=1.0)
    plan = Plan(tuple(Stage((v,), 4, 1, {v: "moe"}) for v in range(4)), Schedule("interleaved", 2))
    s = evaluate(p, plan)
    assert [g.resync for g in s.stages] == [4.0, 4.0]
    assert [g.memory for g in s.stages] == [16.0, 16.0]  # 2 layers x 16 / 2
    assert s.tps == 4.5
    bad = Plan(tuple(Stage((v,), 1, 1, {v: "moe"}) for v in range(4)), Schedule("interleaved", 2))
    with pytest.raises(PlanError, match="rule 6 .* node 0 in chunk 1 .* chunk's d\\*t = 1\\*1 = 1"):
        evaluate(p, bad)


def test_e_one_with_expert_weights_uses_r_equal_d_t():
    # e = e_t = 1: rule 6 holds for every (d, t), r = d t
    p = _moe(k=8, N=8, t=2, e=1, w_x=8.0, s_x=16.0, p=8.0)
    s = evaluate(p, _one_stage([0], 2, 2))
    # r = 4: R = 4 (3) 8 / (4 8) = 3; memory 16 / 4 = 4
    assert (s.stages[0].resync, s.stages[0].memory) == (3.0, 4.0)


def _with_experts(problem, rng, *, zero=False):
    raw = problem_to_dict(problem)
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                c["expertParallel"] = 1 if zero else rng.choice((1, 2))
                if not zero:
                    c["expertParameterSize"] = float(rng.randint(0, 8))
                    c["memoryUsageShardedExpertB"] = float(rng.randint(0, 8))
    return problem_from_dict(raw)


def test_bit_for_bit_without_the_keys_and_with_zero_terms():
    """Keys at their defaults, or e = 2 with w_x = s_x = 0 where rule 6 holds: every number
    (TPS, batch time, each stage's memory and resync) is the one without the keys, bit for bit;
    and w_x, s_x > 0 only ever add."""
    rng = random.Random(5)
    for seed in range(30):
        base = random_problem(seed, n=3, devices=8, microbatches=8, degrees=(1, 2))
        raw = problem_to_dict(base)
        for nd in raw["nodes"]:
            for lst in nd["TMPCs"].values():
                for c in lst:
                    c["expertParallel"] = 2
        e2 = problem_from_dict(raw)
        loaded = _with_experts(base, rng, zero=True)
        t = min(base.nodes[0].tmpcs)
        t_ok = all(t in nd.tmpcs for nd in base.nodes)
        if not t_ok:
            continue
        for d in (2, 4):
            pl = Plan((Stage(tuple(nd.id for nd in base.nodes), d, t,
                             {nd.id: nd.tmpcs[t][0].id for nd in base.nodes}),))
            ref = evaluate(base, pl)
            for other in (loaded, e2):
                got = evaluate(other, pl)
                assert got == ref
            more = evaluate(_with_experts(e2, rng), pl)
            assert more.stages[0].memory >= ref.stages[0].memory
            assert more.stages[0].resync >= ref.stages[0].resync
