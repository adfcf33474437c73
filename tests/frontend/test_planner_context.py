"""The planner searches the context-parallel size (issue 31): the choices it makes, one workload per
(c, b), and the winner is the best of the separately solved workloads."""

import json

import pytest

from piper import load_problem
from piper.cli.common import run_main
from piper.cli.main import main
from piper.core.options import BATCH_TIME, Options
from piper.frontend import (
    Hardware,
    TrainingSetup,
    TransformerConfig,
    build_workload,
    hardware,
    preset,
)
from piper.frontend.planner import context_parallel_choices, search_plans
from piper.solvers.registry import get_solver

L405 = preset("llama3-405b")
H100 = hardware("h100")


@pytest.mark.parametrize(("seq", "nodes", "kw", "fixed", "max_cp", "expected"), [
    (8192, 2048, {}, None, None, (1,)),  # below 16k tokens: c = 1 only
    (131072, 2048, {}, None, None, (1, 2, 4, 8, 16, 32)),  # s / c >= 4096
    (131072, 2048, {}, None, 8, (1, 2, 4, 8)),  # --max-cp
    (16384, 2048, {}, None, None, (1, 2, 4)),
    (131072, 1, {}, None, None, (1, 2, 4, 8)),  # t_tensor = 1 times c <= 8 devices
    (131072, 2048, {"flash_attention": False}, None, None, (1,)),  # Megatron-Core needs fused attention
    (8192, 2048, {}, 4, None, (4,)),  # --cp fixes it
])
def test_choices(seq, nodes, kw, fixed, max_cp, expected):
    cfg = L405.with_changes(seq_length=seq)
    assert context_parallel_choices(cfg, H100, TrainingSetup(nodes=nodes, **kw), fixed, max_cp) == expected


TOY = TransformerConfig(name="toy", layers=4, hidden_size=64, attention_heads=4, kv_heads=4, ffn_hidden_size=256,
                        vocab_size=128, seq_length=256, micro_batch=1)
HW = Hardware(name="toy", peak_flops=1e12, memory_bytes=1e9, devices_per_node=4, nvlink_bandwidth=1e10,
              network_bandwidth=1e9)


def test_search_picks_the_best_of_the_separate_solves():
    setup = TrainingSetup(nodes=2, global_batch=8, memory_reserve_bytes=0)
    dp = get_solver("dp")
    options = Options(objective=BATCH_TIME, progress=False)
    search = search_plans(TOY, HW, setup, dp, options, micro_batches=(1, 2), free=False, context_parallels=(1, 4))
    assert [(c.context_parallel, c.micro_batch) for c in search.candidates] == [(1, 1), (1, 2), (4, 1), (4, 2)]
    values = {}
    for c in (1, 4):
        for b in (1, 2):
            w = build_workload(TOY.with_changes(micro_batch=b), HW, TrainingSetup(nodes=2, global_batch=8,
                                                                                   memory_reserve_bytes=0,
                                                                                   context_parallel=c))
            assert w["model"].get("contextParallel", 1) == c
            values[c, b] = dp(load_problem(w, strict=True), Options(objective=BATCH_TIME, progress=False,
                                                                     uniform=True)).value
    best = min(values, key=values.__getitem__)
    assert search.runnable.value == values[best]
    assert (search.runnable.context_parallel, search.runnable.micro_batch) == best


def test_plan_cli_records_c(tmp_path, capsys):
    work, plan = tmp_path / "w.json", tmp_path / "p.json"
    args = ["plan", "megatron-1.7b", "--nodes", "1", "--global-batch", "16", "--micro-batch", "1", "--uniform",
            "--max-virtual-stages", "1"]
    assert run_main(main, [*args, "--cp", "2", "--json", "--out", str(work), "--plan-out", str(plan)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context_parallel"] == 2 and out["context_parallel_searched"] == [2]
    assert all(c["context_parallel"] == 2 for c in out["candidates"])
    assert json.loads(work.read_text())["model"]["contextParallel"] == 2
    assert json.loads(plan.read_text())["madeFor"]["contextParallel"] == 2
    assert all(s["tensorParallelDegree"] % 2 == 0 for s in out["plan"]["stages"])
    assert run_main(main, [*args, "--cp", "2"]) == 0
    assert "context-parallel size c = 2" in capsys.readouterr().out
    assert run_main(main, [*args, "--cp", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--cp" in err and "\n" not in err


@pytest.mark.parametrize("flags, first", [
    (["--cp", "4", "--max-cp", "2"], "--cp 4"),
    # below it too: --cp fixed c and --max-cp was ignored without a word
    (["--cp", "2", "--max-cp", "4"], "--cp 2"),
    (["--hierarchical-context-parallel-sizes", "2", "2", "--max-cp", "8"],
     "--hierarchical-context-parallel-sizes 2 2 (c = 4)"),
    (["--schedule", "1f1b", "--max-virtual-stages", "4"], "--max-virtual-stages 4 bounds interleaved plans"),
])
def test_a_fixed_value_and_a_bound_of_its_search_are_one_line(flags, first, capsys):
    assert run_main(main, ["plan", "megatron-1.7b", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"piper: error: {first}") and "give one of them" in err and "\n" not in err
